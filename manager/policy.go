package manager

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Balancing policies (NamespaceConfig.Balance). A policy only ever changes
// the owners' virtual-node counts V_h, keeping Σ V_h = R: the desired ring
// changes, and the lease table follows it through recall then grant, as it
// does for a drain (Centrifuge §2.1.2, PRS §4.5).
const (
	// BalanceOff never moves a virtual node: every owner keeps its share
	// of the ring, whatever its load.
	BalanceOff = "off"
	// BalanceSeeds is the papers' policy (Centrifuge §2.1.2, PRS §4.5):
	// an owner more than 10% above the mean load loses a virtual node to
	// the least-loaded owner; at most one per owner per round.
	BalanceSeeds = "seeds"
	// BalanceFit estimates the load of each arc a move would hand over,
	// from the owners' per-group loads, and makes the moves that even out
	// the estimated loads most, several per round (see fitPolicy).
	BalanceFit = "fit"
	// DefaultBalance is the policy of a namespace that names none: fit,
	// which beat the papers' rule on make bench-balance (max/mean 1.05
	// within 60 s at Zipf 0.8, where seeds stayed at 1.18; see README,
	// "Load balancing"). A namespace whose owners report no load, or a
	// mean load under BalanceMinLoad, never moves; one that must not move
	// keys for load at all says off.
	DefaultBalance = BalanceFit
)

// Defaults of the balancing knobs of NamespaceConfig.
const (
	// DefaultBalanceInterval is the time between policy rounds. A round
	// after one that moved virtual nodes waits until those moves are done
	// and every owner has reported since (see balancer.round).
	DefaultBalanceInterval = 15 * time.Second
	// DefaultBalanceMaxMoves bounds the virtual nodes moved per round:
	// 64 of R = 4096 is 1.6% of the circle.
	DefaultBalanceMaxMoves = 64
	// DefaultBalanceMinLoad is the mean load (in the owners' unit, by
	// default admitted requests per second) below which no round moves
	// anything: at a few requests a second the reports are mostly noise.
	DefaultBalanceMinLoad = 10
)

// ValidBalance reports whether name names a policy.
func ValidBalance(name string) bool {
	switch name {
	case BalanceOff, BalanceSeeds, BalanceFit:
		return true
	}
	return false
}

// Policy decides, once per round, which virtual nodes to move. It runs on
// the leader only, from soft state (the owners' latest load reports), so it
// may keep state of its own between rounds (for hysteresis); a new leader
// starts it afresh. Plan must be deterministic and cost O(owners) plus
// O(log R) per move it considers.
type Policy interface {
	Name() string
	// Plan returns the moves of one round, at most in.MaxMoves virtual
	// nodes in all. The core checks them: a move from or to an owner not
	// in in.Owners, or one that would leave its giver without a virtual
	// node, is dropped.
	Plan(in BalanceInput) []VNodeMove
}

// BalanceInput is what a policy sees in a round.
type BalanceInput struct {
	RingSize int
	// Ring is the desired ring, which the lease table has reached.
	Ring *ring.Ring
	// Owners are the owners of Ring, sorted by name, with fresh reports.
	Owners   []OwnerLoad
	MaxMoves int
}

// OwnerLoad is one owner's latest report and ring share.
type OwnerLoad struct {
	Name   string
	VNodes int
	Load   float64
	// Groups is the report's per-group load, or nil if it had none.
	Groups []float64
	// Share is the fraction of the circle the owner's arcs cover in each
	// range group; Σ over owners and groups is 1. Filled only for policies
	// that ask for it (wantShares).
	Share *[lease.LoadGroups]float64
}

// VNodeMove moves N virtual nodes from one owner to another: From's
// highest-index entries leave the ring, To's next indices join it.
type VNodeMove struct {
	From, To string
	N        int
}

func (m VNodeMove) String() string { return fmt.Sprintf("%s->%s×%d", m.From, m.To, m.N) }

// newPolicy returns a fresh policy by name; nil for off.
func newPolicy(name string) Policy {
	switch name {
	case BalanceSeeds:
		return &seedsPolicy{}
	case BalanceFit:
		return &fitPolicy{}
	}
	return nil
}

// wantShares: the policy uses OwnerLoad.Share.
type wantShares interface{ wantShares() }

func meanLoad(os []OwnerLoad) float64 {
	var sum float64
	for _, o := range os {
		sum += o.Load
	}
	return sum / float64(len(os))
}

// seedsPolicy is Centrifuge §2.1.2's rule: "if one Owner is more than 10%
// above the mean load, a virtual node is subtracted from it and added to the
// least-loaded Owner, even if that least-loaded Owner is not 10% below the
// mean load." Per round, each owner above 1.1·mean gives one virtual node,
// the most loaded first, each to the owner least loaded by the estimate so
// far (a giver's load per virtual node moves with it), up to MaxMoves.
// Hysteresis: an owner that received a virtual node in the previous round
// gives none in this one, and only an owner below the mean receives; with
// the core's wait for fresh reports after every move, an owner is never
// judged on a load measured before its last move.
type seedsPolicy struct {
	received map[string]bool // owners that received in the last round
}

func (*seedsPolicy) Name() string { return BalanceSeeds }

func (p *seedsPolicy) Plan(in BalanceInput) []VNodeMove {
	mean := meanLoad(in.Owners)
	est := make([]float64, len(in.Owners))
	vn := make([]int, len(in.Owners))
	for i, o := range in.Owners {
		est[i], vn[i] = o.Load, o.VNodes
	}
	order := make([]int, len(in.Owners))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return -cmp.Compare(est[a], est[b]) })
	received := map[string]bool{}
	var moves []VNodeMove
	for _, hi := range order {
		if len(moves) >= in.MaxMoves || est[hi] <= 1.1*mean {
			break
		}
		if vn[hi] <= 1 || p.received[in.Owners[hi].Name] {
			continue
		}
		lo := -1
		for i := range est {
			if i != hi && est[i] < mean && (lo < 0 || est[i] < est[lo]) {
				lo = i
			}
		}
		if lo < 0 {
			break
		}
		per := est[hi] / float64(vn[hi])
		est[hi] -= per
		est[lo] += per
		vn[hi]--
		vn[lo]++
		received[in.Owners[lo].Name] = true
		moves = append(moves, VNodeMove{From: in.Owners[hi].Name, To: in.Owners[lo].Name, N: 1})
	}
	p.received = received
	return moves
}

// Thresholds of the fit policy, as multiples of the mean load: a round
// starts moving when the most loaded owner is above fitStart, and keeps
// moving, round after round, until it is at or below fitStop (hysteresis:
// the noise of a settled pool stays inside the band and moves nothing).
const (
	fitStart = 1.08
	fitStop  = 1.04
	// fitMaxBlock bounds the virtual nodes fit considers moving at once
	// between one pair of owners.
	fitMaxBlock = 8
)

// fitPolicy moves virtual nodes by their estimated load. The Envoy-exact
// ring decides which arcs a count change moves: the giver loses the arc of
// its highest-index entry, which passes to the next entry clockwise; the
// receiver's next entry takes the arc before it from that entry's owner.
// fit estimates the load of each such arc from the owners' per-group
// reports (load per unit of circle in each of the 64 range groups, spread
// evenly within a group) and, greedily, makes the move from the most
// loaded owner, to one of the three least loaded, that lowers the sum of
// squared estimated loads (the variance) the most without raising any
// owner above the current maximum; a move that would not help is not made
// (the giver's next entry may carry no load), and the giver is set aside
// for the round. So it moves as many virtual nodes as the estimated
// imbalance needs, where seeds moves one per owner per round, and it does
// not move an empty arc that would leave the load where it is.
// Cost: O(owners) per move considered, plus O(log R) ring lookups.
//
// Hysteresis against noise and against what the ring cannot do: fit stops
// at fitStop, and it also stops ("stalls") after two moving rounds in a row
// that did not lower the measured max/mean by fitProgress below the best
// since it started (the
// estimate was wrong: one hot key, not an even spread, carries a group's
// load, and moving more would only pass the key from owner to owner); it
// starts again only once the measured max/mean is fitRestall above where it
// stalled, or above fitStart from a settled pool.
type fitPolicy struct {
	active     bool    // a round found the pool above fitStart and it has not reached fitStop since
	moved      bool    // the last round moved virtual nodes
	best       float64 // the lowest max/mean measured since it started moving
	noProgress int     // moving rounds in a row that did not help
	stalled    float64 // max/mean where it stalled; 0 if it has not
}

// fitRestall is how much above where it stalled max/mean must get for fit
// to move again; fitProgress is the least improvement of max/mean that
// counts as progress. A round after moves that finds max/mean worse counts
// as no progress too, even if the load shifted meanwhile: fit cannot tell
// the two apart, and a hot key passed from owner to owner looks the same.
const (
	fitRestall  = 0.05
	fitProgress = 0.02
)

func (*fitPolicy) Name() string { return BalanceFit }
func (*fitPolicy) wantShares()  {}

func (p *fitPolicy) Plan(in BalanceInput) []VNodeMove {
	n := len(in.Owners)
	if n < 2 {
		return nil
	}
	mean := meanLoad(in.Owners)
	est := make([]float64, n)
	idx := make(map[string]int, n)
	maxLoad := 0.0
	for i, o := range in.Owners {
		est[i] = o.Load
		idx[o.Name] = i
		maxLoad = max(maxLoad, o.Load)
	}
	ratio := maxLoad / mean
	prevMoved := p.moved
	p.moved = false
	switch {
	case p.stalled > 0 && ratio <= p.stalled+fitRestall:
		return nil
	case p.stalled > 0 || (!p.active && ratio > fitStart):
		p.stalled, p.best, p.noProgress = 0, ratio, 0
	case !p.active:
		return nil
	case ratio <= fitStop:
		p.active, p.noProgress = false, 0
		return nil
	case prevMoved && ratio < p.best-fitProgress:
		p.best, p.noProgress = ratio, 0
	case prevMoved:
		// The last moves did not lower the measured maximum.
		if p.noProgress++; p.noProgress >= 2 {
			p.stalled, p.active, p.noProgress = max(ratio, fitStart), false, 0
			return nil
		}
	}
	p.active = true
	// density[i][g]: estimated load per unit of circle of owner i in group g.
	density := make([][lease.LoadGroups]float64, n)
	for i, o := range in.Owners {
		var total float64
		if o.Share != nil {
			for _, s := range o.Share {
				total += s
			}
		}
		for g := range lease.LoadGroups {
			s := 0.0
			if o.Share != nil {
				s = o.Share[g]
			}
			switch {
			case o.Groups != nil && s > 0:
				density[i][g] = o.Groups[g] / s
			case o.Groups == nil && total > 0:
				density[i][g] = o.Load / total
			}
		}
	}
	arcLoad := func(i int, r ring.Range) float64 {
		var l float64
		eachGroup(r, func(g int, share float64) { l += share * density[i][g] })
		return l
	}
	removed := make([]int, n)
	added := make([]int, n)
	done := make([]bool, n) // set aside as givers for this round
	var moves []VNodeMove
	moved := 0
	for moved < in.MaxMoves {
		hi := -1
		for i := range est {
			if !done[i] && (hi < 0 || est[i] > est[hi]) {
				hi = i
			}
		}
		if hi < 0 {
			break
		}
		top := est[hi]
		for i := range est {
			top = max(top, est[i])
		}
		if top <= fitStop*mean {
			p.active = false
			break
		}
		gi := in.Owners[hi]
		if gi.VNodes-removed[hi] <= 1 {
			done[hi] = true
			continue
		}
		// The giver's k highest-index entries leave, each arc passing to
		// the next entry clockwise; the receiver's next k entries join,
		// each taking the arc before it from that entry's owner. k runs
		// to fitMaxBlock so that a giver whose top entry's arc passes to
		// itself (or carries nothing) can still shed load.
		best, bestK, bestDelta := -1, 0, -1e-9*mean*mean
		var diff, bestDiff sparse
		for _, lo := range leastLoaded(est, hi, 3) {
			diff = diff[:0]
			rcv := in.Owners[lo]
			for k := 1; k <= fitMaxBlock && moved+k <= in.MaxMoves && gi.VNodes-removed[hi]-k >= 1; k++ {
				pos := in.Ring.Lookup(ring.EntryHash(gi.Name, gi.VNodes-removed[hi]-k))
				l1 := arcLoad(hi, in.Ring.Arc(pos))
				succ := idx[in.Ring.OwnerName((pos+1)%in.Ring.Len())]
				diff = diff.add(hi, -l1).add(succ, l1)
				q := ring.EntryHash(rcv.Name, rcv.VNodes+added[lo]+k-1)
				p2 := in.Ring.Lookup(q)
				o2 := idx[in.Ring.OwnerName(p2)]
				l2 := arcLoad(o2, ring.Range{Start: in.Ring.Arc(p2).Start, End: q})
				diff = diff.add(o2, -l2).add(lo, l2)
				delta, worst := 0.0, 0.0
				for _, d := range diff {
					v := est[d.i] + d.d
					delta += v*v - est[d.i]*est[d.i]
					if d.d != 0 {
						worst = max(worst, v)
					}
				}
				if worst < top && delta < bestDelta {
					best, bestK, bestDelta, bestDiff = lo, k, delta, append(bestDiff[:0], diff...)
				}
			}
		}
		if best < 0 {
			done[hi] = true
			continue
		}
		for _, d := range bestDiff {
			est[d.i] += d.d
		}
		removed[hi] += bestK
		added[best] += bestK
		moved += bestK
		moves = appendMove(moves, VNodeMove{From: gi.Name, To: in.Owners[best].Name, N: bestK})
	}
	p.moved = len(moves) > 0
	return moves
}

// sparse is a few owners' load changes, in the order first changed, so
// that sums over it are deterministic.
type sparse []struct {
	i int
	d float64
}

func (s sparse) add(i int, d float64) sparse {
	for k := range s {
		if s[k].i == i {
			s[k].d += d
			return s
		}
	}
	return append(s, struct {
		i int
		d float64
	}{i, d})
}

// leastLoaded returns up to k indices of the smallest est other than skip.
func leastLoaded(est []float64, skip, k int) []int {
	var out []int
	for i := range est {
		if i != skip {
			out = append(out, i)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(est[a], est[b]) })
	if len(out) > k {
		out = out[:k]
	}
	return out
}

// appendMove appends m, merging it into the last move between the same
// pair.
func appendMove(ms []VNodeMove, m VNodeMove) []VNodeMove {
	if k := len(ms) - 1; k >= 0 && ms[k].From == m.From && ms[k].To == m.To {
		ms[k].N += m.N
		return ms
	}
	return append(ms, m)
}

// eachGroup calls fn with each range group that r meets and the fraction
// of the circle they share.
func eachGroup(r ring.Range, fn func(g int, share float64)) {
	if r.IsFull() {
		for g := range lease.LoadGroups {
			fn(g, 1.0/lease.LoadGroups)
		}
		return
	}
	x, n := r.Start, r.End-r.Start // (x, x+n], wrapping
	for n > 0 {
		g := lease.LoadGroup(x + 1)
		last := uint64(g+1)<<58 - 1 // the group's last point (wraps to MaxUint64 for 63)
		step := last - x
		if step > n {
			step = n
		}
		fn(g, float64(step)/math.Exp2(64))
		x += step
		n -= step
	}
}

// groupShares returns, per owner of r, the fraction of the circle its arcs
// cover in each range group. O(R).
func groupShares(r *ring.Ring) map[string]*[lease.LoadGroups]float64 {
	out := map[string]*[lease.LoadGroups]float64{}
	for _, o := range r.Owners() {
		out[o.Name] = new([lease.LoadGroups]float64)
	}
	for p := range r.Len() {
		s := out[r.OwnerName(p)]
		eachGroup(r.Arc(p), func(g int, share float64) { s[g] += share })
	}
	return out
}
