package ratelimit

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// HarnessConfig configures the deterministic in-process harness: Nodes
// limiters share one key's limit, with Zipf demand across them, gossip
// through a seeded lossy transport, and take a view change part way.
type HarnessConfig struct {
	Nodes  int
	Seed   uint64
	Epochs int // total epochs simulated
	// ChangeAt is the epoch of the view change: view 2 leaves out
	// Leave (a fraction) of the members, who fall to their panic share.
	ChangeAt int
	Leave    float64
	// Transport faults: probabilities per message of loss, of a second
	// copy, and of an extra delay of up to one epoch (reordering).
	Drop, Duplicate, Reorder float64
	// Limit is L in requests per second; Overload the total demand over L.
	Limit, Overload float64
	Fanout          int
	Epoch           time.Duration
	Plain           bool // UnsafePlainPushSum: the negative control
}

// HarnessResult is what the harness measured.
type HarnessResult struct {
	// Err is, per epoch, the largest relative error of a view member's
	// estimate of the view's total demand; Admitted is what the view's
	// members admitted in that epoch over their part of L (all of L
	// before the change, L·|V2|/N after it).
	Err, Admitted []float64
	// Converged is the number of epochs after the view change until every
	// member's estimate was within 5% and the view's admitted rate within
	// ±5% of its part of L, for three epochs in a row; -1 if never.
	Converged int
	// Steady is the mean admitted/L over the last quarter of the run.
	Steady float64
	// Outside is the admitted rate of the nodes outside view 2 whose
	// demand exceeds their panic share, over that share (L/N each), in
	// the last quarter; 0 if there are none.
	Outside           float64
	Messages, Dropped int
}

func (c HarnessConfig) withDefaults() HarnessConfig {
	if c.Epoch == 0 {
		c.Epoch = DefaultEpoch
	}
	if c.Fanout == 0 {
		c.Fanout = DefaultFanout
	}
	if c.Limit == 0 {
		c.Limit = 20_000
	}
	if c.Overload == 0 {
		c.Overload = 3
	}
	return c
}

type simEvent struct {
	at   int64
	seq  int
	node int
	tick bool
	view *View
	msg  Message
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// RunHarness runs the harness; the same config gives the same result.
func RunHarness(c HarnessConfig) (HarnessResult, error) {
	c = c.withDefaults()
	if c.Nodes < 2 || c.Epochs < 1 {
		return HarnessResult{}, fmt.Errorf("%w: harness needs 2 nodes and 1 epoch", ErrConfig)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	E := int64(c.Epoch)
	lim := Limit{Name: "tenant", Requests: c.Limit, Period: time.Second, Burst: c.Limit / 20}
	names := make([]string, c.Nodes)
	nodes := make([]*Node, c.Nodes)
	lims := make([]*Limiter, c.Nodes)
	phase := make([]int64, c.Nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("p%04d", i)
		n, err := NewNode(names[i], NodeConfig{Epoch: c.Epoch, Fanout: c.Fanout, Seed: c.Seed, UnsafePlainPushSum: c.Plain})
		if err != nil {
			return HarnessResult{}, err
		}
		l, err := NewLimiter(lim, c.Nodes)
		if err != nil {
			return HarnessResult{}, err
		}
		n.SetLimits([]*Limiter{l})
		nodes[i], lims[i] = n, l
		phase[i] = rng.Int64N(E / 20) // ticks align to the epoch on the shared clock, give or take scheduling
	}
	// Zipf(1.1) demand across nodes, total Overload × L.
	demand := make([]float64, c.Nodes)
	tot := 0.0
	for i := range demand {
		demand[i] = 1 / math.Pow(float64(i+1), 1.1)
		tot += demand[i]
	}
	rng.Shuffle(len(demand), func(i, j int) { demand[i], demand[j] = demand[j], demand[i] })
	for i := range demand {
		demand[i] *= c.Overload * c.Limit / tot
	}
	v1 := View{ID: 1, Members: slices.Clone(names), Registered: c.Nodes}
	v2 := View{ID: 2, Registered: c.Nodes}
	out := map[int]bool{}
	for _, i := range rng.Perm(c.Nodes)[:int(c.Leave*float64(c.Nodes))] {
		out[i] = true
	}
	for i, nm := range names {
		if !out[i] {
			v2.Members = append(v2.Members, nm)
		}
	}
	// busy: the nodes left out whose demand exceeds their panic share.
	busy := map[int]bool{}
	for i := range out {
		if demand[i] > 1.2*c.Limit/float64(c.Nodes) {
			busy[i] = true
		}
	}
	idx := map[string]int{}
	for i, nm := range names {
		idx[nm] = i
	}

	var q simQueue
	seq := 0
	push := func(e simEvent) { seq++; e.seq = seq; heap.Push(&q, e) }
	res := HarnessResult{Err: make([]float64, c.Epochs), Admitted: make([]float64, c.Epochs), Converged: -1}
	outsideAdm := 0.0
	members := func(v View) []int {
		var ms []int
		for _, m := range v.Members {
			ms = append(ms, idx[m])
		}
		return ms
	}
	send := func(from int, view View, m Message, now int64) {
		res.Messages++
		if rng.Float64() < c.Drop {
			res.Dropped++
			return
		}
		copies := 1
		if rng.Float64() < c.Duplicate {
			copies = 2
		}
		for range copies {
			d := int64(time.Millisecond) + rng.Int64N(int64(20*time.Millisecond))
			if rng.Float64() < c.Reorder {
				d += rng.Int64N(E)
			}
			push(simEvent{at: now + d, node: idx[view.Members[m.To]], msg: m})
		}
		_ = from
	}
	// The first view reaches every node at once before epoch 0; the second
	// reaches each within an epoch of ChangeAt.
	for i := range nodes {
		nodes[i].SetView(v1)
		push(simEvent{at: phase[i], node: i, tick: true})
		if c.ChangeAt > 0 && c.ChangeAt < c.Epochs {
			v := v2
			push(simEvent{at: int64(c.ChangeAt)*E + rng.Int64N(E), node: i, view: &v})
		}
	}
	carry := make([]float64, c.Nodes)
	last := make([]int64, c.Nodes)
	key := []byte("acme")
	end := int64(c.Epochs) * E
	nextCheck := E
	for q.Len() > 0 {
		e := heap.Pop(&q).(simEvent)
		for e.at >= nextCheck && nextCheck <= end {
			ep := int(nextCheck/E) - 1
			cur := v1
			if ep >= c.ChangeAt && c.ChangeAt > 0 {
				cur = v2
			}
			res.Err[ep] = estimateError(nodes, members(cur))
			nextCheck += E
		}
		if e.at >= end {
			break
		}
		n := nodes[e.node]
		switch {
		case e.view != nil:
			n.SetView(*e.view)
		case e.tick:
			// The requests since the last tick, evenly spaced.
			dt := e.at - last[e.node]
			want := demand[e.node]*float64(dt)/1e9 + carry[e.node]
			k := int(want)
			carry[e.node] = want - float64(k)
			ep := int(e.at / E)
			for r := range k {
				t := last[e.node] + int64(float64(dt)*float64(r+1)/float64(k+1))
				if lims[e.node].Allow(key, t).Allowed {
					switch {
					case !out[e.node] || n.view.ID < 2:
						res.Admitted[ep]++
					case ep >= c.Epochs*3/4 && busy[e.node]:
						outsideAdm++
					}
				}
			}
			last[e.node] = e.at
			view := n.view
			for _, m := range n.Tick(e.at) {
				send(e.node, view, m, e.at)
			}
			push(simEvent{at: e.at + E, node: e.node, tick: true})
		default:
			view := n.view
			if ack, ok := n.Receive(e.msg); ok {
				send(e.node, view, ack, e.at)
			}
		}
	}
	for i := range res.Admitted {
		frac := 1.0
		if c.ChangeAt > 0 && i >= c.ChangeAt {
			frac = float64(len(v2.Members)) / float64(c.Nodes)
		}
		res.Admitted[i] /= frac * c.Limit * c.Epoch.Seconds()
	}
	q4 := c.Epochs * 3 / 4
	res.Steady = mean(res.Admitted[q4:])
	if nb := len(busy); nb > 0 {
		res.Outside = outsideAdm / (float64(nb) * c.Limit / float64(c.Nodes) * c.Epoch.Seconds() * float64(c.Epochs-q4))
	}
	if c.ChangeAt > 0 {
		ok := func(e int) bool { return res.Err[e] < 0.05 && math.Abs(res.Admitted[e]-1) <= 0.05 }
		for e := c.ChangeAt; e+2 < c.Epochs; e++ {
			if ok(e) && ok(e+1) && ok(e+2) {
				res.Converged = e - c.ChangeAt
				break
			}
		}
	}
	return res, nil
}

// estimateError is the largest relative error of the members' estimates
// of their total injected demand.
func estimateError(nodes []*Node, ms []int) float64 {
	total := 0.0
	for _, i := range ms {
		n := nodes[i]
		if g, ok := n.gidx["tenant\x00acme"]; ok && n.inView() {
			total += n.x[g]
		}
	}
	worst := 0.0
	for _, i := range ms {
		n := nodes[i]
		g, ok := n.gidx["tenant\x00acme"]
		if !ok || !n.inView() || n.w <= 0 {
			return math.Inf(1)
		}
		est := float64(len(n.view.Members)) * n.s[g] / n.w
		worst = max(worst, math.Abs(est-total)/total)
	}
	return worst
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// String formats a result on one line.
func (r HarnessResult) String() string {
	return "converged " + strconv.Itoa(r.Converged) + " epochs, steady admitted/limit " +
		strconv.FormatFloat(r.Steady, 'f', 3, 64) + ", outside-view admitted/share " +
		strconv.FormatFloat(r.Outside, 'f', 3, 64) + ", messages " + strconv.Itoa(r.Messages) +
		" dropped " + strconv.Itoa(r.Dropped)
}
