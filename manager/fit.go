package manager

import "slices"

// Thresholds of the fit policy, as multiples of the mean load: a settled
// pool starts moving when the most loaded owner is above fitStart, and keeps
// moving, round after round, until it is at or below fitStop, or until no
// round can promise progress (see fitPolicy: hysteresis as a band).
const (
	fitStart = 1.08
	fitStop  = 1.04
	// fitMaxBlock bounds the virtual nodes fit considers moving at once
	// between one pair of owners (relays move more, see fitPlan.relays).
	fitMaxBlock = 8
)

// fitPolicy moves virtual nodes by the load they carry, on a model of the
// load over the circle built from the owners' reports. The Envoy-exact ring
// decides which arcs a count change moves: the giver loses the arc of its
// highest-index entry, which passes to the next entry clockwise; the
// receiver's next entry takes the arc before it from that entry's owner.
//
// The load model (fitPlan). Each owner reports its load per range group
// (1/64 of the circle) and its busiest keys by hash (lease.LoadReport.Hot,
// which ownerguard samples from the requests it admits). A hot key is a
// point load at its hash, so the model knows exactly which arc carries it
// and where it goes when entries come and go; the rest of a group's load is
// spread evenly over the owner's arcs in that group. fitPlan lays every
// entry that is on the ring, or may join it this round, on one list in
// circle order with the model's load up to it, so a move's effect is
// computed exactly on the model: an arc's load is a difference of two
// cumulative figures, whichever entries the plan has taken off or put on.
//
// In a pool of at most fitSearchOwners, an episode first searches the
// counts to aim for on the model and moves toward them (fitsearch.go); the
// greedy rounds below run in larger pools, and after a reached target
// that left the pool above fitStart.
//
// A round, greedily: the owner with the highest model load gives blocks of
// up to fitMaxBlock of its highest entries to the receiver that evens the
// loads out most (sum of squares), as long as no owner ends at or above the
// giver's load and no receiver above the band or near an owner that did
// not receive; repeat up to MaxMoves virtual nodes. A hot key that keeps
// its holder high (at Zipf 1.1 the top key alone is 13.5% of the load, more
// than the mean share of 8 owners) can only leave by a relay: the holder
// gives away its entries down to the one that holds the key, the key
// passes to the next entry on the ring, and that entry's owner gives away
// its entries above it so that it ends lower than the holder was (or the
// key passes on again, up to fitRelayHops owners). A relay that needs more
// than the round's budget (up to fitHorizon rounds' worth) is prepared: the
// owners it passes through shed first, at most fitMaxPrep rounds, and the
// holder hands the key on last, so the key never lands on an owner that has
// not shed. The round is made only if it lowers the highest model load by
// fitProgress of the mean, or prepares a relay that will; otherwise nothing
// moves and fit settles where it is.
//
// Why it converges, with no 2-cycle. Within an episode (from the round that
// starts moving to the one that settles) an owner that gave only gives and
// one that took only takes: a giver loses its highest indices and could
// only get them back by taking, a taker gains the next indices and could
// only lose them by giving, so no entry, hence no arc, changes owner twice
// in an episode, and an episode moves at most R virtual nodes whatever the
// reports say. A moving round after which the measured max/mean is not
// fitProgress below the best since it started counts as no progress
// (unless it prepared a relay); two in a row settle fit at the best
// max/mean of the episode, and a round that can promise nothing settles it
// where it is, except once: a round that cannot finish the relay the last
// round prepared begins the episode again from the ring as it is (so at
// most 2R virtual nodes move before fit settles). A settled fit moves
// again only once the measured max/mean is fitRestall above where it
// settled and above fitStart (a load shift).
// The band is wider than the noise of a 5 s EWMA at the bench's rates
// (about ±0.02 at Zipf 1.1), so a standing load yields a bounded number of
// moving rounds, then none.
//
// What bounds it at Zipf 1.1 (bench/balance, 8 owners, 100,000 keys): the
// top key's holder keeps every entry up to the one that holds the key, so
// its load is at least the key plus the load of those entries; which owner
// and index can hold the key is fixed by the entry names (the chain of
// entries clockwise from the key), so the least max/mean a ring can reach
// depends on the draw of keys, not only on the policy.
// Cost: O(R + owners·(groups + horizon·log R)) to build a round's list
// (horizon = fitHorizon·MaxMoves new entries per owner), then per move
// considered O(block) list updates, each a short walk to the neighbouring
// entries on the ring.
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
	// prepRounds counts the rounds of the episode that prepared a relay
	// (see fitPlan.run); lastPrep: the last round did.
	prepRounds int
	lastPrep   bool
	// renewed: the episode was begun again once after a prepared relay
	// could not be finished (see Plan).
	renewed  bool
	wasAbove bool // the last round found a settled fit above its band, by less than twice the band
	// target: the counts the episode aims for (fitsearch.go), by owner
	// name; nil when the episode is the greedy one.
	target map[string]int
}

// fitHorizon: a round's plan may look at relays of up to fitHorizon times
// the round's budget (prepared over several rounds).
const fitHorizon = 4

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
	p.gave, p.took, p.prepRounds, p.lastPrep = nil, nil, 0, false
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
	prevMoved, prevPrep := p.moved, p.lastPrep
	p.moved, p.lastPrep = false, false
	cont := false // the greedy goes on after a reached target
	if p.target != nil {
		moves, more, same := p.toward(in)
		if more {
			return moves
		}
		p.target = nil
		if !same || ratio <= fitStart+fitRestall {
			p.settle(ratio)
			return nil
		}
		// The target, reached, left the pool well above the band (the
		// model erred, or the load moved): the greedy goes on from here,
		// in an episode of its own, and settles as it does.
		p.best, p.noProgress, p.renewed = ratio, 0, false
		p.beginEpisode()
		cont = true
	}
	// A settled fit restarts at once on a clear rise (a load shift), and
	// on a smaller one only when two rounds in a row see it: one noisy
	// report of the hottest owner is not a shift.
	above := p.stalled > 0 && ratio > max(p.stalled+fitRestall, fitStart)
	if p.stalled > 0 && above && ratio <= p.stalled+2*fitRestall && !p.wasAbove {
		p.wasAbove = true
		return nil
	}
	p.wasAbove = false
	switch {
	case cont:
	case p.stalled > 0 && !above:
		return nil
	case p.stalled > 0 || (!p.active && ratio > fitStart):
		p.stalled, p.best, p.noProgress, p.renewed = 0, ratio, 0, false
		p.beginEpisode()
		if n <= fitSearchOwners {
			plan := searchPlan(in)
			if t := plan.search(fitSearchRounds * in.MaxMoves); t != nil {
				p.target = make(map[string]int, n)
				for i, name := range plan.name {
					p.target[name] = t[i]
				}
				p.active = true
				moves, _, _ := p.toward(in)
				return moves
			}
		}
	case !p.active:
		return nil
	case ratio <= fitStop:
		p.active, p.noProgress = false, 0
		p.gave, p.took = nil, nil
		return nil
	case prevMoved && ratio < p.best-fitProgress:
		p.best, p.noProgress = ratio, 0
	case prevPrep:
		// A relay being prepared lowers the maximum only once the key
		// moves; at most fitMaxPrep such rounds in an episode.
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
	horizon := min(fitHorizon*in.MaxMoves, in.Ring.Len())
	plan := newFitPlan(in, horizon)
	rd := plan.run(in.MaxMoves, p.gave, p.took, p.prepRounds < fitMaxPrep)
	if prevPrep && !p.renewed && !rd.promises(plan) {
		// The relay the last round prepared cannot be finished on this
		// round's reports within the episode's rule (who gave only
		// gives, who took only takes): its sheds moved the key's path.
		// Settling here would leave the pool where the preparation left
		// it, no better than before. Begin the episode again, once, from
		// the ring as it is now: two episodes still move at most 2R
		// virtual nodes, and the second one settles like any other.
		p.renewed = true
		p.beginEpisode()
		plan = newFitPlan(in, horizon) // run applied the first plan's moves to its model
		rd = plan.run(in.MaxMoves, p.gave, p.took, p.prepRounds < fitMaxPrep)
	}
	if !rd.promises(plan) {
		// Nothing the model can promise: settle here.
		p.settle(ratio)
		return nil
	}
	moves := rd.moves
	if rd.prep {
		p.prepRounds++
		p.lastPrep = true
	}
	for _, mv := range moves {
		p.gave[mv.From], p.took[mv.To] = true, true
	}
	p.moved = true
	return moves
}

// toward makes a round of the episode's search target: up to MaxMoves
// virtual nodes from owners above their target counts to owners below,
// chosen on the model one give at a time (the best state each), so that a
// relay's owners shed before the key moves if that is better. more is
// false at the target, or if the pool's owners changed (same false).
func (p *fitPolicy) toward(in BalanceInput) (moves []VNodeMove, more, same bool) {
	n := len(in.Owners)
	if len(p.target) != n {
		return nil, false, false
	}
	at := true
	for _, o := range in.Owners {
		t, ok := p.target[o.Name]
		if !ok {
			return nil, false, false
		}
		at = at && t == o.VNodes
	}
	if at {
		return nil, false, true
	}
	plan := searchPlan(in)
	from := slices.Clone(plan.v)
	lo, hi := make([]int, n), make([]int, n)
	for i, name := range plan.name {
		t := min(p.target[name], len(plan.pos[i]))
		lo[i], hi[i] = min(from[i], t), max(from[i], t)
	}
	plan.climb(from, lo, hi, in.MaxMoves, plan.total/float64(n), true)
	moves = countMoves(plan.name, from, plan.v)
	if len(moves) == 0 {
		return nil, false, true
	}
	p.moved = true
	return moves, true, true
}

// countMoves pairs the owners whose counts fell with those whose rose.
func countMoves(names []string, from, to []int) []VNodeMove {
	var moves []VNodeMove
	b := 0
	for a := range from {
		for d := from[a] - to[a]; d > 0; {
			for b < len(to) && to[b]-from[b] <= 0 {
				b++
			}
			if b == len(to) {
				return moves
			}
			s := min(d, to[b]-from[b])
			moves = appendMove(moves, VNodeMove{From: names[a], To: names[b], N: s})
			from[b] += s
			d -= s
		}
	}
	return moves
}

// beginEpisode forgets who gave and who took, and the relays prepared.
func (p *fitPolicy) beginEpisode() {
	p.prepRounds = 0
	p.gave, p.took = map[string]bool{}, map[string]bool{}
}

// promises reports whether the round is worth making on plan's model: it
// prepares a relay, or its moves lower the highest load by fitProgress of
// the mean.
func (r fitRound) promises(plan *fitPlan) bool {
	return r.prep || len(r.moves) > 0 && r.after <= r.before-fitProgress*plan.total/float64(plan.n)
}
