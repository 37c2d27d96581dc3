package manager

import (
	"cmp"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// opBalance is the raft command that changes a namespace's balancing
// policy and knobs (Server.putBalance).
const opBalance = "balance"

// ownerLoad is an owner's latest accepted load report: soft, leader-local
// state (never committed; a new leader starts without reports).
type ownerLoad struct {
	rate      float64
	groups    [lease.LoadGroups]float64
	hasGroups bool
	hot       [lease.MaxHotKeys]lease.HotKey
	nhot      int
	at        time.Time // when the manager received it
}

// balancer is a namespace's balancing state on the leader.
type balancer struct {
	policy Policy // nil: off
	queued bool   // a balanceRound deadline is pending
	last   time.Time
	// pending are the ranges the last moves changed, until the lease table
	// has reached the desired ring there; doneAt is when it had. A round
	// uses only reports received after doneAt + interval/2, so that no
	// owner is judged on a load measured before a move finished.
	pending []ring.Range
	capture bool // the next updateDesired records its moves in pending
	doneAt  time.Time
	// unsafeStep: this step's moves skip the recall (negative control).
	unsafeStep bool
	// shares caches groupShares of sharesOf.
	shares   map[string]*[lease.LoadGroups]float64
	sharesOf *ring.Ring
	stats    BalanceStats
}

// BalanceStats counts a namespace's balancing since this leader took over.
type BalanceStats struct {
	Rounds       uint64 // rounds run
	MovingRounds uint64 // rounds that moved virtual nodes
	VNodesMoved  uint64
	RangesMoved  uint64 // ranges of the desired ring that changed owner through moves
	Reports      uint64 // load reports accepted
	ReportsIdle  uint64 // load reports ignored: they came sooner than minLoadGap after the last one
}

// minLoadGap is the least time between two load reports of one owner that
// the leader applies: T/16, a quarter of the renewal interval (an honest
// owner reports with each renewal, every T/4, and sooner only on a race
// re-send). Reports in between are ignored, so a chatty owner costs no more
// than an honest one.
func (n *namespace) minLoadGap() time.Duration { return n.cfg.LeaseDuration / 16 }

// noteLoad records an accepted request's load report of s (validated at
// the edge) and queues a policy round if none is.
func (n *namespace) noteLoad(s *session, l *lease.LoadReport, now time.Time) {
	b := &n.bal
	if s.load != nil && now.Sub(s.load.at) < n.minLoadGap() {
		b.stats.ReportsIdle++
		return
	}
	if s.load == nil {
		s.load = &ownerLoad{}
	}
	s.load.rate, s.load.at, s.load.hasGroups = l.Rate, now, len(l.Groups) == lease.LoadGroups
	if s.load.hasGroups {
		copy(s.load.groups[:], l.Groups)
	}
	s.load.nhot = copy(s.load.hot[:], l.Hot)
	b.stats.Reports++
	if b.pending != nil && n.reached(b.pending) {
		b.pending, b.doneAt = nil, now
	}
	if b.policy != nil && !b.queued {
		b.queued = true
		at := now
		if !b.last.IsZero() {
			at = b.last.Add(n.cfg.BalanceInterval)
		}
		if at.Before(now) {
			at = now
		}
		n.deadlines.push(deadline{at: at.UnixNano(), kind: balanceRound})
	}
}

// reached reports whether every arc in rs is granted to its desired owner.
// O(arcs in rs).
func (n *namespace) reached(rs []ring.Range) bool {
	for _, r := range rs {
		ok := true
		n.indicesIn(r, func(i int) {
			ar, a := n.table.At(i)
			ok = ok && a.st == Granted && !a.orphan && a.holder == n.desired.LookupOwner(ar.End)
		})
		if !ok {
			return false
		}
	}
	return true
}

// balanceRound runs the policy once: a round is queued by a load report
// and runs at most once per BalanceInterval. It moves nothing while the
// last moves are under way, while an owner waits to be granted, or until
// every owner of the desired ring has reported since the last moves were
// done and half an interval more.
func (n *namespace) balanceRound(now time.Time) {
	b := &n.bal
	b.queued, b.last = false, now
	if b.policy == nil || b.pending != nil || n.waiting > 0 {
		return
	}
	b.stats.Rounds++
	fresh := b.doneAt.Add(n.cfg.BalanceInterval / 2)
	d := n.desired
	owners := make([]OwnerLoad, 0, len(d.Owners()))
	for _, o := range d.Owners() {
		s := n.sessions[o.Name]
		if s == nil || s.draining || s.load == nil || !s.load.at.After(fresh) {
			return
		}
		ol := OwnerLoad{Name: o.Name, VNodes: o.VNodes, Load: s.load.rate}
		if s.load.hasGroups {
			ol.Groups = s.load.groups[:]
		}
		ol.Hot = s.load.hot[:s.load.nhot]
		owners = append(owners, ol)
	}
	if len(owners) < 2 || meanLoad(owners) < n.cfg.BalanceMinLoad {
		return
	}
	if _, ok := b.policy.(wantShares); ok {
		if b.sharesOf != d {
			b.shares, b.sharesOf = groupShares(d), d
		}
		for i := range owners {
			owners[i].Share = b.shares[owners[i].Name]
		}
	}
	moves := b.policy.Plan(BalanceInput{RingSize: n.cfg.RingSize, Ring: d, Owners: owners, MaxMoves: n.cfg.BalanceMaxMoves})
	n.applyMoves(moves, now)
}

// applyMoves changes the virtual-node counts by moves, checked: both owners
// in the desired ring, the giver keeping at least one virtual node, at most
// BalanceMaxMoves in all. Σ V_h stays R. The step that follows recomputes
// the desired ring and recalls what moved.
func (n *namespace) applyMoves(moves []VNodeMove, now time.Time) {
	moved := 0
	for _, mv := range moves {
		vf, okf := n.vnodes[mv.From]
		_, okt := n.vnodes[mv.To]
		if !okf || !okt || mv.From == mv.To || mv.N <= 0 {
			continue
		}
		k := min(mv.N, vf-1, n.cfg.BalanceMaxMoves-moved)
		if k <= 0 {
			continue
		}
		n.vnodes[mv.From] -= k
		n.vnodes[mv.To] += k
		n.ownerChanged(mv.From)
		n.ownerChanged(mv.To)
		moved += k
	}
	if moved == 0 {
		return
	}
	b := &n.bal
	b.stats.MovingRounds++
	b.stats.VNodesMoved += uint64(moved)
	b.capture, b.pending = true, []ring.Range{}
	b.unsafeStep = n.m.cfg.UnsafeBalanceNoRecall
	n.membersChanged = true
}

// vnodeCounts returns the desired ring's owners: names with the counts in
// prev when prev is exactly those names and sums to total (the counts a
// policy set), else reapportion(prev, names, total). Sorted by name.
func vnodeCounts(names []string, prev map[string]int, total int) []ring.Owner {
	if len(prev) == len(names) && len(names) > 0 {
		sum, all := 0, true
		for _, name := range names {
			v, ok := prev[name]
			all = all && ok && v >= 0
			sum += v
		}
		if all && sum == total {
			out := make([]ring.Owner, len(names))
			for i, name := range names {
				out[i] = ring.Owner{Name: name, VNodes: prev[name]}
			}
			if byName := func(a, b ring.Owner) int { return cmp.Compare(a.Name, b.Name) }; !slices.IsSortedFunc(out, byName) {
				slices.SortFunc(out, byName)
			}
			return out
		}
	}
	return reapportion(prev, names, total)
}

// reapportion divides total among names when the membership changes. When
// prev is ring.Apportion's even split (no policy has moved anything, or
// none ran), the result is ring.Apportion's even split of names, as before
// balancing existed. Otherwise every staying owner keeps its weight relative
// to the others (its previous count), a new owner gets the previous mean,
// and total is divided in proportion (largest remainder, ties by name
// hash), each owner getting at least one virtual node when total allows.
func reapportion(prev map[string]int, names []string, total int) []ring.Owner {
	even, err := ring.Apportion(names, total)
	if err != nil {
		panic("manager: apportion: " + err.Error()) // names are unique and R was validated
	}
	if len(prev) == 0 || len(names) == 0 {
		return even
	}
	prevOwners := make([]ring.Owner, 0, len(prev))
	for name, v := range prev {
		prevOwners = append(prevOwners, ring.Owner{Name: name, VNodes: v})
	}
	if ring.IsApportioned(prevOwners, total) {
		return even
	}
	avg := float64(total) / float64(len(prev))
	w := make([]float64, len(even))
	var sum float64
	for i, o := range even {
		if v, ok := prev[o.Name]; ok {
			w[i] = float64(v)
		} else {
			w[i] = avg
		}
		sum += w[i]
	}
	if sum <= 0 {
		return even
	}
	out := slices.Clone(even)
	frac := make([]float64, len(out))
	given := 0
	for i := range out {
		q := float64(total) * w[i] / sum
		out[i].VNodes = int(q)
		frac[i] = q - float64(out[i].VNodes)
		given += out[i].VNodes
	}
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	hash := make([]uint64, len(out))
	for i, o := range out {
		hash[i] = ring.HashString(o.Name)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := -cmp.Compare(frac[a], frac[b]); c != 0 {
			return c
		}
		ha, hb := hash[a], hash[b]
		switch {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		}
		return cmp.Compare(out[a].Name, out[b].Name)
	})
	for k := 0; given < total; k++ {
		out[order[k%len(order)]].VNodes++
		given++
	}
	if total >= len(out) {
		for i := range out {
			for out[i].VNodes == 0 {
				big := 0
				for j := range out {
					if out[j].VNodes > out[big].VNodes {
						big = j
					}
				}
				out[big].VNodes--
				out[i].VNodes++
			}
		}
	}
	return out
}

// BalanceStats returns a namespace's balancing counters.
func (m *Manager) BalanceStats(ns string) (BalanceStats, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return BalanceStats{}, err
	}
	return n.bal.stats, nil
}

// OwnerLoadInfo is an owner's latest load report as the leader holds it.
type OwnerLoadInfo struct {
	Rate       float64
	ReportedAt time.Time      // zero: no report
	Hot        []lease.HotKey // the report's busiest keys, if it named any
}

// Loads returns the latest load report of each live owner, by name.
func (m *Manager) Loads(ns string) (map[string]OwnerLoadInfo, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	out := make(map[string]OwnerLoadInfo, len(n.sessions))
	for name, s := range n.sessions {
		if s.load != nil {
			out[name] = OwnerLoadInfo{Rate: s.load.rate, ReportedAt: s.load.at, Hot: slices.Clone(s.load.hot[:s.load.nhot])}
		} else {
			out[name] = OwnerLoadInfo{}
		}
	}
	return out, nil
}

// RingShares returns the fraction of the circle each owner's arcs cover in
// the desired ring. O(R).
func (m *Manager) RingShares(ns string) (map[string]float64, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	d := n.desired
	out := make(map[string]float64, len(d.Owners()))
	for p := range d.Len() {
		out[d.OwnerName(p)] += d.Arc(p).Share()
	}
	return out, nil
}

// withBalance returns cfg with the balancing policy and knobs of nc (its
// other fields are ignored), zero knobs taking their defaults, checked as
// at creation. cfg is unchanged on error.
func withBalance(cfg, nc NamespaceConfig) (NamespaceConfig, error) {
	c := cfg
	c.Balance, c.BalanceInterval, c.BalanceMaxMoves, c.BalanceMinLoad = nc.Balance, nc.BalanceInterval, nc.BalanceMaxMoves, nc.BalanceMinLoad
	if err := c.balanceDefaults(); err != nil {
		return cfg, err
	}
	return c, nil
}

// BalanceConfig returns the configuration namespace nc.Name would have
// with nc's balancing policy and knobs, without changing anything: the
// check the admin API makes before it commits SetBalance.
func (m *Manager) BalanceConfig(nc NamespaceConfig) (NamespaceConfig, error) {
	n, err := m.namespace(nc.Name)
	if err != nil {
		return NamespaceConfig{}, err
	}
	return withBalance(n.cfg, nc)
}

// SetBalance changes the balancing policy and knobs of namespace nc.Name
// (nc's other fields are ignored). The policy starts afresh, as under a
// new leader; load reports and the wait for moves under way are kept.
func (m *Manager) SetBalance(nc NamespaceConfig) error {
	n, err := m.namespace(nc.Name)
	if err != nil {
		return err
	}
	c, err := withBalance(n.cfg, nc)
	if err != nil {
		return err
	}
	n.cfg = c
	n.bal.policy = newPolicy(c.Balance)
	return nil
}
