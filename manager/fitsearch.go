package manager

import (
	"cmp"
	"slices"
)

// The search of fit (small pools). The greedy round of fitPlan.run moves
// a block at a time from the most loaded owner and keeps an episode's
// givers giving and takers taking, which can leave it where no single
// give helps although a few together would: an owner's new entries take
// their arcs from whichever owners' entries follow them, not from the
// giver, so evening out two owners can take several steps that each look
// worse alone. bench/balance's Zipf 1.1 load with 5 owners ended at 1.37
// that way, where counts exist at 1.01 on the same model.
//
// So at the start of an episode, in a pool of at most fitSearchOwners,
// fit searches the counts to aim for on the model (fitPlan.search), then
// moves toward them, MaxMoves a round, the counts of the owners above
// their target only falling and of those below only rising (so no arc
// changes owner twice in the episode, as in the greedy), choosing each
// round's moves by the model so that the pool passes through no worse
// state than it must. Once the pool holds the target counts fit settles,
// as it does after the greedy, at the measured max/mean.
//
// The search: hill climbing over gives of 1, 2, 4 ... fitSearchBlock
// virtual nodes between any two owners, by the highest model load and
// then the sum of squares, from the current counts; and, for the hottest
// key, from each of the first placements of it on one of the next entries
// clockwise (the entries before it off the ring: their owners capped below
// their indices; the holder keeping its entry), the fitSearchHolders with
// the lowest holder indices among the first fitSearchWalk entries, each
// climbed from two starts, which a climb of single gives cannot reach (see
// fitPolicy on relays). The counts searched are
// those at most fitSearchRounds rounds' budget away, so that an episode
// ends within that many rounds (bench/balance judges at 60 s, four rounds
// after the start, the first of which sees the load).
//
// Cost: a climb step tries every pair of owners and block size, each an
// O(block) walk of the list, and a search makes up to 2·fitSearchHolders+1
// climbs: BenchmarkFitSearch, about 50 ms with 5 owners and 130 ms with 6
// on this 2-core machine, once per episode.
//
// Why pools of at most 6. With more owners each one's share is small, a
// hot key's holder must keep few entries, and handing the key along the
// ring takes more than the search's budget; the greedy's relays, prepared
// over rounds, did better there: with 8 owners bench/balance's Zipf 1.1
// load after its shift was at 1.48 at 60 s with the search, still moving
// (its target, 3 rounds away, left it at 1.5, and the greedy went on),
// against 1.23 and settled with the greedy alone.
const (
	fitSearchOwners  = 6
	fitSearchRounds  = 3
	fitSearchBlock   = 256
	fitSearchSteps   = 48
	fitSearchHolders = 10  // placements of the hottest key tried
	fitSearchWalk    = 160 // list entries walked clockwise from the key
)

// searchScore compares two states: the highest load, then the sum of
// squares, each with a tolerance of rounding.
type searchScore struct{ mx, ss float64 }

func (p *fitPlan) score() searchScore {
	mx, _ := p.maxEst()
	return searchScore{mx, p.sumSq()}
}

func (a searchScore) better(b searchScore, mean float64) bool {
	eps := 1e-9 * mean
	return a.mx < b.mx-eps || a.mx <= b.mx+eps && a.ss < b.ss-eps*mean
}

// setCount puts owner o's entries on or off the plan's ring until it has
// w, from 1 to len(p.pos[o]).
func (p *fitPlan) setCount(o, w int) {
	for p.v[o] > w {
		p.v[o]--
		p.toggle(int(p.pos[o][p.v[o]]))
	}
	for p.v[o] < w {
		p.toggle(int(p.pos[o][p.v[o]]))
		p.v[o]++
	}
}

// moveCost is the virtual nodes that reach counts v from from.
func moveCost(from, v []int) int {
	c := 0
	for i := range v {
		c += max(0, from[i]-v[i])
	}
	return c
}

// climb improves the plan's counts by single gives within [lo, hi] per
// owner and a total cost of maxCost from from, while one helps (force:
// takes the best give even if it does not help, until none is left or
// the cost is spent; the execution of a target). It leaves the plan at
// the counts reached.
func (p *fitPlan) climb(from, lo, hi []int, maxCost int, mean float64, force bool) searchScore {
	cur := p.score()
	for range fitSearchSteps {
		type give struct{ a, b, s int }
		var best give
		bestScore := searchScore{}
		found := false
		spent := moveCost(from, p.v)
		for a := range p.n {
			if p.v[a] <= lo[a] || force && hi[a] > from[a] {
				continue
			}
			for b := range p.n {
				if b == a || p.v[b] >= hi[b] || force && lo[b] < from[b] {
					continue
				}
				m := p.mark()
				done := 0
				for s := 1; s <= fitSearchBlock; s *= 2 {
					add := s - done
					if p.v[a]-add < lo[a] || p.v[b]+add > hi[b] || spent+s > maxCost || !p.give(a, b, add) {
						break
					}
					done = s
					if sc := p.score(); !found || sc.better(bestScore, mean) {
						best, bestScore, found = give{a, b, s}, sc, true
					}
				}
				p.rollback(m)
			}
		}
		if !found || !force && !bestScore.better(cur, mean) {
			break
		}
		p.give(best.a, best.b, best.s)
		cur = bestScore
	}
	return cur
}

// search returns the counts fit aims for in this episode, or nil if none
// is fitProgress of the mean better on the model than the current counts
// within maxCost virtual nodes moved. The plan is left as it was.
func (p *fitPlan) search(maxCost int) []int {
	mean := p.total / float64(p.n)
	from := slices.Clone(p.v)
	start := p.score()
	lo, hi := make([]int, p.n), make([]int, p.n)
	bounds := func() {
		for i := range p.n {
			lo[i], hi[i] = 1, len(p.pos[i])
		}
	}
	var best []int
	bestScore := start
	bounds()
	m := p.mark()
	if sc := p.climb(from, lo, hi, maxCost, mean, false); sc.better(bestScore, mean) {
		best, bestScore = slices.Clone(p.v), sc
	}
	p.rollback(m)
	// The hottest key's placements.
	hk := -1
	for k := range p.hot {
		if p.hot[k].rate >= fitHotMin*mean && (hk < 0 || p.hot[k].rate > p.hot[hk].rate) {
			hk = k
		}
	}
	if hk >= 0 {
		capAt := make([]int, p.n) // the least index among the owner's entries walked so far
		for i := range capAt {
			capAt[i] = len(p.pos[i])
		}
		// The placements walked, the holder's index the lowest first:
		// the fewer entries the holder must keep, the lower its load can
		// go.
		type placement struct {
			o, idx int
			hi     []int
		}
		var ps []placement
		at, L := int(p.hot[hk].at), len(p.owner)
		for j := 0; j < min(fitSearchWalk, L); j++ {
			e := (at + j) % L
			o, idx := int(p.owner[e]), p.index(e)
			if idx+1 <= capAt[o] {
				ps = append(ps, placement{o, idx, slices.Clone(capAt)})
			}
			capAt[o] = min(capAt[o], idx)
		}
		slices.SortStableFunc(ps, func(a, b placement) int { return cmp.Compare(a.idx, b.idx) })
		tried := 0
		for _, pl := range ps {
			if tried == fitSearchHolders {
				break
			}
			bounds()
			copy(hi, pl.hi)
			lo[pl.o] = pl.idx + 1
			// Two starts: the current counts clamped, and every owner at
			// its low, each filled the lowest first. A placement counts
			// as tried if either is within reach.
			counted := false
			for _, st := range [2][]int{from, nil} {
				w, ok := startWithin(st, from, lo, hi)
				if !ok || moveCost(from, w) > maxCost {
					continue
				}
				if !counted {
					tried, counted = tried+1, true
				}
				m := p.mark()
				for i := range p.n {
					p.setCount(i, w[i])
				}
				if sc := p.climb(from, lo, hi, maxCost, mean, false); sc.better(bestScore, mean) {
					best, bestScore = slices.Clone(p.v), sc
				}
				p.rollback(m)
			}
		}
	}
	p.undo = p.undo[:0]
	if best == nil || bestScore.mx > start.mx-fitProgress*mean {
		return nil
	}
	return best
}

// searchPlan is the plan fit's search and its rounds toward a target work
// on: every owner may take, up to the search's budget.
func searchPlan(in BalanceInput) *fitPlan {
	return newFitPlanOf(in, min(fitSearchRounds*in.MaxMoves, in.Ring.Len()), true)
}

// startWithin is a first point within [lo, hi] summing to the sum of
// from: st clamped (st nil: every owner at lo), then the difference spread
// evenly over the owners with room, one at a time, the lowest first (a
// placement that caps one owner hands its excess to all the others, not
// to one, which a climb of single gives would then have to spread).
func startWithin(st, from, lo, hi []int) ([]int, bool) {
	w := make([]int, len(from))
	sum, total := 0, 0
	for i := range from {
		if lo[i] > hi[i] {
			return nil, false
		}
		w[i] = lo[i]
		if st != nil {
			w[i] = min(max(st[i], lo[i]), hi[i])
		}
		sum += w[i]
		total += from[i]
	}
	for sum < total {
		i := -1
		for k := range w {
			if w[k] < hi[k] && (i < 0 || w[k] < w[i]) {
				i = k
			}
		}
		if i < 0 {
			return nil, false
		}
		w[i]++
		sum++
	}
	for sum > total {
		i := -1
		for k := range w {
			if w[k] > lo[k] && (i < 0 || w[k] > w[i]) {
				i = k
			}
		}
		if i < 0 {
			return nil, false
		}
		w[i]--
		sum--
	}
	return w, true
}
