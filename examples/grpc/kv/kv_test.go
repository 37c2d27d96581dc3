package kv_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/examples/grpc/kv"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

const defaultTestTimeout = 30 * time.Second

// serve runs srv on ln behind a guard over c, named name.
func serve(t *testing.T, ln net.Listener, c ownerguard.Checker, srv *kv.Server, name string) {
	t.Helper()
	g, err := ownerguard.NewGuard(c, ownerguard.GuardConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(g.UnaryServerInterceptor()))
	srv.Register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// retry calls fn until it does not fail as misdirected, as kv-client does.
func retry(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !ownerguard.IsMisdirected(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond): // back off while the range changes hands
		}
	}
}

// TestThroughXDS runs the example end to end: a manager, two kv servers and
// a client that dials xds:///ns. Every key is answered by the server the
// lease table names, and reads return what was written.
//
// At R = 65536 it also shows that importing kv raises grpc-go's ring size
// cap (package ringhashcap): with the default cap of 4096 grpc-go would
// build a smaller ring and keep sending many keys to the wrong server.
func TestThroughXDS(t *testing.T) {
	for _, r := range []int{256, 65536} {
		t.Run("R="+strconv.Itoa(r), func(t *testing.T) { throughXDS(t, r, false) })
	}
	// Mutual TLS: the servers hold their names' owner certificates, and
	// grpc-go's xDS client reaches the manager with the "tls" channel
	// credentials of the bootstrap (gRFC A65) and a proxy certificate.
	t.Run("TLS", func(t *testing.T) { throughXDS(t, 256, true) })
}

func throughXDS(t *testing.T, r int, withTLS bool) {
	// A longer lease at R = 65536: an owner request there costs the
	// manager milliseconds (tens under -race), and renewals every 0.5 s
	// would let leases lapse on a loaded machine.
	//
	// The waits guard against a hang; they measure nothing. Settling at
	// R = 65536 (half of the ring's 65,536 vnodes moving to the second
	// server) took 2 s without the race detector and 16-29 s with it beside
	// two busy loops on this 2-core machine, so it gets more than the
	// default 30 s.
	T, wait := 2*time.Second, defaultTestTimeout
	if r > 4096 {
		T, wait = 10*time.Second, 2*time.Minute
	}
	m := fugetest.StartManager(t, fugetest.Options{RingSize: r, T: T, TLS: withTLS, Timeout: wait})
	for _, name := range []string{"s1", "s2"} {
		ln := listen(t)
		o := m.Owner(t, name, ln.Addr().String(), nil)
		serve(t, ln, o, kv.NewServer(o), name)
	}
	l := m.Lookup(t, "l", nil)
	m.Settled(t, l, "s1", "s2")
	var files *fugetls.Files
	if withTLS {
		f := fugetls.DirFiles(m.CertDir, fugetls.ProxyBase)
		files = &f
	}
	cc, err := kv.Dial([]string{m.GRPCAddr}, m.NS, "kv-test", files)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	per := map[string]int{}
	for i := range 100 {
		k := "key-" + strconv.Itoa(i)
		var hdr metadata.MD
		if err := retry(ctx, func() error { return kv.Put(ctx, cc, k, []byte("v"+k), grpc.Header(&hdr)) }); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		if got, err := get(ctx, cc, k, grpc.Header(&hdr)); err != nil || string(got) != "v"+k {
			t.Fatalf("get %s = %q, %v; want %q", k, got, err, "v"+k)
		}
		// The lookup learns of a change after the servers do (balancing is
		// on, and may move or regrant a key's arc at any time), so the
		// owner and generation that answered must be the lookup's for the
		// key once it has caught up, not necessarily at this instant.
		o, g := hdr.Get("fuge-owner"), hdr.Get("fuge-generation")
		if len(o) != 1 || len(g) != 1 {
			t.Fatalf("key %s answered with owner %v and generation %v, want one of each", k, o, g)
		}
		var want lease.Entry
		fugetest.EventuallyWithin(t, wait, "the lookup to name "+o[0]+" under generation "+g[0]+" for "+k+", as the answer did", func() bool {
			for _, e := range l.Entries() {
				if e.Range.Contains(ring.HashString(k)) {
					want = e
				}
			}
			return want.Owner == o[0] && strconv.FormatUint(uint64(want.Gen), 10) == g[0]
		})
		per[want.Owner]++
	}
	if len(per) != 2 {
		t.Errorf("keys spread over %v, want both servers", per)
	}
	if _, err := get(ctx, cc, "missing"); status.Code(err) != codes.NotFound {
		t.Errorf("get of a missing key: %v, want NotFound", err)
	}
}

// get is kv.Get, retried while misdirected.
func get(ctx context.Context, cc *grpc.ClientConn, k string, opts ...grpc.CallOption) ([]byte, error) {
	var v []byte
	err := retry(ctx, func() error {
		var err error
		v, err = kv.Get(ctx, cc, k, opts...)
		return err
	})
	return v, err
}

// fakeOwner holds every key under one generation, which a test changes to
// simulate a loss and a new grant.
type fakeOwner struct{ gen atomic.Uint64 }

func (f *fakeOwner) GetOwnershipHandle(h uint64) (ownerguard.Handle, bool) {
	g := f.gen.Load()
	return ownerguard.Handle{Key: h, Range: ring.Full(), Gen: lease.Gen(g)}, g != 0
}

func (f *fakeOwner) CheckContinuousOwnership(h ownerguard.Handle) bool {
	return h.Gen != 0 && uint64(h.Gen) == f.gen.Load()
}

// TestStaleValueNotServed: a value written under a generation that was lost
// since is never served, and Drop forgets it; a key not held is refused as
// misdirected.
func TestStaleValueNotServed(t *testing.T) {
	f := &fakeOwner{}
	f.gen.Store(7)
	srv := kv.NewServer(f)
	ln := listen(t)
	serve(t, ln, f, srv, "s1")
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()

	if err := kv.Put(ctx, cc, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, cc, "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if v, err := kv.Get(ctx, cc, "a"); err != nil || string(v) != "1" {
		t.Fatalf("get a = %q, %v; want 1", v, err)
	}
	f.gen.Store(0) // lost
	if _, err := kv.Get(ctx, cc, "a"); !ownerguard.IsMisdirected(err) {
		t.Fatalf("get while not held: %v, want misdirected", err)
	}
	f.gen.Store(9) // granted again: "a" and "b" may have been written elsewhere meanwhile
	if _, err := kv.Get(ctx, cc, "a"); status.Code(err) != codes.NotFound {
		t.Fatalf("get of a value from generation 7 under 9: %v, want NotFound", err)
	}
	if n := srv.Drop([]ring.Range{ring.Full()}); n != 1 || srv.Len() != 0 {
		t.Fatalf("Drop = %d, Len %d; want 1 (b), 0", n, srv.Len())
	}
}
