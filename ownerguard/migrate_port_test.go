package ownerguard

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// bytesMigrator exports n bytes of 'x' per range and counts calls.
type bytesMigrator struct {
	n       int
	exports int
}

func (b *bytesMigrator) Export(_ context.Context, _ ring.Range, _ lease.Gen, w io.Writer) error {
	b.exports++
	_, err := w.Write([]byte(strings.Repeat("x", b.n)))
	return err
}

func (b *bytesMigrator) Import(context.Context, ring.Range, lease.Gen, io.Reader) error { return nil }

// portShell serves MigrationService for an Owner that is not started, with
// one offer of (100, 200] to "b", and returns a client for peer as name
// (over mutual TLS with certificates from one CA when tlsDir is set).
func portShell(t *testing.T, mg Migrator, maxBytes int64, tlsDir string) (*migShell, func(name string) fugev1.MigrationServiceClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := func(name string) *fugetls.Source {
		if tlsDir == "" {
			return nil
		}
		id := fugetls.OwnerID(testNS, name)
		base := fugetls.OwnerBase(testNS, name)
		if err := fugetls.Issue(tlsDir, base, id, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
		s, err := fugetls.NewSource(fugetls.DirFiles(tlsDir, base))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	o, err := NewOwner(OwnerConfig{Managers: []string{"127.0.0.1:1"}, Namespace: testNS, Name: "a", Addr: "127.0.0.1:2",
		Migration: &MigrationConfig{Migrator: mg, Listener: ln, TLS: src("a"), MaxBytes: maxBytes}})
	if err != nil {
		t.Fatal(err)
	}
	m := newMigShell(o, *o.cfg.Migration)
	t.Cleanup(m.stop)
	m.offer([]Offer{{Range: rg(100, 200), Gen: 5, Peer: "b", Deadline: o.clock.Now().Add(time.Minute)}})
	return m, func(name string) fugev1.MigrationServiceClient {
		creds := insecure.NewCredentials()
		if s := src(name); s != nil {
			creds = credentials.NewTLS(s.ClientConfig(fugetls.RoleOwner))
		}
		c, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return fugev1.NewMigrationServiceClient(c)
	}
}

// fetchAll runs a fetch to its end and returns its status code and bytes.
func fetchAll(c fugev1.MigrationServiceClient, req *fugev1.MigrationFetch) (codes.Code, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Fetch(ctx, req)
	if err != nil {
		return status.Code(err), 0
	}
	n := 0
	for {
		ch, err := st.Recv()
		if err == io.EOF {
			return codes.OK, n
		}
		if err != nil {
			return status.Code(err), n
		}
		n += len(ch.Data)
	}
}

// Every field a peer sends MigrationService is checked, and a refused
// fetch takes no offer: the owner named can still fetch it afterwards.
func TestMigrationPortRefusesHostileFetches(t *testing.T) {
	mg := &bytesMigrator{n: 10}
	m, client := portShell(t, mg, 0, "")
	c := client("b")
	good := func() *fugev1.MigrationFetch {
		return &fugev1.MigrationFetch{Namespace: testNS, Owner: "b", Range: wire.Range(rg(100, 200)), Gen: 9}
	}
	for name, tc := range map[string]struct {
		mut  func(*fugev1.MigrationFetch)
		want codes.Code
	}{
		"other namespace": {func(f *fugev1.MigrationFetch) { f.Namespace = "other" }, codes.InvalidArgument},
		"bad owner name":  {func(f *fugev1.MigrationFetch) { f.Owner = "b/../c" }, codes.InvalidArgument},
		"long owner name": {func(f *fugev1.MigrationFetch) { f.Owner = strings.Repeat("b", 300) }, codes.InvalidArgument},
		"no range":        {func(f *fugev1.MigrationFetch) { f.Range = nil }, codes.InvalidArgument},
		"gen 0":           {func(f *fugev1.MigrationFetch) { f.Gen = 0 }, codes.InvalidArgument},
		"not offered":     {func(f *fugev1.MigrationFetch) { f.Range = wire.Range(rg(150, 250)) }, codes.FailedPrecondition},
		"other peer":      {func(f *fugev1.MigrationFetch) { f.Owner = "c" }, codes.FailedPrecondition},
		"whole circle":    {func(f *fugev1.MigrationFetch) { f.Range = wire.Range(ring.Full()) }, codes.FailedPrecondition},
	} {
		f := good()
		tc.mut(f)
		if code, _ := fetchAll(c, f); code != tc.want {
			t.Errorf("%s: code %v, want %v", name, code, tc.want)
		}
		if !m.pending() || mg.exports != 0 {
			t.Fatalf("%s: a refused fetch took the offer or exported", name)
		}
	}
	if code, n := fetchAll(c, good()); code != codes.OK || n != 10 {
		t.Fatalf("the named owner's fetch: %v, %d bytes", code, n)
	}
	if m.pending() {
		t.Error("the offer is still open after its export")
	}
	if code, _ := fetchAll(c, good()); code != codes.FailedPrecondition {
		t.Errorf("a second fetch of one offer: %v", code)
	}
	if got := m.counters(); got.Exports != 1 || got.ExportsRefused != 9 {
		t.Errorf("counters %+v", got)
	}
}

// Over mutual TLS, the identity is the certificate's, not the claimed one.
func TestMigrationPortChecksIdentity(t *testing.T) {
	dir := t.TempDir()
	if err := fugetls.InitDir(dir, fugetls.InitOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	mg := &bytesMigrator{n: 3}
	m, client := portShell(t, mg, 0, dir)
	req := &fugev1.MigrationFetch{Namespace: testNS, Owner: "b", Range: wire.Range(rg(100, 200)), Gen: 9}
	if code, _ := fetchAll(client("c"), req); code != codes.PermissionDenied {
		t.Errorf("c claiming to be b: %v, want PermissionDenied", code)
	}
	if !m.pending() {
		t.Fatal("an impostor's fetch took the offer")
	}
	if code, n := fetchAll(client("b"), req); code != codes.OK || n != 3 {
		t.Errorf("b's fetch: %v, %d bytes", code, n)
	}
}

// An export larger than MaxBytes fails; it does not stream without bound.
func TestMigrationPortBoundsSize(t *testing.T) {
	mg := &bytesMigrator{n: 1000}
	_, client := portShell(t, mg, 999, "")
	req := &fugev1.MigrationFetch{Namespace: testNS, Owner: "b", Range: wire.Range(rg(100, 200)), Gen: 9}
	if code, n := fetchAll(client("b"), req); code != codes.Aborted || n != 0 {
		t.Errorf("oversized export: %v after %d bytes, want Aborted", code, n)
	}
}

// A newer offer of a range supersedes an older, unfetched one.
func TestMigrationOfferSupersedes(t *testing.T) {
	m, _ := portShell(t, &bytesMigrator{}, 0, "")
	now := m.o.clock.Now()
	m.offer([]Offer{{Range: rg(150, 250), Gen: 7, Peer: "c", Deadline: now.Add(time.Minute)}})
	if _, ok := m.take("b", rg(100, 200), now); ok {
		t.Error("the superseded offer to b was served")
	}
	parts, ok := m.take("c", rg(150, 250), now)
	if !ok || len(parts) != 1 || parts[0].Gen != 7 {
		t.Errorf("the newer offer: %+v %v", parts, ok)
	}
}
