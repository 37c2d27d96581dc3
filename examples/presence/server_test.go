package presence_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

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

// serve runs srv behind a guard named name on 127.0.0.1 and returns its URL.
func serve(t *testing.T, c ownerguard.Checker, srv *presence.Server, name string) string {
	t.Helper()
	g, err := ownerguard.NewGuard(c, ownerguard.GuardConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g.HTTP(srv))
	t.Cleanup(ts.Close)
	return ts.URL
}

// call sends one request with the routing header set to key.
func call(t *testing.T, method, url, key, body string) (status int, answer string, h http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(ownerguard.DefaultKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header
}

func TestServerRules(t *testing.T) {
	f := &fakeOwner{}
	f.gen.Store(7)
	url := serve(t, f, presence.NewServer(f), "p1")
	dev := url + "/devices/d1"
	tests := []struct {
		name, method, url, key, body string
		want                         int
		answer                       string
	}{
		{"unknown device", "GET", dev, "d1", "", 404, ""},
		{"put", "PUT", dev, "d1", "192.0.2.1:4500", 204, ""},
		{"get", "GET", dev, "d1", "", 200, "192.0.2.1:4500"},
		{"overwrite", "PUT", dev, "d1", " 192.0.2.2:4500\n", 204, ""},
		{"get the latest", "GET", dev, "d1", "", 200, "192.0.2.2:4500"},
		{"key is another device", "GET", dev, "d2", "", 400, ""},
		{"no key", "GET", dev, "", "", 400, ""},
		{"empty address", "PUT", dev, "d1", "  ", 400, ""},
		{"address too long", "PUT", dev, "d1", strings.Repeat("a", presence.MaxAddrLen+1), 400, ""},
		{"unknown path", "GET", url + "/other/d1", "d1", "", 404, ""},
		{"unknown method", "DELETE", dev, "d1", "", 405, ""},
	}
	for _, tc := range tests {
		code, answer, h := call(t, tc.method, tc.url, tc.key, tc.body)
		if code != tc.want {
			t.Errorf("%s: status %d (%s), want %d", tc.name, code, answer, tc.want)
			continue
		}
		if tc.answer != "" && answer != tc.answer {
			t.Errorf("%s: answer %q, want %q", tc.name, answer, tc.answer)
		}
		if code < 300 && (h.Get(ownerguard.OwnerHeader) != "p1" || h.Get(ownerguard.GenerationHeader) != "7") {
			t.Errorf("%s: stamped %q gen %q, want p1 gen 7", tc.name, h.Get(ownerguard.OwnerHeader), h.Get(ownerguard.GenerationHeader))
		}
	}
}

// TestServerDiscardsStaleState: state written under generation 1 is not
// served once the key is held under generation 2, though no upcall dropped it.
func TestServerDiscardsStaleState(t *testing.T) {
	f := &fakeOwner{}
	f.gen.Store(1)
	srv := presence.NewServer(f)
	url := serve(t, f, srv, "p1")
	if code, _, _ := call(t, "PUT", url+"/devices/d1", "d1", "old"); code != 204 {
		t.Fatalf("put: %d", code)
	}
	f.gen.Store(2) // lost and granted anew; meanwhile another server may have taken writes
	if srv.Len() != 1 {
		t.Fatalf("held %d devices before the read, want the stale one", srv.Len())
	}
	if code, answer, _ := call(t, "GET", url+"/devices/d1", "d1", ""); code != 404 {
		t.Fatalf("get after a new grant: %d %q, want 404", code, answer)
	}
	if srv.Len() != 0 {
		t.Errorf("stale state kept after the read: %d devices", srv.Len())
	}
}

// TestServerDropKeepsNewState: a late revocation upcall drops only state
// whose lease is gone, not state written since under a new grant.
func TestServerDropKeepsNewState(t *testing.T) {
	f := &fakeOwner{}
	f.gen.Store(1)
	srv := presence.NewServer(f)
	url := serve(t, f, srv, "p1")
	call(t, "PUT", url+"/devices/old", "old", "a")
	f.gen.Store(2)
	call(t, "PUT", url+"/devices/new", "new", "b")
	if n := srv.Drop([]ring.Range{ring.Full()}); n != 1 {
		t.Errorf("dropped %d devices, want the one written under generation 1", n)
	}
	if code, answer, _ := call(t, "GET", url+"/devices/new", "new", ""); code != 200 || answer != "b" {
		t.Errorf("state written under the new grant: %d %q, want 200 b", code, answer)
	}
}

// node is one presence server on 127.0.0.1 with a real Owner.
type node struct {
	name  string
	owner *ownerguard.Owner
	srv   *presence.Server
	url   string
	stop  func()
}

// startNode starts a presence server named name on m. With drop, the
// ownership upcall drops revoked state, as cmd/presence-server does.
func startNode(t *testing.T, m *fugetest.Manager, name string, drop bool) *node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, url: "http://" + ln.Addr().String()}
	cfg := ownerguard.OwnerConfig{
		Managers: []string{m.GRPCAddr}, Namespace: m.NS, Name: name, Addr: ln.Addr().String(), LeaseDuration: m.T,
	}
	if drop {
		cfg.OnOwnership = func(_, revoked []ring.Range) { n.srv.Drop(revoked) }
	}
	o, err := ownerguard.NewOwner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.owner, n.srv = o, presence.NewServer(o)
	g, err := ownerguard.NewGuard(o, ownerguard.GuardConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: g.HTTP(n.srv)}
	go hs.Serve(ln)
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.stop = func() { hs.Close(); o.Close() }
	t.Cleanup(n.stop)
	fugetest.Wait(t, "owner "+name+" ready", o.Ready())
	return n
}

// settled waits until the manager has granted every arc to the nodes, the
// lookup shows it, and each node's owner holds its arcs under the lookup's
// generations (the lookup may hear of a grant before the owner does).
func settled(t *testing.T, m *fugetest.Manager, l *lb.Lookup, nodes ...*node) {
	t.Helper()
	byName := map[string]*node{}
	var names []string
	for _, n := range nodes {
		byName[n.name] = n
		names = append(names, n.name)
	}
	m.Settled(t, l, names...)
	fugetest.Eventually(t, "the owners to hold what the lookup shows", func() bool {
		for _, e := range l.Entries() {
			h, ok := byName[e.Owner].owner.GetOwnershipHandle(e.Range.End)
			if !ok || h.Gen != e.Gen {
				return false
			}
		}
		return true
	})
}

// holder returns the node the lookup routes id to, and the generation.
func holder(t *testing.T, l *lb.Lookup, nodes []*node, id string) (*node, uint64) {
	t.Helper()
	addr, _, gen, ok := l.LookupKey(id)
	for _, n := range nodes {
		if ok && n.url == "http://"+addr {
			return n, uint64(gen)
		}
	}
	t.Fatalf("no node holds %s (lookup: %q ok=%v)", id, addr, ok)
	return nil, 0
}

// TestServiceOverRealLeases runs two servers under a real manager: each
// device is served by the server holding its lease, stamped with its name
// and generation, and refused (421) by the other.
func TestServiceOverRealLeases(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	nodes := []*node{startNode(t, m, "a", true), startNode(t, m, "b", true)}
	l := m.Lookup(t, "test", nil)
	settled(t, m, l, nodes...)
	served := map[string]int{}
	for i := range 40 {
		id := fmt.Sprintf("dev-%d", i)
		n, gen := holder(t, l, nodes, id)
		addr := fmt.Sprintf("192.0.2.%d:4500", i)
		if code, body, _ := call(t, "PUT", n.url+"/devices/"+id, id, addr); code != 204 {
			t.Fatalf("put %s on %s: %d %s", id, n.name, code, body)
		}
		code, answer, h := call(t, "GET", n.url+"/devices/"+id, id, "")
		if code != 200 || answer != addr {
			t.Fatalf("get %s on %s: %d %q, want 200 %q", id, n.name, code, answer, addr)
		}
		if h.Get(ownerguard.OwnerHeader) != n.name || h.Get(ownerguard.GenerationHeader) != strconv.FormatUint(gen, 10) {
			t.Errorf("get %s: stamped %s gen %s, want %s gen %d", id, h.Get(ownerguard.OwnerHeader), h.Get(ownerguard.GenerationHeader), n.name, gen)
		}
		other := nodes[0]
		if other == n {
			other = nodes[1]
		}
		if code, _, _ := call(t, "GET", other.url+"/devices/"+id, id, ""); code != http.StatusMisdirectedRequest {
			t.Errorf("get %s on %s, which does not hold it: %d, want 421", id, other.name, code)
		}
		served[n.name]++
	}
	if len(served) != 2 {
		t.Errorf("devices spread over %v, want both servers", served)
	}
}

// TestStaleStateAfterRegrant: a writes every device under generation g;
// b joins, takes some ranges, and leaves, so a holds them again under g' > g.
// The ownership upcall is not wired, so a still has the old records; the
// five-step check alone must keep them from being served.
func TestStaleStateAfterRegrant(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	a := startNode(t, m, "a", false)
	l := m.Lookup(t, "test", nil)
	settled(t, m, l, a)
	const devices = 60
	before := map[string]uint64{}
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		_, before[id] = holder(t, l, []*node{a}, id)
		if code, _, _ := call(t, "PUT", a.url+"/devices/"+id, id, "old-"+id); code != 204 {
			t.Fatalf("put %s: %d", id, code)
		}
	}
	b := startNode(t, m, "b", false)
	settled(t, m, l, a, b)
	b.stop()
	settled(t, m, l, a)
	if a.srv.Len() != devices {
		t.Fatalf("a holds %d records, want all %d (nothing dropped them)", a.srv.Len(), devices)
	}
	moved, stayed := 0, 0
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		_, gen := holder(t, l, []*node{a}, id)
		code, answer, _ := call(t, "GET", a.url+"/devices/"+id, id, "")
		switch {
		case gen == before[id]:
			stayed++
			if code != 200 || answer != "old-"+id {
				t.Errorf("%s never moved (gen %d): %d %q, want 200", id, gen, code, answer)
			}
		case gen > before[id]:
			moved++
			if code != 404 {
				t.Errorf("STALE: %s written under gen %d, read under gen %d: %d %q, want 404", id, before[id], gen, code, answer)
			}
		default:
			t.Errorf("%s: generation went back from %d to %d", id, before[id], gen)
		}
	}
	if moved == 0 || stayed == 0 {
		t.Errorf("moved %d, stayed %d: the test needs both", moved, stayed)
	}
	t.Logf("%d devices came back to a under a new generation, %d never moved", moved, stayed)
}

// TestDropOnRevoke: with the upcall wired, a server forgets the devices of
// the ranges it hands to a newcomer and keeps the rest.
func TestDropOnRevoke(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	a := startNode(t, m, "a", true)
	l := m.Lookup(t, "test", nil)
	settled(t, m, l, a)
	const devices = 60
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		if code, _, _ := call(t, "PUT", a.url+"/devices/"+id, id, "addr-"+id); code != 204 {
			t.Fatalf("put %s: %d", id, code)
		}
	}
	b := startNode(t, m, "b", true)
	settled(t, m, l, a, b)
	nodes := []*node{a, b}
	onA := 0
	for i := range devices {
		if n, _ := holder(t, l, nodes, fmt.Sprintf("dev-%d", i)); n == a {
			onA++
		}
	}
	if onA == devices || onA == 0 {
		t.Fatalf("%d of %d devices stayed on a: the test needs some to move", onA, devices)
	}
	fugetest.Eventually(t, "a to drop the moved devices", func() bool { return a.srv.Len() == onA })
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		if n, _ := holder(t, l, nodes, id); n == a {
			if code, answer, _ := call(t, "GET", a.url+"/devices/"+id, id, ""); code != 200 || answer != "addr-"+id {
				t.Errorf("%s stayed on a: %d %q", id, code, answer)
			}
		}
	}
}
