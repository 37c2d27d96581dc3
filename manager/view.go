package manager

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// viewVal is one arc of the lookups' view of the lease table. clean is not
// part of what lookups see; it rides along to flag the change that made it.
type viewVal struct {
	Owner, Addr string
	Gen         lease.Gen
	From        lease.Gen // lease.Entry.MigratedFrom
	clean       bool
}

func (v viewVal) same(w viewVal) bool {
	return v.Owner == w.Owner && v.Addr == w.Addr && v.Gen == w.Gen && v.From == w.From
}

// projection is the lookups' view of one lease-table arc: recalling arcs are
// still served by their holder until released, and an orphan by the
// incarnation that held it, at the address it had.
func (n *namespace) projection(a arc) viewVal {
	switch {
	case a.st == Free:
		return viewVal{Gen: a.gen, From: a.from, clean: a.clean}
	case a.orphan:
		return viewVal{Owner: a.holder, Addr: a.orphanAddr, Gen: a.gen, From: a.from, clean: a.clean}
	}
	return viewVal{Owner: a.holder, Addr: n.addrs[a.holder], Gen: a.gen, From: a.from, clean: a.clean}
}

// publish diffs the lookups' view against the lease table in the step's
// touched ranges (the view elsewhere is the table's projection already),
// updates it, and appends the differences to the change log.
func (n *namespace) publish(now time.Time) Commit {
	out := Commit{Namespace: n.cfg.Name, FromLSN: n.log.lsn, At: now}
	if len(n.dirtyOwners) > 0 {
		out.OwnerUpserts, out.OwnerRemovals = n.ownerDeltas()
	}
	type piece struct {
		r       ring.Range
		old, nv viewVal
	}
	var pieces []piece
	if debugPublish {
		fmt.Println("runs", n.touchedRuns())
		n.table.Each(func(r ring.Range, a arc) { fmt.Printf("  T %v %+v\n", r, a) })
		n.view.Each(func(r ring.Range, a viewVal) { fmt.Printf("  V %v %+v\n", r, a) })
	}
	for _, r := range n.touchedRuns() {
		ring.WalkIn(n.table, n.view, r, func(r ring.Range, a arc, old viewVal) {
			if nv := n.projection(a); nv != old {
				pieces = append(pieces, piece{r, old, nv})
			}
		})
	}
	// In ring order, by end, as a walk of the whole circle would list them.
	slices.SortFunc(pieces, func(a, b piece) int { return cmp.Compare(a.r.End, b.r.End) })
	var pending []lease.Change
	sets := make([]ring.Assignment[viewVal], 0, len(pieces))
	for _, p := range pieces {
		sets = append(sets, ring.Assignment[viewVal]{Range: p.r, Value: p.nv})
		if p.old.same(p.nv) {
			continue // only the clean mark, which lookups do not see
		}
		c := lease.Change{
			Entry: lease.Entry{Range: p.r, Owner: p.nv.Owner, Addr: p.nv.Addr, Gen: p.nv.Gen, MigratedFrom: p.nv.From},
			// Clean only where the state came from the very generation
			// lookups knew: a migration's new generation replaces the
			// one it was exported under, nothing older.
			Clean: p.nv.clean && p.nv.From != 0 && p.nv.From == p.old.Gen,
		}
		if k := len(pending) - 1; k >= 0 && continues(pending[k], c) {
			pending[k].Entry.Range.End = p.r.End
			continue
		}
		pending = append(pending, c)
	}
	// The view's arcs are not all merged (boundView), so one change can
	// come in two pieces, the first and the last by end, that meet at an
	// end the view kept across zero: one change, as from a merged view.
	if k := len(pending) - 1; k > 0 && continues(pending[k], pending[0]) {
		pending[0].Entry.Range.Start = pending[k].Entry.Range.Start
		if pending[0].Entry.Range.IsFull() {
			pending[0].Entry.Range = ring.Full()
		}
		pending = pending[:k]
	}
	if len(sets) > 0 {
		n.view.SetAll(sets)
		n.viewArcs = -1
	}
	for _, c := range pending {
		out.Changes = append(out.Changes, n.log.append(c, now))
	}
	out.NextGen = n.nextGen
	return out
}

// continues reports whether change c starts where q ends and sets the
// same value: the two are one change.
func continues(q, c lease.Change) bool {
	if q.Entry.Range.End != c.Entry.Range.Start {
		return false
	}
	q.Entry.Range = c.Entry.Range
	return q == c
}

// viewSlack is how many arcs the view may have beyond twice the table's
// before its neighbours are merged: a small view is merged rarely too.
const viewSlack = 1024

// boundView merges the view's equal neighbours once it has more than twice
// the table's arcs (and viewSlack). Until then they stay apart: the view's
// boundaries are the table's (reconcile cuts both at once) and those the
// table has merged since, so a step changes the view's values in place
// where merging it after each change made the next change cut it again,
// moving the whole view each time; and a merge of all of it, O(view), comes
// after at least as many merges in the table. Nothing a lookup receives
// depends on it: publish merges the changes it logs, listView a snapshot.
func (n *namespace) boundView() {
	if n.view.Len() > 2*n.table.Len()+viewSlack {
		n.view.Compact()
		n.viewArcs = n.view.Len()
	}
}

// mergedViewArcs is the number of arcs of the view with its equal
// neighbours merged (what a snapshot lists), counted when a change made
// it unknown.
func (n *namespace) mergedViewArcs() int {
	if n.viewArcs < 0 {
		n.viewArcs = ring.CountMerged(n.view)
	}
	return n.viewArcs
}

// View returns the lookups' view of a namespace: the whole table in ring
// order, adjacent equal ranges merged.
func (m *Manager) View(ns string) ([]lease.Entry, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	return n.entries(), nil
}

// viewSnapshot copies the view of ns and returns a function that lists the
// copy as View lists the view, which may run on any goroutine, at any time:
// the admin API lists a view of 65,536 arcs off the leader's loop. The copy
// is the one View makes anyway (without the clean marks lookups do not see).
func (m *Manager) viewSnapshot(ns string) (func() []lease.Entry, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	v := unmarked(n.view)
	return func() []lease.Entry { return listView(v) }, nil
}

func (n *namespace) entries() []lease.Entry { return listView(unmarked(n.view)) }

// unmarked copies a view table without the clean marks.
func unmarked(t *ring.Table[viewVal]) *ring.Table[viewVal] {
	return ring.Map(t, func(v viewVal) viewVal { v.clean = false; return v })
}

// listView lists a view copy (unmarked), merging its equal neighbours.
func listView(v *ring.Table[viewVal]) []lease.Entry {
	v.Compact()
	out := make([]lease.Entry, 0, v.Len())
	v.Each(func(r ring.Range, x viewVal) {
		out = append(out, lease.Entry{Range: r, Owner: x.Owner, Addr: x.Addr, Gen: x.Gen, MigratedFrom: x.From})
	})
	return out
}

// Lookup answers a lookup: the changes after its LSN, or a snapshot when the
// log no longer reaches back that far, when the lookup knew another manager
// incarnation, or when the snapshot is smaller (PRS §4.2).
func (m *Manager) Lookup(req lease.LookupRequest, now time.Time) (lease.LookupResponse, error) {
	n, err := m.namespace(req.Namespace)
	if err != nil {
		return lease.LookupResponse{}, err
	}
	resp := lease.LookupResponse{Namespace: n.cfg.Name, ManagerNonce: m.cfg.Nonce, LSN: n.log.lsn}
	if req.ManagerNonce == m.cfg.Nonce {
		if ch, ok := n.log.since(req.LSN); ok && len(ch) <= n.mergedViewArcs() {
			resp.FromLSN = req.LSN
			resp.Changes = ch
			m.stats.LookupDeltas++
			return resp, nil
		}
	}
	resp.Snapshot = true
	resp.Entries = n.entries()
	m.stats.LookupSnapshots++
	return resp, nil
}

// Push builds the message that delivers these changes to a lookup that is
// at FromLSN.
func (nc Commit) Push(managerNonce uint64) lease.LookupResponse {
	return lease.LookupResponse{
		Namespace:    nc.Namespace,
		ManagerNonce: managerNonce,
		FromLSN:      nc.FromLSN,
		LSN:          nc.Changes[len(nc.Changes)-1].LSN,
		Changes:      nc.Changes,
	}
}

// changeLog is the namespace's log of view changes, truncated by age. With
// keep 0 it holds none and only numbers them.
type changeLog struct {
	lsn     uint64 // last LSN assigned
	keep    time.Duration
	entries []logEntry
}

type logEntry struct {
	c  lease.Change
	at time.Time
}

func (l *changeLog) init(keep time.Duration) { l.keep = keep }

func (l *changeLog) append(c lease.Change, now time.Time) lease.Change {
	l.lsn++
	c.LSN = l.lsn
	if l.keep > 0 {
		l.entries = append(l.entries, logEntry{c: c, at: now})
	}
	return c
}

// since returns the changes after lsn, or false if the log no longer holds
// all of them (or lsn is from the future).
func (l *changeLog) since(lsn uint64) ([]lease.Change, bool) {
	if lsn > l.lsn {
		return nil, false
	}
	first := l.lsn + 1 - uint64(len(l.entries)) // LSN of entries[0]
	if lsn+1 < first {
		return nil, false
	}
	tail := l.entries[lsn+1-first:]
	out := make([]lease.Change, len(tail))
	for i, e := range tail {
		out[i] = e.c
	}
	return out, true
}

func (l *changeLog) truncate(now time.Time) {
	k := 0
	for k < len(l.entries) && now.Sub(l.entries[k].at) >= l.keep {
		k++
	}
	if k > 0 {
		l.entries = append(l.entries[:0:0], l.entries[k:]...)
	}
}

func (l *changeLog) nextTruncation() time.Time {
	if len(l.entries) == 0 {
		return time.Time{}
	}
	return l.entries[0].at.Add(l.keep)
}

var debugPublish = false
