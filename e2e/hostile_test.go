package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/internal/fugetest"
)

// The hostile-client suite (issue 11): each attack, from a client with
// nothing but the documented ports, against a real manager with two honest
// owners holding leases. Each asserts that the attack is refused with a
// clear error, that the honest owners keep every lease (same arcs, same
// generations), that the raft membership is unchanged and that the
// manager's heap stays bounded. Each has a negative control: the same
// attack with the defence switched off (ServerConfig.UnsafeNoInputChecks)
// makes the same assertions fail.

// pool is a manager with two honest owners that hold every arc.
type pool struct {
	m     *fugetest.Manager
	arcs  string // the lease table before the attack
	raft  string // the raft membership before the attack
	heap0 uint64
}

func hostilePool(t *testing.T, o fugetest.Options) *pool {
	t.Helper()
	if o.T == 0 {
		o.T = 2 * time.Second
	}
	m := fugetest.StartManager(t, o)
	startBackend(t, m, "honest-a")
	startBackend(t, m, "honest-b")
	l := m.Lookup(t, "watcher", nil)
	m.Settled(t, l, "honest-a", "honest-b")
	p := &pool{m: m}
	var err1, err2 error
	p.arcs, err1 = p.tableNow()
	p.raft, err2 = p.membersNow()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	p.heap0 = heapInUse()
	return p
}

func (p *pool) tableNow() (string, error) {
	arcs, err := p.m.Arcs()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, a := range arcs {
		fmt.Fprintf(&b, "%s/%d/%s ", a.Owner, a.Generation, a.State)
	}
	return b.String(), nil
}

func (p *pool) membersNow() (string, error) {
	resp, err := http.Get("http://" + p.m.HTTPAddr + "/v1/cluster")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var c struct {
		Role    string `json:"role"`
		Servers []struct {
			ID, Address string
		} `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %v", c.Role, c.Servers), nil
}

// unharmed checks, for a whole lease period after the attack, that the
// honest owners kept every lease and the membership did not change, and
// returns what differs (empty: unharmed).
func (p *pool) unharmed(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(p.m.T * 65 / 60)
	for {
		got, err := p.tableNow()
		switch {
		case err != nil:
			return "the manager stopped serving its lease table: " + err.Error()
		case got != p.arcs:
			return "the lease table changed: " + shorten(got)
		}
		got, err = p.membersNow()
		switch {
		case err != nil:
			return "the manager stopped answering: " + err.Error()
		case got != p.raft:
			return "the raft membership changed: " + got
		}
		if h := heapInUse(); h > p.heap0+100<<20 {
			return fmt.Sprintf("the live heap grew by %d MiB", (h-p.heap0)>>20)
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(50 * time.Millisecond) // sampling over a fixed window, not waiting for an outcome
	}
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// attackLease opens an owner stream and sends req; it returns the status
// the manager ended the stream with.
func attackLease(t *testing.T, m *fugetest.Manager, req *fugev1.LeaseRequest) error {
	t.Helper()
	conn, err := grpc.NewClient(m.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := fugev1.NewOwnerServiceClient(conn).Lease(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(req); err != nil {
		return err
	}
	_, err = st.Recv()
	if err == nil {
		return nil // accepted
	}
	return err
}

func ownerRequest(m *fugetest.Manager, name, addr string) *fugev1.LeaseRequest {
	return &fugev1.LeaseRequest{Namespace: m.NS, Owner: name, Addr: addr,
		Header: &fugev1.Header{Nonce: 7, Seq: 1}, LeaseDurationMs: m.T.Milliseconds()}
}

// TestHostileLongOwnerName: a registration with a 64 KiB name.
func TestHostileLongOwnerName(t *testing.T) {
	p := hostilePool(t, fugetest.Options{})
	err := attackLease(t, p.m, ownerRequest(p.m, strings.Repeat("n", 64<<10), "127.0.0.1:1"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "owner must be 1 to 253 bytes") {
		t.Fatalf("got %v, want InvalidArgument naming the owner field", err)
	}
	if harm := p.unharmed(t); harm != "" {
		t.Fatal(harm)
	}
	t.Logf("refused: %v", status.Convert(err).Message())
}

// TestHostileManyRanges: one request holding far more ranges than the ring
// has arcs, in random order.
func TestHostileManyRanges(t *testing.T) {
	p := hostilePool(t, fugetest.Options{})
	req := ownerRequest(p.m, "attacker", "127.0.0.1:2")
	req.Held = tinyRanges(100_000)
	start := time.Now()
	err := attackLease(t, p.m, req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 arcs") {
		t.Fatalf("got %v, want InvalidArgument: more ranges than arcs", err)
	}
	t.Logf("refused in %v: %.120s", time.Since(start), status.Convert(err).Message())
	if harm := p.unharmed(t); harm != "" {
		t.Fatal(harm)
	}
}

// tinyRanges returns n one-hash ranges spread over the circle, unsorted.
func tinyRanges(n int) []*fugev1.Lease {
	out := make([]*fugev1.Lease, n)
	for i := range n {
		x := uint64(i) * 0x9E3779B97F4A7C15
		out[i] = &fugev1.Lease{Range: &fugev1.Range{Start: x, End: x + 1}, Gen: 1}
	}
	return out
}

// TestHostileJoin: a join naming a voter that does not exist, and one that
// names the real node with another address.
func TestHostileJoin(t *testing.T) {
	p := hostilePool(t, fugetest.Options{})
	for _, j := range []map[string]string{
		{"id": "ghost", "raft_addr": "127.0.0.1:1", "grpc_addr": "127.0.0.1:2", "http_addr": "127.0.0.1:3"},
		{"id": "m1", "raft_addr": "127.0.0.1:4", "grpc_addr": "127.0.0.1:5", "http_addr": "127.0.0.1:6"},
	} {
		code, body := postAdmin(t, p.m, "/v1/cluster/join", j, "")
		if code != http.StatusConflict {
			t.Fatalf("join %v: %d %s, want 409", j, code, body)
		}
		t.Logf("join %s at %s refused: %s", j["id"], j["raft_addr"], body)
	}
	if harm := p.unharmed(t); harm != "" {
		t.Fatal(harm)
	}
}

// TestHostileAdminWrites: with an admin token, a namespace create, a drain
// and a join without it are refused (401) and change nothing; with it, the
// create works. /debug/pprof is off by default.
func TestHostileAdminWrites(t *testing.T) {
	const token = "0123456789abcdef-test-token"
	p := hostilePool(t, fugetest.Options{AdminToken: token})
	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/namespaces", map[string]any{"name": "evil", "ring_size": 8}},
		{"/v1/namespaces/" + p.m.NS + "/owners/honest-a/drain", nil},
		{"/v1/cluster/join", map[string]string{"id": "ghost", "raft_addr": "127.0.0.1:1"}},
	} {
		if code, body := postAdmin(t, p.m, c.path, c.body, "wrong-token"); code != http.StatusUnauthorized {
			t.Fatalf("POST %s with a wrong token: %d %s", c.path, code, body)
		}
		if code, body := postAdmin(t, p.m, c.path, c.body, ""); code != http.StatusUnauthorized {
			t.Fatalf("POST %s without a token: %d %s", c.path, code, body)
		}
	}
	if resp, err := http.Get("http://" + p.m.HTTPAddr + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("pprof without --pprof: %v %v", err, resp.Status)
	}
	if harm := p.unharmed(t); harm != "" {
		t.Fatal(harm)
	}
	if code, body := postAdmin(t, p.m, "/v1/namespaces", map[string]any{"name": "good", "ring_size": 8}, token); code/100 != 2 {
		t.Fatalf("create with the token: %d %s", code, body)
	}
}

func postAdmin(t *testing.T, m *fugetest.Manager, path string, body any, token string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	if body == nil {
		b = nil
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+m.HTTPAddr+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, strings.TrimSpace(out.String())
}

// TestNegativeControlHostile runs the attacks against a manager with its
// defences switched off: each must harm the pool or be accepted, so the
// assertions above can fail.
func TestNegativeControlHostile(t *testing.T) {
	t.Run("long name", func(t *testing.T) {
		p := hostilePool(t, fugetest.Options{UnsafeNoInputChecks: true})
		if err := attackLease(t, p.m, ownerRequest(p.m, strings.Repeat("n", 64<<10), "127.0.0.1:1")); status.Code(err) == codes.InvalidArgument {
			t.Fatalf("refused without the defence: %v", err)
		}
		if harm := p.unharmed(t); harm == "" {
			t.Fatal("a 64 KiB owner name was accepted and changed nothing the test sees")
		} else {
			t.Logf("without the defence: %s", harm)
		}
	})
	t.Run("many ranges", func(t *testing.T) {
		p := hostilePool(t, fugetest.Options{UnsafeNoInputChecks: true})
		req := ownerRequest(p.m, "attacker", "127.0.0.1:2")
		req.Held = tinyRanges(100_000)
		err := attackLease(t, p.m, req)
		t.Logf("without the defence: %v", err)
		if harm := p.unharmed(t); harm == "" {
			t.Fatal("100,000 ranges were accepted and changed nothing the test sees")
		} else {
			t.Logf("without the defence: %s", harm)
		}
	})
	t.Run("join", func(t *testing.T) {
		p := hostilePool(t, fugetest.Options{UnsafeNoInputChecks: true})
		code, body := postAdmin(t, p.m, "/v1/cluster/join", map[string]string{"id": "ghost", "raft_addr": "127.0.0.1:1", "grpc_addr": "127.0.0.1:2", "http_addr": "127.0.0.1:3"}, "")
		t.Logf("join without the defence: %d %.200s", code, body)
		if harm := p.unharmed(t); harm == "" {
			t.Fatal("a made-up voter changed nothing the test sees")
		} else {
			t.Logf("without the defence: %s", harm)
		}
	})
}

// heapInUse is this process's live heap after a collection: the manager
// runs in the test process, so what it keeps shows here, while the
// attacker's own garbage (the request it built) does not.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
