package manager_test

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// cluster drives the pure cores of one namespace the way the simulator does,
// with instant, in-order delivery and a fake clock that jumps to the next
// deadline when no message is in flight: a manager, its replicated state
// (every commit applied), owners and one lookup.
type cluster struct {
	tb     testing.TB
	now    time.Time
	m      *manager.Manager
	state  manager.NamespaceState
	owners map[string]*ownerguard.Core
	look   *lb.Core
	queue  []func()
	// commits are the manager's commits with changes, in order.
	commits []manager.Commit
	// onStep, if set, runs after every delivery.
	onStep func()
	// inManager is the time spent in the manager's Request, the leader's
	// share of the work (reported by BenchmarkRequest as manager-ns/op).
	inManager time.Duration
}

const benchNS = "bench"

func newCluster(tb testing.TB, ringSize int) *cluster {
	tb.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := manager.DefaultConfig()
	cfg.Nonce = 7
	m, err := manager.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	nc := manager.NamespaceConfig{Name: benchNS, RingSize: ringSize}
	if err := m.CreateNamespace(nc, now); err != nil {
		tb.Fatal(err)
	}
	st, err := manager.NewNamespaceState(nc, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	lc := lb.DefaultCoreConfig()
	lc.Namespace = benchNS
	look, err := lb.NewCore(lc)
	if err != nil {
		tb.Fatal(err)
	}
	c := &cluster{tb: tb, now: now, m: m, state: st, owners: map[string]*ownerguard.Core{}, look: look}
	c.lookupOut(look.Start(now))
	return c
}

// addOwner starts an owner core; its first request goes into the queue.
func (c *cluster) addOwner(name string, incarnation uint64) {
	cfg := ownerguard.DefaultCoreConfig()
	cfg.Namespace, cfg.Name, cfg.Addr, cfg.Incarnation = benchNS, name, name+":80", incarnation
	o, err := ownerguard.NewCore(cfg)
	if err != nil {
		c.tb.Fatal(err)
	}
	c.owners[name] = o
	c.ownerOut(o.Start(c.now))
}

func (c *cluster) ownerOut(out ownerguard.Output) {
	if out.Send == nil {
		return
	}
	req := *out.Send
	c.queue = append(c.queue, func() {
		t0 := time.Now()
		mo, err := c.m.Request(req, c.now)
		c.inManager += time.Since(t0)
		if err != nil {
			c.tb.Fatal(err)
		}
		c.managerOut(mo)
	})
}

func (c *cluster) managerOut(out manager.Output) {
	for _, cm := range out.Commits {
		if err := c.state.Apply(cm, manager.DefaultConfig().LogRetention); err != nil {
			c.tb.Fatal(err)
		}
		if len(cm.Changes) == 0 {
			continue
		}
		c.commits = append(c.commits, cm)
		push := cm.Push(c.m.Nonce())
		c.queue = append(c.queue, func() { c.lookupOut(c.look.Step(push, c.now)) })
	}
	for _, resp := range out.Send {
		o := c.owners[resp.Owner]
		c.queue = append(c.queue, func() { c.ownerOut(o.Step(resp, c.now)) })
	}
}

func (c *cluster) lookupOut(out lb.Output) {
	if out.Send == nil {
		return
	}
	req := *out.Send
	c.queue = append(c.queue, func() {
		resp, err := c.m.Lookup(req, c.now)
		if err != nil {
			c.tb.Fatal(err)
		}
		c.queue = append(c.queue, func() { c.lookupOut(c.look.Step(resp, c.now)) })
	})
}

// converged reports whether every arc is granted to its desired owner, that
// owner holds it under the manager's generation, and the lookup agrees.
func (c *cluster) converged() bool {
	arcs, err := c.m.Leases(benchNS)
	if err != nil {
		c.tb.Fatal(err)
	}
	d, _ := c.m.DesiredRing(benchNS)
	held := map[string][]lease.Lease{}
	for name, o := range c.owners {
		held[name] = o.Held(c.now)
	}
	for _, a := range arcs {
		if a.State != manager.Granted || a.Owner != d.LookupOwner(a.Range.End) {
			return false
		}
		if l, ok := leaseAt(held[a.Owner], a.Range.End); !ok || l.Gen != a.Gen {
			return false
		}
		if addr, _, gen, ok := c.look.Lookup(a.Range.End); !ok || addr != a.Owner+":80" || gen != a.Gen {
			return false
		}
	}
	return true
}

// run delivers messages until the cluster converges, advancing the clock to
// the next deadline whenever nothing is in flight. It returns the simulated
// time taken.
func (c *cluster) run(limit time.Duration) time.Duration {
	start := c.now
	for {
		for len(c.queue) > 0 {
			f := c.queue[0]
			c.queue = c.queue[1:]
			f()
			if c.onStep != nil {
				c.onStep()
			}
		}
		if c.converged() {
			return c.now.Sub(start)
		}
		next := c.m.NextDeadline()
		for _, o := range c.owners {
			if d := o.NextDeadline(); next.IsZero() || d.Before(next) {
				next = d
			}
		}
		if d := c.look.NextDeadline(); d.Before(next) {
			next = d
		}
		if next.After(c.now) {
			c.now = next
		}
		if c.now.Sub(start) > limit {
			c.tb.Fatalf("not converged after %v", limit)
		}
		c.managerOut(c.m.Tick(c.now))
		for _, name := range slices.Sorted(maps.Keys(c.owners)) {
			c.ownerOut(c.owners[name].Tick(c.now))
		}
		c.lookupOut(c.look.Tick(c.now))
	}
}

// BenchmarkConverge measures the pure cores taking a namespace of ring size
// R from nothing to every arc granted and held by 3 owners ("join3"), and
// then a fourth owner joining, which recalls and re-grants about a quarter of
// the arcs ("join4th"). The lookup follows every change; every commit is
// applied to the replicated state.
func BenchmarkConverge(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		b.Run(fmt.Sprintf("join3/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := newCluster(b, r)
				for i, name := range []string{"a", "b", "c"} {
					c.addOwner(name, uint64(i+1))
				}
				c.run(10 * time.Minute)
			}
		})
		b.Run(fmt.Sprintf("staggered3/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := newCluster(b, r)
				for i, name := range []string{"a", "b", "c"} {
					c.addOwner(name, uint64(i+1))
					c.run(10 * time.Minute)
				}
			}
		})
		b.Run(fmt.Sprintf("join4th/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c := newCluster(b, r)
				for i, name := range []string{"a", "b", "c"} {
					c.addOwner(name, uint64(i+1))
				}
				c.run(10 * time.Minute)
				b.StartTimer()
				c.addOwner("d", 4)
				c.run(10 * time.Minute)
			}
		})
	}
}

// TestConvergeHarness checks that the benchmark's cluster converges and that
// the replicated state matches the manager's view.
func TestConvergeHarness(t *testing.T) {
	c := newCluster(t, 256)
	for i, name := range []string{"a", "b", "c"} {
		c.addOwner(name, uint64(i+1))
	}
	took := c.run(10 * time.Minute)
	c.addOwner("d", 4)
	took += c.run(10 * time.Minute)
	view, err := c.m.View(benchNS)
	if err != nil {
		t.Fatal(err)
	}
	if !sameEntries(view, c.state.Entries.Entries()) {
		t.Fatalf("replicated entries differ from the view:\n%v\n%v", c.state.Entries, view)
	}
	if !sameEntries(view, c.look.Entries()) {
		t.Fatalf("lookup entries differ from the view:\n%v\n%v", c.look.Entries(), view)
	}
	t.Logf("converged in %v of fake time, %d entries", took, len(view))
}

// leaseAt returns the lease of ls, in ring order (by End), containing h.
func leaseAt(ls []lease.Lease, h uint64) (lease.Lease, bool) {
	i, _ := slices.BinarySearchFunc(ls, h, func(l lease.Lease, h uint64) int { return cmp.Compare(l.Range.End, h) })
	if i == len(ls) {
		i = 0
	}
	if i < len(ls) && ls[i].Range.Contains(h) {
		return ls[i], true
	}
	return lease.Lease{}, false
}

func sameEntries(a, b []lease.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Range.IsFull() && y.Range.IsFull() {
			x.Range, y.Range = ring.Full(), ring.Full()
		}
		if x != y {
			return false
		}
	}
	return true
}
