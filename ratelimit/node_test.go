package ratelimit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const epoch = int64(500 * time.Millisecond)

func newNode(t testing.TB, name string, cfg NodeConfig, limits ...Limit) *Node {
	t.Helper()
	n, err := NewNode(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ls []*Limiter
	for _, l := range limits {
		ls = append(ls, newLimiter(t, l, 1))
	}
	n.SetLimits(ls)
	return n
}

// rateOf measures the admitted rate of key at n's first limiter over 10
// s of 100,000 requests a second, from start.
func rateOf(n *Node, key string, start int64) float64 {
	return float64(admitted(n.Limiters()[0], key, start, 10*sec, 200_000)) / 10
}

func TestNoViewPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   NoView
		min, max float64
	}{
		{PanicShare, 100, 100.5}, // L/N_registered = 1000/10, plus the burst over 10 s
		{FailOpen, 20_000, 20_000},
		{FailClosed, 0, 0},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			n := newNode(t, "p1", NodeConfig{}, Limit{Name: "a", Requests: 1000, Burst: 1, OnNoView: tc.policy})
			n.SetRegistered(10)
			n.Tick(epoch)
			if got := rateOf(n, "k", epoch); got < tc.min || got > tc.max {
				t.Fatalf("outside any view admitted %.1f/s, want [%v, %v]", got, tc.min, tc.max)
			}
		})
	}
}

func TestViewLifecycle(t *testing.T) {
	n := newNode(t, "p1", NodeConfig{}, Limit{Name: "a", Requests: 1000, Burst: 1})
	n.SetView(View{ID: 5, Members: []string{"p0", "p1"}, Registered: 4})
	if s := n.Stats(); !s.InView || s.View != 5 || s.Members != 2 || s.Registered != 4 {
		t.Fatalf("after view 5: %+v", s)
	}
	n.SetView(View{ID: 4, Members: []string{"p1"}, Registered: 1}) // older: ignored
	if s := n.Stats(); s.View != 5 {
		t.Fatalf("an older view replaced view 5: %+v", s)
	}
	// Gossip of another view, misaddressed or from itself is dropped and
	// not answered.
	for _, m := range []Message{
		{View: 4, From: 0, To: 1, Seq: 1, W: 1},
		{View: 6, From: 0, To: 1, Seq: 1, W: 1},
		{View: 5, From: 0, To: 0, Seq: 1, W: 1},
		{View: 5, From: 1, To: 1, Seq: 1, W: 1},
		{View: 5, From: 7, To: 1, Seq: 1, W: 1},
		{View: 5, From: 0, To: 1, Seq: 1, W: math.NaN()},
		{View: 5, From: 0, To: 1, Seq: 1, W: 1, Keys: []string{"a\x00k"}, S: []float64{math.Inf(1)}},
	} {
		if _, ok := n.Receive(m); ok {
			t.Errorf("answered %+v", m)
		}
	}
	if s := n.Stats(); s.Foreign != 7 || s.Received != 0 {
		t.Fatalf("after 7 bad messages: %+v", s)
	}
	// A view that leaves this node out, and losing the view, fall to panic.
	n.SetView(View{ID: 6, Members: []string{"p0", "p2"}, Registered: 4})
	n.Tick(epoch)
	if got := rateOf(n, "k", epoch); got < 250 || got > 250.5 {
		t.Fatalf("left out of view 6 admitted %.1f/s, want L/4 = 250", got)
	}
	n.SetView(View{ID: 7, Members: []string{"p1"}, Registered: 4})
	n.ClearView()
	if s := n.Stats(); s.InView {
		t.Fatalf("in a view after ClearView: %+v", s)
	}
	// Without a view, a view with the same id can come back.
	n.SetView(View{ID: 7, Members: []string{"p1"}, Registered: 4})
	if s := n.Stats(); !s.InView || s.View != 7 {
		t.Fatalf("view 7 not reinstalled: %+v", s)
	}
}

// TestSingleMemberViewGetsItsFraction: one member of a view of one, with
// 4 registered, admits L/4.
func TestSingleMemberViewGetsItsFraction(t *testing.T) {
	n := newNode(t, "p1", NodeConfig{ShareSmoothing: 0.01}, Limit{Name: "a", Requests: 1000, Burst: 1})
	n.SetView(View{ID: 1, Members: []string{"p1"}, Registered: 4})
	now := int64(0)
	for range 5 {
		now += epoch
		admitted(n.Limiters()[0], "k", now-epoch, epoch, 1000)
		n.Tick(now)
	}
	if got := rateOf(n, "k", now); got < 249 || got > 251 {
		t.Fatalf("admitted %.1f/s, want L/4 = 250", got)
	}
}

// fleet is a set of nodes with a seeded lossy transport, for property
// tests.
type fleet struct {
	nodes []*Node
	rng   *rand.Rand
	queue []Message
}

func newFleet(t testing.TB, n int, seed uint64, plain bool) *fleet {
	f := &fleet{rng: rand.New(rand.NewPCG(seed, 2))}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("p%02d", i))
	}
	for _, nm := range names {
		nd := newNode(t, nm, NodeConfig{Seed: seed, UnsafePlainPushSum: plain},
			Limit{Name: "a", Requests: 1000}, Limit{Name: "b", Requests: 50})
		nd.SetView(View{ID: 1, Members: names, Registered: n})
		f.nodes = append(f.nodes, nd)
	}
	return f
}

// step runs one epoch: random demand, ticks, and a lossy, duplicating,
// reordering delivery of part of the queue.
func (f *fleet) step(now int64, drop float64) {
	for i, nd := range f.nodes {
		for k := range 1 + f.rng.IntN(50) {
			nd.Limiters()[k%2].Allow(fmt.Appendf(nil, "k%d", (i+k)%3), now)
		}
		f.queue = append(f.queue, nd.Tick(now)...)
	}
	f.rng.Shuffle(len(f.queue), func(i, j int) { f.queue[i], f.queue[j] = f.queue[j], f.queue[i] })
	keep := f.queue[:0]
	var acks []Message
	for _, m := range f.queue {
		switch r := f.rng.Float64(); {
		case r < drop:
		case r < drop+0.2: // delayed to a later epoch
			keep = append(keep, m)
		default:
			copies := 1 + f.rng.IntN(2)
			for range copies {
				if a, ok := f.nodes[m.To].Receive(m); ok {
					acks = append(acks, a)
				}
			}
		}
	}
	f.queue = append(keep, acks...)
}

// conservation returns, for each push-sum key and the weight, the mass at
// the nodes plus the mass sent but not yet applied, minus what the nodes
// injected (their x, and 1 of weight each): zero when no mass is lost or
// made.
func (f *fleet) conservation() map[string]float64 {
	out := map[string]float64{}
	for i, nd := range f.nodes {
		out["w"] += nd.w - 1
		for g, k := range nd.keys {
			out[k] += nd.s[g] - nd.x[g]
		}
		for j, l := range nd.links {
			peer := f.nodes[j].links[uint32(i)]
			out["w"] += l.sigW
			if peer != nil {
				out["w"] -= peer.rhoW
			}
			for g, v := range l.sig {
				k := nd.keys[g]
				out[k] += v
				if peer != nil {
					if pg, ok := f.nodes[j].gidx[k]; ok {
						out[k] -= peer.rho[pg]
					}
				}
			}
		}
	}
	return out
}

func (f *fleet) worst() (string, float64) {
	wk, wv := "", 0.0
	c := f.conservation()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range c {
			if !yield(k) {
				return
			}
		}
	}) {
		if math.Abs(c[k]) > math.Abs(wv) {
			wk, wv = k, c[k]
		}
	}
	return wk, wv
}

// TestConservation: with running sums and acknowledgements, the mass at
// the nodes plus the mass in flight equals what the nodes injected, after
// every epoch, under loss, duplication, reordering and delay.
func TestConservation(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		f := newFleet(t, 12, seed, false)
		for e := int64(1); e <= 40; e++ {
			f.step(e*epoch, 0.2)
			if k, v := f.worst(); math.Abs(v) > 1e-6 {
				t.Fatalf("seed %d epoch %d: key %q: mass off by %g", seed, e, k, v)
			}
		}
	}
}

// TestConservationPlainFails is the property's negative control: plain
// push-sum loses mass under the same transport, and the check sees it.
func TestConservationPlainFails(t *testing.T) {
	f := newFleet(t, 12, 1, true)
	for e := int64(1); e <= 40; e++ {
		f.step(e*epoch, 0.2)
		if k, v := f.worst(); math.Abs(v) > 1e-6 {
			t.Logf("plain push-sum: epoch %d: key %q off by %g", e, k, v)
			return
		}
	}
	t.Fatal("plain push-sum under 20% loss kept its mass: the conservation check is blind")
}

func TestWireRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{View: 9, From: 3, To: 4, Seq: 77, W: 0.25, Keys: []string{"a\x00acme", "b\x00x"}, S: []float64{12.5, -3}},
		{View: 1, From: 0, To: 1, Seq: 2, Ack: true},
	} {
		b, err := AppendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(m) {
			t.Fatalf("round trip: %+v != %+v", got, m)
		}
		for i := range len(b) - 1 {
			if _, err := DecodeMessage(b[:i]); err == nil {
				t.Fatalf("decoded a truncation to %d of %d bytes", i, len(b))
			}
		}
	}
	if _, err := AppendMessage(nil, Message{Keys: make([]string, MaxMessageKeys+1), S: make([]float64, MaxMessageKeys+1)}); err == nil {
		t.Fatal("encoded too many keys")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	b, _ := AppendMessage(nil, Message{View: 9, From: 3, To: 4, Seq: 77, W: 0.25, Keys: []string{"a\x00acme"}, S: []float64{12.5}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		again, err := AppendMessage(nil, m)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if string(again) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func TestBrokenLinks(t *testing.T) {
	names := []string{"p0", "p1", "p2"}
	var nodes []*Node
	for _, nm := range names {
		n := newNode(t, nm, NodeConfig{Fanout: 2}, Limit{Name: "a", Requests: 100})
		n.SetView(View{ID: 1, Members: names, Registered: 3})
		nodes = append(nodes, n)
	}
	// p2 is silent: it receives but never answers. After 3 epochs of
	// resends, p0 and p1 name it; p2 names nobody it hears from.
	for e := int64(1); e <= 4; e++ {
		for i, n := range nodes {
			n.Limiters()[0].Allow([]byte("k"), e*epoch)
			for _, m := range n.Tick(e * epoch) {
				if a, ok := nodes[m.To].Receive(m); ok && m.To != 2 {
					nodes[i].Receive(a)
				}
			}
		}
	}
	for i, want := range [][]string{{"p2"}, {"p2"}, nil} {
		if got := nodes[i].BrokenLinks(3); !slices.Equal(got, want) {
			t.Errorf("p%d broken links %q, want %q", i, got, want)
		}
	}
}
