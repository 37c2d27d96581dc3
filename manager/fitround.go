package manager

import (
	"cmp"
	"math"
	"slices"
)

// Relays (see fitPlan.relays): a hot key of at least fitHotMin of the mean
// load may be handed along the ring, through at most fitRelayHops owners;
// the entries given away go in blocks of fitRelayBlock. A relay that needs
// more than a round's budget is prepared over at most fitMaxPrep rounds.
const (
	fitHotMin     = 0.05
	fitRelayHops  = 6
	fitRelayBlock = 16
	fitMaxPrep    = 4
)

// fitGive is one give of a candidate: s virtual nodes from a to b.
type fitGive struct{ a, b, s int }

// fitRound is a round's plan.
type fitRound struct {
	moves         []VNodeMove
	before, after float64 // the highest model load before and after the moves
	// prep: the moves prepare a relay that needs more than the budget
	// (the owners the key will pass through shed first; the holder hands
	// it on in a later round), so they do not lower the maximum yet.
	prep bool
}

// run plans the round greedily (see fitPolicy) within budget virtual
// nodes. An owner in took gives nothing and one in gave takes nothing, in
// this round as in the episode.
func (p *fitPlan) run(budget int, gave, took map[string]bool, allowPrep bool) fitRound {
	mean := p.total / float64(p.n)
	var out fitRound
	out.before, _ = p.maxEst()
	gives := make([]bool, p.n) // gave in the episode or this round
	takes := make([]bool, p.n)
	done := make([]bool, p.n)
	for i, name := range p.name {
		gives[i], takes[i] = gave[name], took[name]
	}
	moved := 0
	var cand, best, long []fitGive
	longMax := math.Inf(1)
	apply := func(c []fitGive) {
		for _, g := range c {
			if g.s = min(g.s, budget-moved); g.s <= 0 || !p.give(g.a, g.b, g.s) {
				break
			}
			gives[g.a], takes[g.b] = true, true
			moved += g.s
			out.moves = appendMove(out.moves, VNodeMove{From: p.name[g.a], To: p.name[g.b], N: g.s})
		}
	}
	start := p.mark()
	for moved < budget {
		top, _ := p.maxEst()
		if top <= fitStop*mean {
			break
		}
		hi := -1
		for i := range p.n {
			if !done[i] && !takes[i] && (hi < 0 || p.est[i] > p.est[hi]) {
				hi = i
			}
		}
		if hi < 0 {
			break
		}
		base := p.sumSq()
		bestDelta := -1e-9 * mean * mean
		best = best[:0]
		// fits: the plan as it stands (after the gives c) leaves no owner
		// at or above top and no taker above the band.
		fits := func(c []fitGive) bool {
			mx, _ := p.maxEst()
			if mx >= top {
				return false
			}
			// A taker stays in the band, or clearly below every owner
			// that did not take (which a hot key may hold above it).
			capLoad := fitStop * mean
			for i := range p.n {
				if !slices.ContainsFunc(c, func(g fitGive) bool { return g.b == i }) {
					capLoad = max(capLoad, p.est[i]-fitProgress*mean)
				}
			}
			for _, g := range c {
				if p.est[g.b] > capLoad {
					return false
				}
			}
			return true
		}
		consider := func(c []fitGive, cost int) {
			if !fits(c) {
				return
			}
			if cost > budget-moved {
				if mx, _ := p.maxEst(); mx < longMax && cost <= fitHorizon*budget {
					longMax, long = mx, append(long[:0], c...)
				}
				return
			}
			if d := p.sumSq() - base; d < bestDelta {
				bestDelta, best = d, append(best[:0], c...)
			}
		}
		left := budget - moved
		for lo := range p.n {
			if lo == hi || gives[lo] {
				continue
			}
			for s := 1; s <= min(left, fitMaxBlock); s *= 2 {
				m := p.mark()
				if !p.give(hi, lo, s) {
					break
				}
				consider(append(cand[:0], fitGive{hi, lo, s}), s)
				p.rollback(m)
			}
		}
		for k := range p.hot {
			if p.hot[k].rate >= fitHotMin*mean && int(p.owner[p.holder(k)]) == hi {
				p.relays(k, hi, gives, takes, consider)
			}
		}
		if len(best) == 0 {
			done[hi] = true
			continue
		}
		clear(done) // the move may have made room for an owner found stuck
		apply(best)
	}
	out.after, _ = p.maxEst()
	if allowPrep && long != nil && out.after > out.before-fitProgress*mean && longMax < out.after-fitProgress*mean {
		// The round cannot lower the maximum, a relay over several rounds
		// can: prepare it instead. Its gives in order, the holder's (which
		// hand the key on) last, as far as the budget goes; never the
		// holder's, so that the key does not move before the owner that
		// is to keep it has shed.
		p.rollback(start)
		moved, out.moves = 0, nil
		clear(gives)
		clear(takes)
		for i, name := range p.name {
			gives[i], takes[i] = gave[name], took[name]
		}
		holder := long[len(long)-1].a
		var prep []fitGive
		for _, g := range long {
			if g.a != holder {
				prep = append(prep, g)
			}
		}
		apply(prep)
		if mx, _ := p.maxEst(); mx > out.before+fitProgress*mean/2 || len(out.moves) == 0 {
			p.rollback(start)
			out.moves = nil
		} else {
			out.prep = true
		}
		out.after, _ = p.maxEst()
	}
	p.undo = p.undo[:0]
	return out
}

// relays tries to hand hot key k from hi along the ring: the key passes to
// the next entry on the ring when hi gives away its entries down to and
// including the one that holds it; that entry's owner z keeps it if z
// gives away its entries above it, or passes it on in turn, up to
// fitRelayHops hops. Each candidate is tried in the order a round can
// make it: the owners the key passes through shed first, hi last, the
// entries going to the least loaded owners that may take, in blocks of
// fitRelayBlock. The candidates go to consider with their cost.
func (p *fitPlan) relays(k, hi int, gives, takes []bool, consider func([]fitGive, int)) {
	// The chain: which owner would hold k, at which index, after each hop.
	type hop struct{ z, idx int }
	var chain []hop
	m := p.mark()
	h := p.holder(k)
	for range fitRelayHops {
		z, idx := int(p.owner[h]), p.index(h)
		chain = append(chain, hop{z, idx})
		if idx < 1 || p.v[z]-idx > len(p.pos[z]) { // z would keep none
			break
		}
		// Take z's entries down to and including h off, as a probe.
		for p.v[z] > idx {
			p.v[z]--
			p.toggle(int(p.pos[z][p.v[z]]))
		}
		h = p.holder(k)
	}
	p.rollback(m)
	var c []fitGive
	// shed gives z's entries above keep away; false if it cannot.
	var upto int // the hops the candidate under construction passes through
	inChain := func(i int) bool {
		return slices.ContainsFunc(chain[:upto], func(x hop) bool { return x.z == i })
	}
	// shed gives z's entries above keep away, each block to the least
	// loaded owner that may take and whose new entries do not catch k;
	// false if none can.
	var order []int
	shed := func(z, keep int) bool {
		for p.v[z] > keep {
			s := min(fitRelayBlock, p.v[z]-keep)
			order = order[:0]
			for i := range p.n {
				if i != z && !gives[i] && !inChain(i) && len(p.pos[i]) > p.v[i] {
					order = append(order, i)
				}
			}
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.est[a], p.est[b]) })
			given := false
			for _, lo := range order {
				m := p.mark()
				if !p.give(z, lo, s) {
					continue
				}
				if int(p.owner[p.holder(k)]) == lo {
					p.rollback(m)
					continue
				}
				c, given = append(c, fitGive{z, lo, s}), true
				break
			}
			if !given {
				return false
			}
		}
		return true
	}
	for t := 1; t < len(chain); t++ {
		z := chain[t].z
		if z == hi || takes[z] {
			continue
		}
		// Owners before t must be below their indices there; z keeps
		// its entry; hi goes last.
		keep := make([]int, p.n)
		copy(keep, p.v)
		for _, x := range chain[:t] {
			keep[x.z] = min(keep[x.z], x.idx)
		}
		keep[z] = chain[t].idx + 1
		if slices.ContainsFunc(chain[:t], func(x hop) bool { return x.z == z && x.idx < chain[t].idx }) {
			continue
		}
		c, upto = c[:0], t+1
		m := p.mark()
		ok := true
		cost := 0
		for i := range p.n {
			if i != hi && keep[i] < p.v[i] {
				cost += p.v[i] - keep[i]
				ok = ok && shed(i, keep[i])
			}
		}
		cost += p.v[hi] - keep[hi]
		ok = ok && shed(hi, keep[hi])
		if ok { // whoever holds k now (a taker's new entry may have caught it), the model says what it costs
			consider(c, cost)
		}
		p.rollback(m)
	}
}
