package manager

import (
	"cmp"
	"slices"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Thresholds of the fit policy, as multiples of the mean load: a settled
// pool starts moving when the most loaded owner is above fitStart, and keeps
// moving, round after round, until it is at or below fitStop, or until no
// round can promise progress (see fitPolicy: hysteresis as a band).
const (
	fitStart = 1.08
	fitStop  = 1.04
	// fitMaxBlock bounds the virtual nodes fit considers moving at once
	// between one pair of owners.
	fitMaxBlock = 8
	// fitMass: a range group's load on one owner above the group's
	// baseline density by more than fitMass of the mean owner load is
	// taken for a hot key (a point mass in one unknown arc of that owner
	// in that group), not for load spread over the owner's arcs.
	fitMass = 0.02
	// fitRisk: a move that hands over arcs with at least this probability
	// of carrying a mass (see fitModel.handOnce) counts the whole mass in
	// the taker's worst case; below it, the mass counts by its probability
	// only. A move that does hand over a hot key by that chance cannot be
	// undone within the episode (each owner only gives or only takes).
	fitRisk = 0.2
)

// fitPolicy moves virtual nodes by their estimated load. The Envoy-exact
// ring decides which arcs a count change moves: the giver loses the arc of
// its highest-index entry, which passes to the next entry clockwise; the
// receiver's next entry takes the arc before it from that entry's owner.
//
// The load model. Each owner reports its load per range group (1/64 of
// the circle). In each group, the baseline density is the share-weighted
// median of the owners' densities (load per unit of circle) there; an
// owner's group load above baseline·share by more than fitMass of the mean
// is a point mass: a hot key in one of its arcs in that group, which one
// the reports cannot tell. The rest is spread evenly over the owner's arcs
// in the group. A move that hands over part of an owner's arcs in a group
// with a mass hands over the mass with the probability of its share (for
// the expected loads), and in the worst case the whole mass lands on the
// new holder (for the bounds). So a hot key is never handed to an owner
// that it would make the most loaded one; at Zipf 1.1 the top key alone
// is 13.5% of the load, more than the mean share of 8 owners (12.5%), and
// fit sheds the other arcs of its holder instead of passing the key around.
//
// A round, greedily: take the owner with the highest worst-case load as
// giver; among the blocks of up to fitMaxBlock of its highest entries and
// the three least loaded receivers, make the move that lowers the sum of
// squared expected loads the most while no owner's worst-case load reaches
// the giver's; repeat up to MaxMoves virtual nodes. The round is made only
// if it lowers the highest worst-case load by fitProgress of the mean;
// otherwise nothing moves and fit settles where it is.
//
// Why it converges, with no 2-cycle. Every moving round lowers the
// predicted maximum (an upper bound of the true one, given the reports and
// fitRisk) by at least fitProgress·mean, and the next round plans again
// from measured loads. Within an episode (from the round that starts
// moving to the one that settles) an owner that gave only gives and one
// that took only takes: a giver loses its highest indices and could only
// get them back by taking, a taker gains the next indices and could only
// lose them by giving, so no entry, hence no arc, changes owner twice in
// an episode, and an episode moves at most R virtual nodes whatever
// the reports say (a 2-cycle needs an arc to come back). A moving round
// after which the measured max/mean is not fitProgress below the best
// since it started counts as no progress (the model was wrong, or noise);
// two in a row settle fit at the best max/mean of the episode, and a round
// that can promise nothing settles it where it is. A settled fit
// ("stalled") moves again only once the measured max/mean is fitRestall
// above where it settled and above fitStart (a load shift, or moves of
// fit's own that made things worse, which start a fresh episode from
// there; only the latter can repeat under a standing load, and only while
// fit's model keeps being wrong by more than the band):
// the band is wider than the noise of a 5 s EWMA at the bench's rates
// (about ±0.02 at Zipf 1.1), so a standing load yields a bounded number of
// moving rounds, then none.
//
// Which key dominates at Zipf 1.1 (bench/balance, 100,000 keys): rank 1,
// 13.5% of the load against a mean share of 12.5% for 8 owners, so its
// holder is at least 1.08 × mean; rank 2 is 6.3%, rank 3 4.0%. fit sheds
// the holder's other arcs; it cannot take the holder below the index of
// its entry that holds the key without risking to hand the key to the
// next entry's owner, and it stops there rather than gamble.
// Cost: O(owners·groups) per round, plus O(owners) and O(log R) ring
// lookups per move considered.
type fitPolicy struct {
	active     bool    // a round found the pool above fitStart and it has not settled since
	moved      bool    // the last round moved virtual nodes
	best       float64 // the lowest max/mean measured since it started moving
	noProgress int     // moving rounds in a row that did not help
	stalled    float64 // max/mean where it settled; 0 if it has not
	// gave and took are the owners that gave or took virtual nodes since
	// fit last started moving: within an episode an owner only gives or
	// only takes, so no arc moves back and forth.
	gave, took map[string]bool
}

// fitRestall is how much above where it settled max/mean must get for fit
// to move again; fitProgress is the least improvement of max/mean that
// counts as progress, predicted (to make a round) and measured (to go on).
const (
	fitRestall  = 0.05
	fitProgress = 0.02
)

func (*fitPolicy) Name() string { return BalanceFit }
func (*fitPolicy) wantShares()  {}

// settle stops fit at ratio until the load moves by fitRestall.
func (p *fitPolicy) settle(ratio float64) {
	p.stalled, p.active, p.noProgress, p.moved = ratio, false, 0, false
	p.gave, p.took = nil, nil
}

func (p *fitPolicy) Plan(in BalanceInput) []VNodeMove {
	n := len(in.Owners)
	if n < 2 {
		return nil
	}
	mean := meanLoad(in.Owners)
	if mean <= 0 {
		return nil
	}
	maxLoad := 0.0
	for _, o := range in.Owners {
		maxLoad = max(maxLoad, o.Load)
	}
	ratio := maxLoad / mean
	prevMoved := p.moved
	p.moved = false
	switch {
	case p.stalled > 0 && ratio <= max(p.stalled+fitRestall, fitStart):
		return nil
	case p.stalled > 0 || (!p.active && ratio > fitStart):
		p.stalled, p.best, p.noProgress = 0, ratio, 0
		p.gave, p.took = map[string]bool{}, map[string]bool{}
	case !p.active:
		return nil
	case ratio <= fitStop:
		p.active, p.noProgress = false, 0
		p.gave, p.took = nil, nil
		return nil
	case prevMoved && ratio < p.best-fitProgress:
		p.best, p.noProgress = ratio, 0
	case prevMoved:
		// The last moves did not lower the measured maximum.
		if p.noProgress++; p.noProgress >= 2 {
			// Settle at the best of the episode: if the moves made
			// things worse by fitRestall, the next round starts afresh.
			p.settle(min(ratio, p.best))
			return nil
		}
	}
	p.active = true
	m := newFitModel(in, mean)
	moves, before, after := m.plan(in, mean, p.gave, p.took)
	if len(moves) == 0 || after > before-fitProgress*mean {
		// Nothing the model can promise: settle here.
		p.settle(ratio)
		return nil
	}
	for _, mv := range moves {
		p.gave[mv.From], p.took[mv.To] = true, true
	}
	p.moved = true
	return moves
}

// fitModel is one round's load model: per owner and group, the density of
// the spread load and the point mass (see fitPolicy).
type fitModel struct {
	idx     map[string]int
	share   [][lease.LoadGroups]float64
	density [][lease.LoadGroups]float64
	mass    [][lease.LoadGroups]float64
}

func newFitModel(in BalanceInput, mean float64) *fitModel {
	n := len(in.Owners)
	m := &fitModel{idx: make(map[string]int, n), share: make([][lease.LoadGroups]float64, n),
		density: make([][lease.LoadGroups]float64, n), mass: make([][lease.LoadGroups]float64, n)}
	load := make([][lease.LoadGroups]float64, n)
	for i, o := range in.Owners {
		m.idx[o.Name] = i
		var total float64
		if o.Share != nil {
			m.share[i] = *o.Share
			for _, s := range o.Share {
				total += s
			}
		}
		for g := range lease.LoadGroups {
			switch {
			case o.Groups != nil:
				load[i][g] = o.Groups[g]
			case total > 0:
				load[i][g] = o.Load * m.share[i][g] / total
			}
		}
	}
	type ds struct{ d, w float64 }
	col := make([]ds, 0, n)
	for g := range lease.LoadGroups {
		col = col[:0]
		var wsum float64
		for i := range n {
			if s := m.share[i][g]; s > 0 {
				col = append(col, ds{load[i][g] / s, s})
				wsum += s
			}
		}
		if len(col) == 0 {
			continue
		}
		slices.SortFunc(col, func(a, b ds) int { return cmp.Compare(a.d, b.d) })
		base, acc := col[len(col)-1].d, 0.0
		for _, c := range col {
			if acc += c.w; acc >= wsum/2 {
				base = c.d
				break
			}
		}
		for i := range n {
			s := m.share[i][g]
			if s <= 0 {
				continue
			}
			if e := load[i][g] - base*s; e > fitMass*mean {
				m.mass[i][g], m.density[i][g] = e, base
			} else {
				m.density[i][g] = load[i][g] / s
			}
		}
	}
	return m
}

// fitDiff is a candidate move's effect: expected load changes, and
// worst-case ones (a giver keeps its masses, a taker gets them whole).
type fitDiff struct {
	exp, worst sparse
	masses     []massQ // the masses the block may hand over, with their probability
}

type massKey struct{ to, from, g int }

type massQ struct {
	k massKey
	q float64
}

// plan returns the round's moves and the highest worst-case load before
// and after them.
func (m *fitModel) plan(in BalanceInput, mean float64, gave, took map[string]bool) (moves []VNodeMove, before, after float64) {
	n := len(in.Owners)
	est := make([]float64, n) // expected loads
	up := make([]float64, n)  // worst-case loads
	for i, o := range in.Owners {
		est[i], up[i] = o.Load, o.Load
		before = max(before, o.Load)
	}
	removed := make([]int, n)
	added := make([]int, n)
	done := make([]bool, n) // set aside as givers for this round
	for i, o := range in.Owners {
		done[i] = took[o.Name]
	}
	moved := 0
	var cand, best fitDiff
	for moved < in.MaxMoves {
		hi := -1
		for i := range up {
			if !done[i] && (hi < 0 || up[i] > up[hi]) {
				hi = i
			}
		}
		if hi < 0 {
			break
		}
		top := 0.0
		for i := range up {
			top = max(top, up[i])
		}
		if top <= fitStop*mean {
			break
		}
		gi := in.Owners[hi]
		if gi.VNodes-removed[hi] <= 1 {
			done[hi] = true
			continue
		}
		bestLo, bestK, bestDelta := -1, 0, -1e-9*mean*mean
		for _, lo := range leastLoaded(est, hi, 3, func(i int) bool { return !gave[in.Owners[i].Name] }) {
			cand.exp, cand.worst, cand.masses = cand.exp[:0], cand.worst[:0], cand.masses[:0]
			rcv := in.Owners[lo]
			for k := 1; k <= fitMaxBlock && moved+k <= in.MaxMoves && gi.VNodes-removed[hi]-k >= 1; k++ {
				// The giver's entry leaves: its arc passes to the next
				// entry clockwise.
				pos := in.Ring.Lookup(ring.EntryHash(gi.Name, gi.VNodes-removed[hi]-k))
				succ := m.idx[in.Ring.OwnerName((pos+1)%in.Ring.Len())]
				m.handOnce(&cand, hi, succ, in.Ring.Arc(pos))
				// The receiver's next entry joins: it takes the arc
				// before it from that entry's owner.
				q := ring.EntryHash(rcv.Name, rcv.VNodes+added[lo]+k-1)
				p2 := in.Ring.Lookup(q)
				m.handOnce(&cand, m.idx[in.Ring.OwnerName(p2)], lo, ring.Range{Start: in.Ring.Arc(p2).Start, End: q})
				delta, ok := 0.0, true
				for _, d := range cand.exp {
					v := est[d.i] + d.d
					delta += v*v - est[d.i]*est[d.i]
				}
				for _, d := range cand.worst {
					if d.i != hi && up[d.i]+d.d >= top {
						ok = false
					}
				}
				if ok && delta < bestDelta {
					bestLo, bestK, bestDelta = lo, k, delta
					best.exp, best.worst = append(best.exp[:0], cand.exp...), append(best.worst[:0], cand.worst...)
				}
			}
		}
		if bestLo < 0 {
			done[hi] = true
			continue
		}
		for _, d := range best.exp {
			est[d.i] += d.d
		}
		for _, d := range best.worst {
			up[d.i] += d.d
		}
		removed[hi] += bestK
		added[bestLo] += bestK
		moved += bestK
		moves = appendMove(moves, VNodeMove{From: gi.Name, To: in.Owners[bestLo].Name, N: bestK})
	}
	for i := range up {
		after = max(after, up[i])
	}
	return moves, before, after
}

// handOnce adds to d the effect of owner from handing the range r to owner
// to: the spread load it carries, and the masses it may carry, each with
// the probability q that it lies in r (the share of the owner's arcs in
// the group that r covers): q·mass in d.exp; the whole mass in d.worst of
// the taker once the block's q for it reaches fitRisk.
func (m *fitModel) handOnce(d *fitDiff, from, to int, r ring.Range) {
	if from == to {
		return
	}
	eachGroup(r, func(g int, share float64) {
		l := share * m.density[from][g]
		d.exp = d.exp.add(from, -l).add(to, l)
		d.worst = d.worst.add(from, -l).add(to, l)
		e := m.mass[from][g]
		if e <= 0 || m.share[from][g] <= 0 {
			return
		}
		q := min(share/m.share[from][g], 1)
		d.exp = d.exp.add(from, -q*e).add(to, q*e)
		k := massKey{to, from, g}
		j := slices.IndexFunc(d.masses, func(x massQ) bool { return x.k == k })
		if j < 0 {
			d.masses = append(d.masses, massQ{k: k})
			j = len(d.masses) - 1
		}
		was := d.masses[j].q
		d.masses[j].q += q
		if was < fitRisk && d.masses[j].q >= fitRisk {
			d.worst = d.worst.add(to, e)
		}
	})
}
