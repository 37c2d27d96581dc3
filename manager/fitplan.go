package manager

import (
	"cmp"
	"math"
	"slices"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// fitPlan is one round of fit on the model of the load over the circle
// (see fitPolicy): every entry that is on the ring, or may join it this
// round, in one list in circle order, each with the model's load from the
// start of the list to its hash. An arc's load is then the difference
// between its entry's and the previous entry's, whatever entries the plan
// has taken off or put on, so every move is evaluated exactly on the model:
// which arc passes to whom, and which hot key goes with it.
type fitPlan struct {
	n    int
	name []string
	v    []int // virtual-node counts in the plan so far
	est  []float64
	// The list: entries sorted by their position on the circle, starting
	// just after the ring's last entry (so that no arc of the current
	// ring wraps in the list).
	owner []int32
	idx   []int32
	hash  []uint64
	cum   []float64 // the model's load on (the ring's last entry, hash]
	on    []bool    // on the ring in the plan so far
	total float64
	// pos[o][i] is the list index of owner o's entry i, for i below its
	// count plus the round's budget if o may take (else its count).
	pos [][]int32
	// hot are the known hot keys: list index of the entry that held each
	// at the start, and its load.
	hot  []fitHot
	undo []int32 // list indices toggled by the candidate under evaluation
}

// fitReceivers bounds the owners that may take in a round: the least
// loaded ones below the band.
const fitReceivers = 32

type fitHot struct {
	hash uint64
	rate float64
	at   int32 // the first list index at or after hash
}

// newFitPlan builds the round's list: the model's density per owner and
// range group (the group's load less the hot keys in it, spread evenly over
// the owner's arcs there) and the hot keys as point loads. Reports of hot
// keys outside the reporter's arcs (measured before a move) are ignored.
// O(R + owners·(groups + hot keys) + fitReceivers·budget·log R).
func newFitPlan(in BalanceInput, budget int) *fitPlan { return newFitPlanOf(in, budget, false) }

// newFitPlanOf is newFitPlan; with all, every owner may take (the search
// of fitsearch.go), not only the fitReceivers least loaded below the band.
func newFitPlanOf(in BalanceInput, budget int, all bool) *fitPlan {
	n := len(in.Owners)
	r := in.Ring
	p := &fitPlan{n: n, name: make([]string, n), v: make([]int, n), est: make([]float64, n)}
	idx := make(map[string]int, n)
	for i, o := range in.Owners {
		p.name[i], p.v[i] = o.Name, o.VNodes
		idx[o.Name] = i
	}
	// Hot keys, held by their reporter (so each once), with the group
	// load they take from the reporter's.
	hotIn := make([][lease.LoadGroups]float64, n)
	for i, o := range in.Owners {
		for _, k := range o.Hot {
			if k.Rate > 0 && r.LookupOwner(k.Hash) == o.Name {
				p.hot = append(p.hot, fitHot{hash: k.Hash, rate: k.Rate})
				hotIn[i][lease.LoadGroup(k.Hash)] += k.Rate
			}
		}
	}
	// Density per owner and group.
	density := make([][lease.LoadGroups]float64, n)
	for i, o := range in.Owners {
		var share [lease.LoadGroups]float64
		var total float64
		if o.Share != nil {
			share = *o.Share
		}
		for _, s := range share {
			total += s
		}
		var load [lease.LoadGroups]float64
		for g := range lease.LoadGroups {
			switch {
			case o.Groups != nil:
				load[g] = o.Groups[g]
			case total > 0:
				load[g] = o.Load * share[g] / total
			}
		}
		for g := range lease.LoadGroups {
			if share[g] > 0 {
				density[i][g] = max(0, load[g]-hotIn[i][g]) / share[g]
			}
		}
	}
	// The list's origin: just after the ring's last entry.
	last := r.Entry(r.Len() - 1).Hash
	u := func(h uint64) uint64 { return h - last - 1 }
	slices.SortFunc(p.hot, func(a, b fitHot) int { return cmp.Compare(u(a.hash), u(b.hash)) })
	hotCum := make([]float64, len(p.hot)+1)
	for k, h := range p.hot {
		hotCum[k+1] = hotCum[k] + h.rate
	}
	hotUpTo := func(h uint64) float64 { // hot load on (last, h]
		k, _ := slices.BinarySearchFunc(p.hot, u(h), func(x fitHot, t uint64) int {
			if u(x.hash) <= t {
				return -1
			}
			return 1
		})
		return hotCum[k]
	}
	// spread is the density part of the load on (last, h] for h in the
	// arc of position q, given that part up to the arc's start.
	owners := r.Owners()
	ownerOf := make([]int, len(owners))
	for k, o := range owners {
		ownerOf[k] = idx[o.Name]
	}
	piece := func(q int, from, to uint64) float64 {
		if from == to {
			return 0
		}
		d := &density[ownerOf[r.Entry(q).Owner]]
		var l float64
		eachGroup(ring.Range{Start: from, End: to}, func(g int, share float64) { l += share * d[g] })
		return l
	}
	// Spread load up to each entry of the ring: position 0's arc starts at
	// last.
	R := r.Len()
	spreadAt := make([]float64, R)
	prev, acc := last, 0.0
	for q := range R {
		h := r.Entry(q).Hash
		acc += piece(q, prev, h)
		spreadAt[q], prev = acc, h
	}
	p.total = spreadAt[R-1] + hotCum[len(p.hot)]
	// Candidate new entries: the next budget indices of the fitReceivers
	// least loaded owners below the band (no other may take: see
	// fitPlan.run), so that the list stays O(R) however many owners.
	type cand struct {
		h   uint64
		o   int32
		i   int32
		cum float64
	}
	takers := make([]int, 0, n)
	mean := meanLoad(in.Owners)
	for i, o := range in.Owners {
		if all || o.Load < fitStop*mean {
			takers = append(takers, i)
		}
	}
	slices.SortStableFunc(takers, func(a, b int) int { return cmp.Compare(in.Owners[a].Load, in.Owners[b].Load) })
	if !all {
		takers = takers[:min(len(takers), fitReceivers)]
	}
	horizon := make([]int, n)
	news := make([]cand, 0, len(takers)*budget)
	for _, i := range takers {
		horizon[i] = budget
		for k := range budget {
			h := ring.EntryHash(p.name[i], p.v[i]+k)
			q := r.Lookup(h)
			start, base := last, 0.0
			if q > 0 {
				start, base = r.Entry(q-1).Hash, spreadAt[q-1]
			}
			news = append(news, cand{h, int32(i), int32(p.v[i] + k), base + piece(q, start, h) + hotUpTo(h)})
		}
	}
	slices.SortFunc(news, func(a, b cand) int {
		if c := cmp.Compare(u(a.h), u(b.h)); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.o, b.o), cmp.Compare(a.i, b.i))
	})
	// Merge the ring's entries (already in list order: position 0 first)
	// with the new ones.
	size := R + len(news)
	p.owner, p.idx, p.hash = make([]int32, 0, size), make([]int32, 0, size), make([]uint64, 0, size)
	p.cum, p.on = make([]float64, 0, size), make([]bool, 0, size)
	p.pos = make([][]int32, n)
	for i := range n {
		p.pos[i] = make([]int32, p.v[i]+horizon[i])
	}
	add := func(o, i int32, h uint64, c float64, on bool) {
		p.pos[o][i] = int32(len(p.owner))
		p.owner, p.idx, p.hash, p.cum, p.on = append(p.owner, o), append(p.idx, i), append(p.hash, h), append(p.cum, c), append(p.on, on)
	}
	k := 0
	for q := range R {
		e := r.Entry(q)
		for k < len(news) && u(news[k].h) < u(e.Hash) {
			add(news[k].o, news[k].i, news[k].h, news[k].cum, false)
			k++
		}
		add(int32(ownerOf[e.Owner]), e.Index, e.Hash, spreadAt[q]+hotUpTo(e.Hash), true)
	}
	for ; k < len(news); k++ {
		add(news[k].o, news[k].i, news[k].h, news[k].cum, false)
	}
	for k := range p.hot {
		at, _ := slices.BinarySearchFunc(p.hash, u(p.hot[k].hash), func(x uint64, t uint64) int { return cmp.Compare(u(x), t) })
		p.hot[k].at = int32(at % len(p.hash))
	}
	// The model's load of each owner on the current ring.
	pr := len(p.on) - 1
	for k := range p.on {
		if p.on[k] {
			p.est[p.owner[k]] += p.arc(pr, k)
			pr = k
		}
	}
	return p
}

// arc is the model's load on the arc from list index from (exclusive) to
// to (inclusive), clockwise.
func (p *fitPlan) arc(from, to int) float64 {
	if from < to {
		return p.cum[to] - p.cum[from]
	}
	return p.cum[to] + p.total - p.cum[from]
}

func (p *fitPlan) nextOn(k int) int {
	for {
		if k++; k == len(p.on) {
			k = 0
		}
		if p.on[k] {
			return k
		}
	}
}

func (p *fitPlan) prevOn(k int) int {
	for {
		if k--; k < 0 {
			k = len(p.on) - 1
		}
		if p.on[k] {
			return k
		}
	}
}

// toggle takes list entry k off the ring or puts it on: its arc passes to
// or from the next entry on the ring.
func (p *fitPlan) toggle(k int) {
	pv, nx := p.prevOn(k), p.nextOn(k)
	l := p.arc(pv, k)
	if p.on[k] {
		p.est[p.owner[k]] -= l
		p.est[p.owner[nx]] += l
	} else {
		p.est[p.owner[nx]] -= l
		p.est[p.owner[k]] += l
	}
	p.on[k] = !p.on[k]
	p.undo = append(p.undo, int32(k))
}

// give moves s virtual nodes from a to b in the plan, recording the
// toggles for rollback; false (and nothing changed) if a would keep none
// or b has no candidate entries left.
func (p *fitPlan) give(a, b, s int) bool {
	if s <= 0 || p.v[a]-s < 1 || p.v[b]+s > len(p.pos[b]) {
		return false
	}
	for range s {
		p.v[a]--
		p.toggle(int(p.pos[a][p.v[a]]))
	}
	for range s {
		p.toggle(int(p.pos[b][p.v[b]]))
		p.v[b]++
	}
	return true
}

// mark returns the undo log's length, to roll back to.
func (p *fitPlan) mark() int { return len(p.undo) }

// rollback undoes the toggles after mark m, and the counts with them.
func (p *fitPlan) rollback(m int) {
	for len(p.undo) > m {
		k := int(p.undo[len(p.undo)-1])
		p.undo = p.undo[:len(p.undo)-1]
		if p.on[k] {
			p.v[p.owner[k]]--
		} else {
			p.v[p.owner[k]]++
		}
		p.toggle(k)
		p.undo = p.undo[:len(p.undo)-1]
	}
}

// holder returns the list index of the entry that holds hot key k in the
// plan so far.
func (p *fitPlan) holder(k int) int {
	at := int(p.hot[k].at)
	if p.on[at] {
		return at
	}
	return p.nextOn(at)
}

func (p *fitPlan) sumSq() float64 {
	var s float64
	for _, x := range p.est {
		s += x * x
	}
	return s
}

func (p *fitPlan) maxEst() (float64, int) {
	m, at := math.Inf(-1), -1
	for i, x := range p.est {
		if x > m {
			m, at = x, i
		}
	}
	return m, at
}

// index is list entry k's index among its owner's (name_index).
func (p *fitPlan) index(k int) int { return int(p.idx[k]) }
