package manager

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// newBalanceManager returns a manager whose namespace "ns" runs policy.
func newBalanceManager(t testing.TB, r int, policy string, cfg Config) *Manager {
	t.Helper()
	cfg.LeaseDuration, cfg.RaceBackoffMin, cfg.RaceBackoffMax = 60*time.Second, 100*time.Millisecond, time.Second
	cfg.Nonce = 7
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CreateNamespace(NamespaceConfig{Name: "ns", RingSize: r, Balance: policy, BalanceInterval: 20 * time.Second}, t0); err != nil {
		t.Fatal(err)
	}
	return m
}

// report sends one request of o carrying load.
func report(t testing.TB, m *Manager, o *owner, load float64, now time.Time, os []*owner) {
	t.Helper()
	req := o.request()
	req.Load = &lease.LoadReport{Rate: load}
	out, err := m.Request(req, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range os {
		p.accept(out)
	}
}

func sumVNodes(t testing.TB, m *Manager) map[string]int {
	t.Helper()
	os, err := m.Owners("ns")
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]int{}
	sum := 0
	for _, o := range os {
		v[o.Name] = o.VNodes
		sum += o.VNodes
	}
	if sum != 64 {
		t.Fatalf("Σ V_h = %d, want 64: %v", sum, v)
	}
	return v
}

// TestSeedsMovesThroughRecall: an owner 50% above the mean loses one
// virtual node to the least loaded per round; the move is a recall, then a
// grant once released, never two holders; Σ V = R throughout; the counts
// are committed, and the committed state's RingView is the leader's
// desired ring.
func TestSeedsMovesThroughRecall(t *testing.T) {
	m := newBalanceManager(t, 64, BalanceSeeds, DefaultConfig())
	os := []*owner{{name: "a", nonce: 1}, {name: "b", nonce: 2}, {name: "c", nonce: 3}, {name: "d", nonce: 4}}
	exchange(t, m, t0, os...)
	before := sumVNodes(t, m)
	st0, _ := m.State("ns")
	now := t0.Add(30 * time.Second)
	loads := map[string]float64{"a": 150, "b": 100, "c": 90, "d": 60}
	for _, o := range os {
		report(t, m, o, loads[o.name], now, os)
	}
	at := m.NextDeadline()
	if at.IsZero() || at.After(now.Add(20*time.Second)) {
		t.Fatalf("no policy round queued: next deadline %v", at)
	}
	out := m.Tick(at)
	for _, o := range os {
		o.accept(out)
	}
	after := sumVNodes(t, m)
	if after["a"] != before["a"]-1 || after["d"] != before["d"]+1 {
		t.Fatalf("seeds: counts %v -> %v; want a to give one to d", before, after)
	}
	// The moved arcs are recalled, not granted, in this step.
	arcs, _ := m.Leases("ns")
	recalling := 0
	for _, a := range arcs {
		if a.State == Recalling {
			recalling++
			if a.Owner != "a" && a.Owner != "b" && a.Owner != "c" {
				t.Errorf("arc %v recalled from %q", a.Range, a.Owner)
			}
		}
	}
	if recalling == 0 {
		t.Fatal("the move recalled nothing")
	}
	if len(out.Commits) == 0 || len(out.Commits[0].OwnerUpserts) == 0 {
		t.Fatal("the move committed no owner records")
	}
	st := st0
	for _, c := range out.Commits {
		if err := st.Apply(c, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	view, err := st.RingView()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := m.DesiredRing("ns")
	for _, o := range view.Owners {
		if want := after[o.Name]; o.VNodes != want {
			t.Errorf("committed ring view gives %s %d vnodes, leader's desired ring %d", o.Name, o.VNodes, want)
		}
	}
	if len(d.Owners()) != len(view.Owners) {
		t.Errorf("view has %d owners, desired ring %d", len(view.Owners), len(d.Owners()))
	}
	for _, o := range os {
		p, _ := m.Request(o.request(), at)
		for _, q := range os {
			q.accept(p)
		}
	}
	exchange(t, m, at, os...)
	assertConverged(t, m, os)
	bs, _ := m.BalanceStats("ns")
	if bs.VNodesMoved != 1 || bs.MovingRounds != 1 || bs.RangesMoved == 0 {
		t.Errorf("stats %+v", bs)
	}
	// A round right after: reports are older than the move; nothing moves.
	m.Tick(at.Add(20 * time.Second))
	if again := sumVNodes(t, m); !reflect.DeepEqual(again, after) {
		t.Errorf("moved again on stale reports: %v -> %v", after, again)
	}
	// Fresh reports after the move finished (the first report saw it done)
	// and half an interval more: the next round moves again.
	later := at.Add(25 * time.Second)
	for _, o := range os {
		report(t, m, o, loads[o.name], later, os)
	}
	later = later.Add(15 * time.Second)
	for _, o := range os {
		report(t, m, o, loads[o.name], later, os)
	}
	for m.NextDeadline().Before(later.Add(30 * time.Second)) {
		next := m.NextDeadline()
		if next.IsZero() {
			break
		}
		out := m.Tick(next)
		for _, o := range os {
			o.accept(out)
		}
	}
	if again := sumVNodes(t, m); again["a"] != after["a"]-1 {
		t.Errorf("no second move on fresh reports: %v -> %v (stats %+v)", after, again, func() BalanceStats { b, _ := m.BalanceStats("ns"); return b }())
	}
}

// assertConverged checks that every arc is granted to its desired owner
// and that the owners' held sets are disjoint.
func assertConverged(t *testing.T, m *Manager, os []*owner) {
	t.Helper()
	d, _ := m.DesiredRing("ns")
	arcs, _ := m.Leases("ns")
	for _, a := range arcs {
		if a.State != Granted || a.Owner != d.LookupOwner(a.Range.End) {
			t.Fatalf("arc %v: %s %q, desired %q", a.Range, a.State, a.Owner, d.LookupOwner(a.Range.End))
		}
	}
	for _, o := range os {
		for _, l := range o.held {
			for _, a := range arcs {
				if l.Range.Contains(a.Range.End) && a.Owner != o.name {
					t.Fatalf("%s holds %v, the table gives it to %s", o.name, l.Range, a.Owner)
				}
			}
		}
	}
}

// TestLoadReportRefused: a report with a NaN, infinite or negative figure,
// a wrong number of groups, too many hot keys or one twice, is refused with an error naming the field,
// and changes nothing: not the session, not the counters, not the state.
func TestLoadReportRefused(t *testing.T) {
	m := newBalanceManager(t, 64, BalanceFit, DefaultConfig())
	a := &owner{name: "a", nonce: 1}
	exchange(t, m, t0, a)
	// An accepted report first, so that a refused one could overwrite it.
	good := a.request()
	good.Load = &lease.LoadReport{Rate: 4, Hot: []lease.HotKey{{Hash: 42, Rate: 3}}}
	if _, err := m.Request(good, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	st0, _ := m.State("ns")
	stats0 := m.Stats()
	loads0, _ := m.Loads("ns")
	if l := loads0["a"]; l.Rate != 4 || len(l.Hot) != 1 || l.Hot[0] != (lease.HotKey{Hash: 42, Rate: 3}) {
		t.Fatalf("the accepted report was recorded as %+v", l)
	}
	for field, l := range map[string]lease.LoadReport{
		"load.rate":        {Rate: math.NaN()},
		"load.rate ":       {Rate: math.Inf(1)},
		"load.rate  ":      {Rate: -3},
		"load.groups":      {Rate: 1, Groups: make([]float64, 3)},
		"load.groups[5]":   {Rate: 1, Groups: append(make([]float64, 5), append([]float64{math.NaN()}, make([]float64, 58)...)...)},
		"load.hot has 9":   {Rate: 1, Hot: make([]lease.HotKey, lease.MaxHotKeys+1)},
		"load.hot[1].rate": {Rate: 1, Hot: []lease.HotKey{{Hash: 1, Rate: 1}, {Hash: 2, Rate: math.Inf(1)}}},
		"load.hot[1].hash": {Rate: 1, Hot: []lease.HotKey{{Hash: 7, Rate: 1}, {Hash: 7, Rate: 1}}},
	} {
		req := a.request()
		a.seq-- // a refused request is not sent again under a new seq
		req.Load = &l
		_, err := m.Request(req, t0.Add(10*time.Second)) // past minLoadGap: it would be recorded
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), strings.TrimSpace(field)) {
			t.Errorf("%s: %v; want ErrBadRequest naming the field", field, err)
		}
	}
	st1, _ := m.State("ns")
	loads1, _ := m.Loads("ns")
	if !reflect.DeepEqual(st0, st1) || m.Stats() != stats0 || !reflect.DeepEqual(loads0, loads1) || !m.NextDeadline().Equal(m.NextDeadline()) {
		t.Fatal("a refused load report changed the manager")
	}
	if l := loads1["a"]; !l.ReportedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("a refused report was recorded: %+v", l)
	}
}

// TestLoadReportRate: reports sooner than T/16 after the last accepted one
// are ignored.
func TestLoadReportRate(t *testing.T) {
	m := newBalanceManager(t, 64, BalanceFit, DefaultConfig())
	a := &owner{name: "a", nonce: 1}
	exchange(t, m, t0, a)
	report(t, m, a, 5, t0.Add(time.Second), []*owner{a})
	report(t, m, a, 7, t0.Add(2*time.Second), []*owner{a}) // 1 s later: T/16 is 3.75 s
	l, _ := m.Loads("ns")
	if l["a"].Rate != 5 {
		t.Fatalf("rate %v, want the first report's 5", l["a"].Rate)
	}
	report(t, m, a, 9, t0.Add(6*time.Second), []*owner{a})
	if l, _ := m.Loads("ns"); l["a"].Rate != 9 {
		t.Fatalf("rate %v, want 9", l["a"].Rate)
	}
	if bs, _ := m.BalanceStats("ns"); bs.Reports != 2 || bs.ReportsIdle != 1 {
		t.Fatalf("stats %+v", bs)
	}
}

// TestBalanceConfig: the namespace's balancing fields are validated, with
// the field named.
func TestBalanceConfig(t *testing.T) {
	m := newTestManager(t, 64)
	for field, nc := range map[string]NamespaceConfig{
		"balance":           {Name: "x", Balance: "magic"},
		"balance interval":  {Name: "x", BalanceInterval: time.Millisecond},
		"balance max moves": {Name: "x", RingSize: 64, BalanceMaxMoves: 65},
		"balance min load":  {Name: "x", BalanceMinLoad: math.Inf(1)},
	} {
		if err := m.CreateNamespace(nc, t0); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
	if ns := m.Namespaces(); len(ns) != 1 || ns[0].Balance != DefaultBalance {
		t.Fatalf("namespaces %+v", ns)
	}
}

// TestReapportion: without moves, a membership change gives Apportion's
// even split as before; after moves, owners keep their relative weights and
// Σ stays R.
func TestReapportion(t *testing.T) {
	even, _ := ring.Apportion([]string{"a", "b", "c"}, 64)
	prev := map[string]int{}
	for _, o := range even {
		prev[o.Name] = o.VNodes
	}
	got := vnodeCounts([]string{"a", "b", "c", "d"}, prev, 64)
	want, _ := ring.Apportion([]string{"a", "b", "c", "d"}, 64)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("even: %v, want %v", got, want)
	}
	skew := map[string]int{"a": 40, "b": 16, "c": 8}
	got = vnodeCounts([]string{"a", "b", "c"}, skew, 64)
	if got[0].VNodes != 40 || got[1].VNodes != 16 || got[2].VNodes != 8 {
		t.Fatalf("same members: %v", got)
	}
	got = vnodeCounts([]string{"a", "c", "d"}, skew, 64)
	sum := 0
	for _, o := range got {
		sum += o.VNodes
	}
	if sum != 64 || got[0].Name != "a" || got[0].VNodes <= got[1].VNodes {
		t.Fatalf("b left: %v", got)
	}
	got = vnodeCounts([]string{"a", "b", "c", "d", "e"}, map[string]int{"a": 62, "b": 1, "c": 1}, 8)
	for _, o := range got {
		if o.VNodes < 1 {
			t.Fatalf("an owner got no vnode: %v", got)
		}
	}
}

// TestFitPlan: on a synthetic pool where one owner carries twice the mean,
// fit moves virtual nodes away from it, keeps Σ, does nothing inside the
// band, and the pool simulated with load proportional to arc share
// converges without oscillating.
func TestFitPlan(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	const R = 1024
	counts, _ := ring.Apportion(names, R)
	// density: a's arcs carry 3x the load of the others'.
	dens := map[string]float64{"a": 3, "b": 1, "c": 1, "d": 1, "e": 1}
	loadOf := func(r *ring.Ring) map[string]float64 {
		out := map[string]float64{}
		for p := range r.Len() {
			out[r.OwnerName(p)] += r.Arc(p).Share()
		}
		return out
	}
	p := &fitPolicy{}
	var history []float64
	moves := 0
	for round := range 40 {
		r, err := ring.New(counts)
		if err != nil {
			t.Fatal(err)
		}
		shares := groupShares(r)
		share := loadOf(r)
		in := BalanceInput{RingSize: R, Ring: r, MaxMoves: 32}
		var total float64
		// Load: the key space in a's first arcs is hot; model it as a
		// density per owner name fixed to the keys: a key's load is
		// dens of the owner that held it at the start.
		for _, o := range counts {
			l := share[o.Name] * 1000 * dens[o.Name]
			total += l
			in.Owners = append(in.Owners, OwnerLoad{Name: o.Name, VNodes: o.VNodes, Load: l, Share: shares[o.Name]})
		}
		mean := total / float64(len(names))
		mx := 0.0
		for _, o := range in.Owners {
			mx = max(mx, o.Load/mean)
		}
		history = append(history, mx)
		ms := p.Plan(in)
		if round == 0 && len(ms) == 0 {
			t.Fatal("fit moved nothing from an owner at 2x the mean")
		}
		sum := 0
		for _, mv := range ms {
			sum += mv.N
			counts, err = ring.MoveVNodes(counts, mv.From, mv.To, mv.N)
			if err != nil {
				t.Fatal(err)
			}
		}
		if sum > 32 {
			t.Fatalf("round %d moved %d > MaxMoves", round, sum)
		}
		moves += sum
		// The synthetic load follows the owner, not the keys: dens is per
		// owner, so moving vnodes from a lowers a's load by their share.
	}
	last := history[len(history)-1]
	if last > 1.10 {
		t.Fatalf("fit did not converge: max/mean by round %v", history)
	}
	// No oscillation: the last rounds move nothing.
	r, _ := ring.New(counts)
	shares, share := groupShares(r), loadOf(r)
	in := BalanceInput{RingSize: R, Ring: r, MaxMoves: 32}
	for _, o := range counts {
		in.Owners = append(in.Owners, OwnerLoad{Name: o.Name, VNodes: o.VNodes, Load: share[o.Name] * 1000 * dens[o.Name], Share: shares[o.Name]})
	}
	if ms := p.Plan(in); len(ms) != 0 {
		t.Fatalf("converged pool (max/mean %.3f) still moves %v", last, ms)
	}
	t.Logf("max/mean by round %.3f; %d vnodes moved", history, moves)
}

// BenchmarkBalanceRound is the leader's cost of one policy round that moves
// nothing (the steady state) and of the planning alone of one that moves,
// for 10 and 100 owners at R = 4096, with per-group reports.
func BenchmarkBalanceRound(b *testing.B) {
	for _, policy := range []string{BalanceSeeds, BalanceFit} {
		for _, owners := range []int{10, 100} {
			names := make([]string, owners)
			for i := range names {
				names[i] = fmt.Sprintf("owner-%03d", i)
			}
			counts, _ := ring.Apportion(names, 4096)
			r, _ := ring.New(counts)
			shares := groupShares(r)
			mk := func(skew float64) BalanceInput {
				in := BalanceInput{RingSize: 4096, Ring: r, MaxMoves: 32}
				for i, o := range counts {
					l := 1000.0
					if i == 0 {
						l *= skew
					}
					g := make([]float64, lease.LoadGroups)
					for k := range g {
						g[k] = l * shares[o.Name][k] / (float64(o.VNodes) / 4096)
					}
					in.Owners = append(in.Owners, OwnerLoad{Name: o.Name, VNodes: o.VNodes, Load: l, Groups: g, Share: shares[o.Name]})
				}
				return in
			}
			for _, c := range []struct {
				name string
				skew float64
			}{{"steady", 1.02}, {"moving", 1.5}} {
				in := mk(c.skew)
				b.Run(fmt.Sprintf("%s/owners=%d/%s", policy, owners, c.name), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						newPolicy(policy).Plan(in)
					}
				})
			}
		}
	}
}
