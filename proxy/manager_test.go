package proxy

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/ring"
)

// TestManagerRouting runs the proxy as fuge-proxy runs, following a real
// manager's lease table from its own Lookup, in front of two owners: every
// key reaches the owner the manager names, under the manager's generation.
func TestManagerRouting(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	owners := map[string]*testOwner{"a": startOwner(t, "a", nil), "b": startOwner(t, "b", nil)}
	for name, o := range owners {
		m.Owner(t, name, o.addr, nil)
	}
	l := m.Lookup(t, "test", nil)
	m.Settled(t, l, "a", "b")
	arcs, err := m.Arcs()
	if err != nil {
		t.Fatal(err)
	}
	// holder returns the owner and generation the manager names for key.
	holder := func(key string) (string, uint64) {
		h := ring.HashString(key)
		for _, a := range arcs {
			s, err1 := strconv.ParseUint(a.Start, 16, 64)
			e, err2 := strconv.ParseUint(a.End, 16, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("arc %+v", a)
			}
			if (ring.Range{Start: s, End: e}).Contains(h) {
				return a.Owner, a.Generation
			}
		}
		t.Fatalf("no arc holds %x", h)
		return "", 0
	}

	p := startProxy(t, func(c *Config) {
		c.Managers = []string{m.GRPCAddr}
		c.Namespace = m.NS
		c.LookupStalenessBound = m.T
	})
	c := newClient(t)
	admin := "http://" + p.AdminAddr().String()
	fugetest.Eventually(t, "the proxy's table", func() bool {
		resp, _ := do(t, c, "GET", admin+"/healthz", "")
		return resp.StatusCode == 200
	})
	url := "http://" + p.Addr().String() + "/"
	check := func(key string) error {
		owner, gen := holder(key)
		resp, body := do(t, c, "GET", url, "", DefaultHeader, key)
		if resp.StatusCode != 200 || body != owner || resp.Header.Get("Got-Generation") != strconv.FormatUint(gen, 10) {
			return fmt.Errorf("key %q: %d from %q under generation %q, want %s under %d",
				key, resp.StatusCode, body, resp.Header.Get("Got-Generation"), owner, gen)
		}
		return nil
	}
	// The proxy's Lookup may trail the test's by a push; wait until it has
	// the settled table, then hold it to every key.
	fugetest.Eventually(t, "the proxy to route like the manager", func() bool { return check("probe") == nil })
	for i := range 300 {
		if err := check(fmt.Sprintf("user-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if owners["a"].hits.Load() == 0 || owners["b"].hits.Load() == 0 {
		t.Fatalf("hits a=%d b=%d: want both", owners["a"].hits.Load(), owners["b"].hits.Load())
	}
	if s := p.Stats(); s.Misroutes != 0 || s.Retries != 0 || s.Owners != 2 {
		t.Fatalf("stats %+v", s)
	}

	// The baseline over the same table: keys ignored, owners in turn.
	rr := startProxy(t, func(c *Config) {
		c.Managers = []string{m.GRPCAddr}
		c.Namespace = m.NS
		c.Balance = BalanceRoundRobin
		c.MissingKey = MissingKeyRoundRobin
	})
	fugetest.Eventually(t, "the round-robin proxy's table", func() bool {
		resp, _ := do(t, c, "GET", "http://"+rr.AdminAddr().String()+"/healthz", "")
		return resp.StatusCode == 200
	})
	seen := map[string]int{}
	for i := range 100 {
		var headers []string
		if i%2 == 0 {
			headers = []string{DefaultHeader, "same"}
		}
		resp, body := do(t, c, "GET", "http://"+rr.Addr().String()+"/", "", headers...)
		if resp.StatusCode != 200 || resp.Header.Get("Got-Generation") != "" {
			t.Fatalf("round robin: %d %q, generation %q", resp.StatusCode, body, resp.Header.Get("Got-Generation"))
		}
		seen[body]++
	}
	if seen["a"] != 50 || seen["b"] != 50 {
		t.Fatalf("round robin spread %v, want 50 each", seen)
	}
}
