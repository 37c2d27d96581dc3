package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/fugetls"
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
	m      *fugetest.Manager
	honest []*backend
	arcs   string // the lease table before the attack
	raft   string // the raft membership before the attack
	heap0  uint64
	rss0   uint64
}

// harm is what an attack did to the pool over the window after it.
type harm struct {
	what       string        // the first thing found harmed, or ""
	leasesLost int           // arcs no longer held as before
	renewalMax time.Duration // the honest owners' longest renewal answer
	heapGrowth int64         // the live heap after, minus before the attack
	rssGrowth  int64         // the process's RSS after, minus before (under -race it counts the detector's shadow memory)
}

// summary collects one line per attack, printed by TestMain.
var summary struct {
	sync.Mutex
	lines []string
}

func report(t *testing.T, attack string, h harm) {
	line := fmt.Sprintf("hostile: %-20s leases lost %d, honest renewal max %v, manager heap %+d MiB, RSS %+d MiB", attack, h.leasesLost, h.renewalMax.Round(time.Millisecond), h.heapGrowth>>20, h.rssGrowth>>20)
	t.Log(line)
	summary.Lock()
	summary.lines = append(summary.lines, line)
	summary.Unlock()
}

func TestMain(m *testing.M) {
	code := m.Run()
	summary.Lock()
	if len(summary.lines) > 0 {
		fmt.Println("hostile-client suite (goal: 0 leases lost, renewal max under T/10 = 200ms, manager memory under +100 MiB):")
		for _, l := range summary.lines {
			fmt.Println("  " + l)
		}
	}
	summary.Unlock()
	os.Exit(code)
}

func hostilePool(t *testing.T, o fugetest.Options) *pool {
	t.Helper()
	if o.T == 0 {
		o.T = 2 * time.Second
	}
	m := fugetest.StartManager(t, o)
	a, b := startBackend(t, m, "honest-a"), startBackend(t, m, "honest-b")
	l := m.Lookup(t, "watcher", nil)
	m.Settled(t, l, "honest-a", "honest-b")
	p := &pool{m: m, honest: []*backend{a, b}}
	var err1, err2 error
	p.arcs, err1 = p.tableNow()
	p.raft, err2 = p.membersNow()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	p.heap0, p.rss0 = heapInUse(), rss()
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
	resp, err := p.m.AdminClient().Get(p.m.AdminURL("/v1/cluster"))
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

// unharmed watches, for a whole lease period after the attack, that the
// honest owners keep every lease, that their renewals are answered, that
// the membership does not change and that the heap stays bounded. It
// returns what it measured; h.what is empty when nothing was harmed.
func (p *pool) unharmed(t *testing.T) (h harm) {
	t.Helper()
	deadline := time.Now().Add(p.m.T * 65 / 60)
	defer func() { h.heapGrowth, h.rssGrowth = int64(heapInUse())-int64(p.heap0), int64(rss())-int64(p.rss0) }()
	for {
		for _, b := range p.honest {
			h.renewalMax = max(h.renewalMax, b.owner.Stats().LastWait)
		}
		got, err := p.tableNow()
		switch {
		case err != nil:
			h.what = "the manager stopped serving its lease table: " + err.Error()
			return h
		case got != p.arcs:
			h.leasesLost = lost(p.arcs, got)
			h.what = "the lease table changed: " + shorten(got)
			return h
		}
		got, err = p.membersNow()
		switch {
		case err != nil:
			h.what = "the manager stopped answering: " + err.Error()
			return h
		case got != p.raft:
			h.what = "the raft membership changed: " + got
			return h
		}
		if g := heapInUse(); g > p.heap0+100<<20 {
			h.what = fmt.Sprintf("the live heap grew by %d MiB", (g-p.heap0)>>20)
			return h
		}
		if h.renewalMax > p.m.T/10 {
			h.what = fmt.Sprintf("an honest renewal took %v (bound T/10 = %v)", h.renewalMax, p.m.T/10)
			return h
		}
		if time.Now().After(deadline) {
			return h
		}
		time.Sleep(50 * time.Millisecond) // sampling over a fixed window, not waiting for an outcome
	}
}

// check runs unharmed, reports its figures under the test's name, and
// fails the test if the pool was harmed.
func (p *pool) check(t *testing.T) {
	t.Helper()
	h := p.unharmed(t)
	report(t, strings.TrimPrefix(t.Name(), "TestHostile"), h)
	if h.what != "" {
		t.Fatal(h.what)
	}
}

// lost counts the arcs of before (as tableNow prints them) missing from
// after.
func lost(before, after string) int {
	have := map[string]bool{}
	for _, a := range strings.Fields(after) {
		have[a] = true
	}
	n := 0
	for _, a := range strings.Fields(before) {
		if !have[a] {
			n++
		}
	}
	return n
}

// rss is this process's resident set after returning free memory to the
// OS: the manager runs in the test process, and what the attacker built
// (its request, its connection's buffers) is garbage by then.
func rss() uint64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb uint64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// attackLease opens an owner stream and sends req; it returns the status
// the manager ended the stream with.
func attackLease(t *testing.T, m *fugetest.Manager, req *fugev1.LeaseRequest, opts ...grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(m.GRPCAddr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64 << 20))}, opts...)...)
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
	if err := st.Send(req); err != nil && err != io.EOF {
		return err
	}
	// io.EOF from Send: the server ended the stream; Recv has its status.
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
	p.check(t)
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
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "allows at most 1024") {
		t.Fatalf("got %v, want InvalidArgument: more ranges than arcs", err)
	}
	t.Logf("refused in %v: %.120s", time.Since(start), status.Convert(err).Message())
	p.check(t)
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
	p.check(t)
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
	// Debugging endpoints need the admin token, and are off without --pprof.
	for tok, want := range map[string]int{"": http.StatusUnauthorized, token: http.StatusNotFound} {
		req, _ := http.NewRequest(http.MethodGet, p.m.AdminURL("/debug/pprof/"), nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("pprof without --pprof, token %q: %v %v, want %d", tok, err, resp.Status, want)
		}
		resp.Body.Close()
	}
	p.check(t)
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
	req, _ := http.NewRequest(http.MethodPost, m.AdminURL(path), bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := m.AdminClient().Do(req)
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
		if harm := p.unharmed(t).what; harm == "" {
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
		if harm := p.unharmed(t).what; harm == "" {
			t.Fatal("100,000 ranges were accepted and changed nothing the test sees")
		} else {
			t.Logf("without the defence: %s", harm)
		}
	})
	t.Run("join", func(t *testing.T) {
		p := hostilePool(t, fugetest.Options{UnsafeNoInputChecks: true})
		code, body := postAdmin(t, p.m, "/v1/cluster/join", map[string]string{"id": "ghost", "raft_addr": "127.0.0.1:1", "grpc_addr": "127.0.0.1:2", "http_addr": "127.0.0.1:3"}, "")
		t.Logf("join without the defence: %d %.200s", code, body)
		if harm := p.unharmed(t).what; harm == "" {
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

// TestHostileIdentity: with mutual TLS (the default outside tests), a
// client without a certificate cannot open a session, an owner cannot take
// another owner's name, a router cannot join the pool, and a router cannot
// change the cluster.
func TestHostileIdentity(t *testing.T) {
	p := hostilePool(t, fugetest.Options{TLS: true})
	m := p.m
	bare := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))
	for _, c := range []struct {
		what string
		req  *fugev1.LeaseRequest
		opts []grpc.DialOption
		code codes.Code
	}{
		{"plaintext", ownerRequest(m, "honest-a", "127.0.0.1:9"), nil, codes.Unavailable},
		{"TLS without a certificate", ownerRequest(m, "honest-a", "127.0.0.1:9"), []grpc.DialOption{bare}, codes.Unavailable},
		{"another owner's certificate", ownerRequest(m, "honest-a", "127.0.0.1:9"), m.DialOptions(t, fugetls.OwnerID(m.NS, "mallory")), codes.PermissionDenied},
		{"a router's certificate", ownerRequest(m, "evil", "127.0.0.1:9"), m.DialOptions(t, fugetls.ProxyID("evil")), codes.PermissionDenied},
		{"its own name in another namespace", ownerRequest(m, "mallory", "127.0.0.1:9"), m.DialOptions(t, fugetls.OwnerID("other", "mallory")), codes.PermissionDenied},
	} {
		err := attackLease(t, m, c.req, c.opts...)
		if status.Code(err) != c.code {
			t.Fatalf("%s: got %v, want %v", c.what, err, c.code)
		}
		t.Logf("%s: refused: %.160s", c.what, status.Convert(err).Message())
	}
	// The admin API: no certificate is 401 naming what is missing; a
	// router's certificate may read but not write.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := noCert.Get(m.AdminURL("/v1/cluster"))
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(refusal.Error, "client certificate") {
		t.Fatalf("status without a certificate: %s %q", resp.Status, refusal.Error)
	}
	router := &http.Client{Transport: &http.Transport{TLSClientConfig: m.Source(t, fugetls.ProxyID("r1")).ClientConfig(fugetls.RoleManager)}}
	b, _ := json.Marshal(map[string]any{"name": "evil", "ring_size": 8})
	resp, err = router.Post(m.AdminURL("/v1/namespaces"), "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("namespace create with a router's certificate: %s, want 403", resp.Status)
	}
	p.check(t)
}

// TestNegativeControlHostileIdentity: without TLS, anyone may join the
// pool under a name of their choosing and take a share of the keys.
func TestNegativeControlHostileIdentity(t *testing.T) {
	p := hostilePool(t, fugetest.Options{})
	conn, err := grpc.NewClient(p.m.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := fugev1.NewOwnerServiceClient(conn).Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(ownerRequest(p.m, "evil", "127.0.0.1:9")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("without TLS the session was refused: %v", err)
	}
	if harm := p.unharmed(t).what; harm == "" {
		t.Fatal("a stranger's session changed nothing the test sees")
	} else {
		t.Logf("without TLS: %s", harm)
	}
}

// TestHostileSessionFlood: one client opening owner sessions as fast as it
// can is cut off after its burst (ResourceExhausted), before the leader
// reads its requests; the honest owners, other clients, are not.
func TestHostileSessionFlood(t *testing.T) {
	p := hostilePool(t, fugetest.Options{TLS: true, SessionRate: 1, SessionBurst: 10})
	opts := p.m.DialOptions(t, fugetls.OwnerID("elsewhere", "mallory"))
	limited := 0
	for range 30 {
		req := ownerRequest(p.m, "mallory", "127.0.0.1:9")
		req.Namespace = "elsewhere"
		if err := attackLease(t, p.m, req, opts...); status.Code(err) == codes.ResourceExhausted {
			limited++
		}
	}
	if limited < 15 {
		t.Fatalf("%d of 30 session opens were cut off, want at least 15 past a burst of 10 at 1/s", limited)
	}
	t.Logf("%d of 30 session opens cut off", limited)
	p.check(t)
}

// TestNegativeControlHostileSessionFlood: with a bucket larger than the
// flood, nothing is cut off, so the assertion above can fail.
func TestNegativeControlHostileSessionFlood(t *testing.T) {
	p := hostilePool(t, fugetest.Options{TLS: true, SessionRate: 1, SessionBurst: 100})
	opts := p.m.DialOptions(t, fugetls.OwnerID("elsewhere", "mallory"))
	for range 30 {
		req := ownerRequest(p.m, "mallory", "127.0.0.1:9")
		req.Namespace = "elsewhere"
		if err := attackLease(t, p.m, req, opts...); status.Code(err) == codes.ResourceExhausted {
			t.Fatalf("cut off within the burst: %v", err)
		}
	}
}

// TestHostileCrossOriginWrite: a page of another site cannot make a
// browser that holds an admin's credentials drain an owner (CSRF).
func TestHostileCrossOriginWrite(t *testing.T) {
	const token = "0123456789abcdef-test-token"
	p := hostilePool(t, fugetest.Options{AdminToken: token})
	for _, h := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Sec-Fetch-Site": "cross-site"},
	} {
		req, _ := http.NewRequest(http.MethodPost, p.m.AdminURL("/v1/namespaces/"+p.m.NS+"/owners/honest-a/drain"), strings.NewReader("{}"))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("drain with %v: %s, want 403", h, resp.Status)
		}
	}
	p.check(t)
}

// TestNegativeControlHostileCrossOriginWrite: without the origin check, a
// cross-site drain with the admin's credentials goes through and the
// honest owner loses its leases.
func TestNegativeControlHostileCrossOriginWrite(t *testing.T) {
	const token = "0123456789abcdef-test-token"
	p := hostilePool(t, fugetest.Options{AdminToken: token, UnsafeNoInputChecks: true})
	req, _ := http.NewRequest(http.MethodPost, p.m.AdminURL("/v1/namespaces/"+p.m.NS+"/owners/honest-a/drain"), strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if harm := p.unharmed(t).what; harm == "" {
		t.Fatalf("a cross-site drain (%s) changed nothing the test sees", resp.Status)
	} else {
		t.Logf("without the defence (%s): %s", resp.Status, harm)
	}
}
