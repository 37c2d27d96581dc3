package manager

import (
	"slices"
	"strings"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// step runs expiry, reconciles the lease table with the desired ring, writes
// to the owners that need it and records the lookups' view changes. It looks
// only at what changed: the timers that came due, and the ranges touched in
// this step (or whose desired owner changed), never the whole table unless
// the whole table changed.
func (n *namespace) step(now time.Time) Output {
	// Arcs freed by applyHeld before this call share this step's generation.
	defer func() {
		n.bal.unsafeStep = false
		n.stepGen, n.stepGrantGen, n.changed, n.split = 0, 0, false, false
		n.touched = n.touched[:0]
	}()
	n.expire(now.UnixNano())
	n.endWaits()
	// A plain renewal changes nothing: the table is reconciled, compacted
	// and diffed only after an arc was freed or the membership changed.
	changed := n.changed || n.membersChanged
	if n.membersChanged {
		n.membersChanged = false
		n.updateDesired()
	}
	if changed {
		n.reconcile()
	}
	var out Output
	for _, name := range sortedKeys(n.dirty) {
		if s := n.sessions[name]; s != nil {
			if n.deferMessage(s, now.UnixNano()) {
				n.held[name] = true
				continue
			}
			delete(n.held, name)
			out.Send = append(out.Send, n.message(s, now.UnixNano()))
		}
	}
	n.dirty = emptied(n.dirty)
	if changed || n.split {
		n.compactTable()
	}
	if changed || len(n.dirtyOwners) > 0 {
		if c := n.publish(now); len(c.Changes) > 0 || c.ownersChanged() {
			out.Commits = append(out.Commits, c)
		}
	}
	n.boundView()
	n.log.truncate(now)
	out.Events, n.events, n.eventIdx = n.events, nil, nil
	return out
}

// compactTable merges the lease table's equal neighbours, looking only
// where it changed or was split since it was last compacted: comparing
// every pair of neighbours was half of a one-arc step at R = 65536.
func (n *namespace) compactTable() {
	if n.oneArc {
		n.table.Compact()
	} else {
		n.table.CompactNear(n.uncompacted, n.splitAt)
	}
	n.uncompacted, n.splitAt = n.uncompacted[:0], n.splitAt[:0]
	n.oneArc = n.table.Len() == 1
}

// expire runs the timers due at now: sessions that ended, holds that ran
// out, race re-sends.
func (n *namespace) expire(now int64) {
	for {
		d, ok := n.deadlines.popDue(now)
		if !ok {
			return
		}
		s := d.s
		live := s != nil && n.sessions[s.name] == s
		switch d.kind {
		case sessionExpiry:
			if !live {
				continue
			}
			if end := s.lastRecv.Add(n.hold).UnixNano(); end > now {
				n.deadlines.push(deadline{at: end, kind: sessionExpiry, s: s})
				continue
			}
			n.endSession(s, now)
		case grantedExpiry:
			if !live {
				continue
			}
			s.untilQueued = false
			if s.until > now {
				n.queueUntil(s)
				continue
			}
			n.arcsOf(s, func(i int) {
				if a := n.table.Value(i); a.st == Granted {
					n.note(EventExpiry, a.holder, i)
					n.set(i, n.free(false))
					n.m.stats.Expiries++
					n.changed = true
				}
			})
		case arcExpiry:
			n.indicesIn(d.r, func(i int) {
				if a := n.table.Value(i); a.st == Recalling && a.expiry <= now {
					n.note(EventExpiry, a.holder, i)
					n.set(i, n.free(false))
					n.m.stats.Expiries++
					n.changed = true
				}
			})
		case resend:
			if live && !s.resendAt.IsZero() && s.resendAt.UnixNano() <= now {
				n.dirty[s.name] = true
				n.m.stats.RaceResends++
			}
		case awaitExpiry:
			// A message held back for an answer that did not come in
			// time goes out now (step writes to the dirty sessions).
			if live && n.held[s.name] {
				n.dirty[s.name] = true
			}
		case balanceRound:
			n.balanceRound(time.Unix(0, now))
		}
	}
}

// endSession ends a session the manager has not heard from for T·65/60.
// Not retired: the same incarnation may come back after a partition; by
// then its own leases have expired. So have its arcs here, all of them:
// its Granted arcs expired at its until, which is at most T·65/60 after the
// last request heard, and a Recalling one earlier still.
func (n *namespace) endSession(s *session, now int64) {
	n.arcsOf(s, func(i int) {
		a := n.table.Value(i)
		if a.st == Granted || a.expiry <= now {
			n.note(EventExpiry, a.holder, i)
			n.set(i, n.free(false))
			n.m.stats.Expiries++
		} else {
			// Cannot happen (see above); never free a hold early.
			a.orphan, a.orphanAddr = true, n.addrs[a.holder]
			n.set(i, a)
			r, _ := n.table.At(i)
			n.deadlines.push(deadline{at: a.expiry, kind: arcExpiry, r: r})
		}
		n.changed = true
	})
	if s.waiting {
		n.waiting--
	}
	n.dropSession(s)
	delete(n.dirty, s.name)
	delete(n.held, s.name)
	n.membersChanged = true
	n.ownerChanged(s.name)
	n.m.stats.SessionExpiries++
}

// settle drops, or moves to their current time, the earliest deadlines that
// became moot, so that the next one is a timer with work to do.
func (n *namespace) settle() {
	for len(n.deadlines) > 0 {
		d := n.deadlines[0]
		s := d.s
		live := s != nil && n.sessions[s.name] == s
		switch d.kind {
		case sessionExpiry:
			if !live {
				n.deadlines.popDue(d.at)
				continue
			}
			if end := s.lastRecv.Add(n.hold).UnixNano(); end > d.at {
				n.deadlines.popDue(d.at)
				n.deadlines.push(deadline{at: end, kind: sessionExpiry, s: s})
				continue
			}
		case grantedExpiry:
			if !live {
				n.deadlines.popDue(d.at)
				continue
			}
			if s.until > d.at {
				n.deadlines.popDue(d.at)
				n.deadlines.push(deadline{at: s.until, kind: grantedExpiry, s: s})
				continue
			}
			if s.msgVersion == s.version+1 && len(s.renew)+len(s.grant) == 0 {
				// It holds nothing Granted; message queues it again when it does.
				n.deadlines.popDue(d.at)
				s.untilQueued = false
				continue
			}
		case arcExpiry:
			due := false
			n.eachIn(d.r, func(a arc) { due = due || (a.st == Recalling && a.expiry == d.at) })
			if !due {
				n.deadlines.popDue(d.at)
				continue
			}
		case resend:
			if !live || s.resendAt.UnixNano() != d.at {
				n.deadlines.popDue(d.at)
				continue
			}
		case awaitExpiry:
			if !live || !s.awaiting || s.awaitUntil != d.at {
				n.deadlines.popDue(d.at)
				continue
			}
		}
		return
	}
}

// eachIn calls fn with the value of every arc that meets r, without
// changing the table.
func (n *namespace) eachIn(r ring.Range, fn func(a arc)) {
	n.indicesIn(r, func(i int) { fn(n.table.Value(i)) })
}

// indicesIn calls fn with the index of every arc that meets r, in order
// from the one containing the point after r.Start, without changing the
// table's boundaries (fn may change values). Where r's ends are arc
// boundaries, these are exactly the arcs r is made of.
func (n *namespace) indicesIn(r ring.Range, fn func(i int)) {
	t := n.table
	i := t.Find(r.Start + 1)
	for range t.Len() {
		ar, _ := t.At(i)
		fn(i)
		if !r.IsFull() && ar.Contains(r.End) {
			return
		}
		if i++; i == t.Len() {
			i = 0
		}
	}
}

// queueUntil schedules s's Granted arcs' expiry, unless it is scheduled.
func (n *namespace) queueUntil(s *session) {
	if !s.untilQueued {
		s.untilQueued = true
		n.deadlines.push(deadline{at: s.until, kind: grantedExpiry, s: s})
	}
}

// updateDesiredRing apportions R among the live, non-draining owners,
// changes the desired ring to that in place, and returns the arcs whose
// desired owner changed.
func (n *namespace) updateDesiredRing() []ring.Move {
	names := n.ringNames()
	owners := vnodeCounts(names, n.vnodes, n.cfg.RingSize)
	// The owners whose count changes (or who leave the ring) commit their
	// records with it.
	// Only the counts that changed are written (owners is sorted by name).
	kept, before := 0, len(n.vnodes)
	for _, o := range owners {
		v, ok := n.vnodes[o.Name]
		if ok {
			kept++
		}
		if !ok || v != o.VNodes {
			n.ownerChanged(o.Name)
			n.vnodes[o.Name] = o.VNodes
		}
	}
	if kept < before { // some left the ring
		for name := range n.vnodes {
			if _, ok := slices.BinarySearchFunc(owners, name, func(o ring.Owner, name string) int { return strings.Compare(o.Name, name) }); !ok {
				n.ownerChanged(name)
				delete(n.vnodes, name)
			}
		}
	}
	// In place: only the entries that come or go are hashed, and the
	// moves are found from them (ring.Ring.Update), where building a new
	// ring and diffing it whole cost 2-3 ms and 2 MB per join at R = 65536.
	// Nobody else reads n.desired: DesiredRing hands out copies.
	moves, err := n.desired.Update(owners)
	if err != nil {
		panic("manager: ring: " + err.Error())
	}
	return moves
}

// ringNames returns the names of the live, non-draining owners, sorted.
// The desired ring's owners are sorted already: they are kept in order and
// only the names that joined since are sorted and merged in, so that a join
// among 5,000 owners costs no sort of all of them (1 ms here; apportioning
// and building the ring take sorted names without sorting them again). The
// list is valid until the next call (its memory is reused).
func (n *namespace) ringNames() []string {
	n.ringMark++
	var prev []ring.Owner
	if n.desired != nil {
		prev = n.desired.Owners()
	}
	kept := n.ringKept[:0]
	for _, o := range prev {
		if s := n.sessions[o.Name]; s != nil && !s.draining {
			kept = append(kept, o.Name)
			s.ringMark = n.ringMark
		}
	}
	n.ringKept = kept
	var added []string
	for name, s := range n.sessions {
		if !s.draining && s.ringMark != n.ringMark {
			added = append(added, name)
		}
	}
	if len(added) == 0 {
		return kept
	}
	slices.Sort(added)
	names := slices.Grow(n.ringMerged[:0], len(kept)+len(added))
	i, j := 0, 0
	for i < len(kept) || j < len(added) {
		if j == len(added) || i < len(kept) && kept[i] < added[j] {
			names = append(names, kept[i])
			i++
		} else {
			names = append(names, added[j])
			j++
		}
	}
	n.ringMerged = names
	return names
}

// updateDesired recomputes the desired ring and touches every range whose
// desired owner changed.
func (n *namespace) updateDesired() {
	capture := n.bal.capture
	n.bal.capture = false
	for _, mv := range n.updateDesiredRing() {
		n.touched = append(n.touched, mv.Range)
		if capture {
			n.bal.pending = append(n.bal.pending, mv.Range)
			n.bal.stats.RangesMoved++
		}
	}
}

// touchOwner touches the desired ring's arcs of owner name.
func (n *namespace) touchOwner(name string) {
	d := n.desired
	for p := range d.Len() {
		if d.OwnerName(p) == name {
			n.touched = append(n.touched, d.Arc(p))
		}
	}
}

// touchedRuns returns the step's touched ranges as disjoint ranges in ring
// order (by end, the one across zero first).
func (n *namespace) touchedRuns() []ring.Range {
	if len(n.touched) == 0 {
		return nil
	}
	t := ring.NewTable(false)
	as := make([]ring.Assignment[bool], len(n.touched))
	for i, r := range n.touched {
		as[i] = ring.Assignment[bool]{Range: r, Value: true}
	}
	t.SetAll(as)
	t.Compact()
	var runs []ring.Range
	t.Each(func(r ring.Range, v bool) {
		if v {
			runs = append(runs, r)
		}
	})
	return runs
}

// reconcile moves the lease table toward the desired ring in the touched
// ranges: recall arcs held by the wrong owner, cancel recalls that are
// wanted again, grant free arcs.
func (n *namespace) reconcile() {
	d := n.desired
	runs := n.touchedRuns()
	// An arc must not straddle an entry of the desired ring, so that one
	// owner wants all of it; nor a run's end, so that a run is whole arcs.
	// All cuts in one pass: one by one, each would move the table.
	var xs []uint64
	for _, r := range runs {
		xs = d.AppendHashesIn(xs, r)
		xs = append(xs, r.Start, r.End)
	}
	before := n.table.Len()
	n.table.SplitAll(xs)
	if n.table.Len() != before {
		n.split = true
		n.splitAt = append(n.splitAt, xs...)
		// The view too, in the same pass, while its neighbours are not
		// merged (publish): the owners' answers that follow a join or a
		// leave then change its values where it is cut already, where each
		// would have cut it at one new entry, moving all of it (131 times
		// for a join at R = 65536).
		n.view.SplitAll(xs)
	}
	for _, r := range runs {
		n.indicesIn(r, func(i int) { n.reconcileArc(i, d) })
	}
}

// reconcileArc applies the desired ring to arc i.
func (n *namespace) reconcileArc(i int, d *ring.Ring) {
	a := n.table.Value(i)
	r, _ := n.table.At(i)
	want := d.LookupOwner(r.End)
	if n.waiting > 0 {
		if ws := n.sessions[want]; ws != nil && ws.waiting {
			// Nothing moves toward an owner that may not be granted
			// anything yet: its arcs stay where they are until it may.
			want = ""
			if a.st != Free {
				return
			}
		}
	}
	switch {
	case a.orphan:
		return // only expiry ends it
	case a.st == Granted && a.holder != want && want != "" && n.bal.unsafeStep:
		// Negative control (Config.UnsafeBalanceNoRecall): the move hands
		// the arc over without recalling it.
		n.dirty[a.holder] = true
		a = arc{holder: want, gen: n.grantGen(), st: Granted}
		n.dirty[want] = true
		n.m.stats.Grants++
	case a.st == Granted && a.holder != want:
		a.st = Recalling
		a.confirmed = true // from now on it may only be renewed
		a.to = n.migrationTarget(a.holder, want)
		if s := n.sessions[a.holder]; s != nil {
			a.expiry = s.until
		}
		n.dirty[a.holder] = true
		n.m.stats.Recalls++
		n.note(EventRecall, a.holder, i)
		n.deadlines.push(deadline{at: a.expiry, kind: arcExpiry, r: r})
	case a.st == Recalling && a.holder == want:
		a.st, a.expiry, a.to = Granted, 0, ""
		n.dirty[a.holder] = true
		n.note(EventKeep, a.holder, i)
	case a.st == Free && want != "":
		// An arc freed in this step was never seen free: its new
		// generation, which nobody has held, goes to the grant.
		g := a.gen
		if g != n.stepGen {
			g = n.grantGen()
		}
		a = n.grantArc(a, want, g)
		n.dirty[want] = true
		n.m.stats.Grants++
	default:
		return
	}
	n.set(i, a)
}

// deferMessage reports whether a message to s waits: s has not answered
// the latest message that changed what it holds, and may still. The
// owner answers such a message at once; a second message sent before that
// answer arrives crosses it, both sides drop what they receive as racing
// (Centrifuge §2.3.2), and after a backoff the owner's re-send releases
// the grants of the message it dropped, which return under a new
// generation, announced to lookups as a loss. A drain or a join writes to
// an owner twice in quick succession (a recall, then, once others have
// released, a grant), so this crossing was the rule: it made a 25% ring
// move take 0.5-1 s on a loaded machine. Waiting for the answer, the
// message goes out as the response to it. awaitWait bounds the wait, in
// case the answer was lost. Holding a message back never affects safety:
// the protocol tolerates any delay.
func (n *namespace) deferMessage(s *session, now int64) bool {
	if !s.awaiting || now >= s.awaitUntil {
		return false
	}
	if !s.awaitQueued {
		s.awaitQueued = true
		n.deadlines.push(deadline{at: s.awaitUntil, kind: awaitExpiry, s: s})
	}
	return true
}

// awaitWait is how long a message may wait for the answer to the one
// before (deferMessage): T/4, the owners' renew interval, at least twice
// the longest race backoff. It only matters when no answer comes: the
// message was lost (dropped on a full stream), the owner is gone (its
// session ends anyway), or the message re-sent grants the owner already
// held and it has nothing to say (its periodic request comes within T/4
// then, and is the answer). An answer later than the wait crosses the
// next message, as every such answer did before stop and wait: on the
// benchmark's loaded client CPU, owners answered in 90-300 ms, and a wait
// of twice the race backoff (267 ms) ran out for several answers a move.
func (n *namespace) awaitWait() time.Duration {
	return max(n.cfg.LeaseDuration/4, 2*n.m.cfg.RaceBackoffMax)
}

// message writes the complete set of leases of s: renewals and grants. Every
// Granted lease in it is held by the manager until hold after the request it
// acknowledges was received (session.until). The lists are kept between
// messages until s's arcs change, and shared by the messages: nobody
// modifies them.
func (n *namespace) message(s *session, now int64) lease.LeaseResponse {
	if until := s.lastRecv.Add(n.hold).UnixNano(); until > s.until {
		s.until = until
	}
	if s.msgVersion != s.version+1 {
		// The leases come from s's index; only an arc a migration order
		// may name needs the table (and its peer's session).
		s.out, s.in = nil, nil
		if n.leasesFromIndex(s) {
			var out, in []lease.Migration
			n.arcsOf(s, func(i int) { out, in = n.migrationOrder(i, out, in) })
			s.out, s.in = closeMigrations(out), closeMigrations(in)
		}
		s.msgVersion = s.version + 1
	}
	if len(s.renew)+len(s.grant) > 0 {
		n.queueUntil(s)
	}
	n.seq++
	s.mySeq = n.seq
	s.resendAt = time.Time{}
	resp := lease.LeaseResponse{
		Namespace: n.cfg.Name,
		Owner:     s.name,
		Header:    lease.Header{Nonce: n.m.cfg.Nonce, Seq: s.mySeq, PeerNonce: s.nonce, AckSeq: s.peerSeq},
		Renew:     s.renew,
		Grant:     s.grant,
		// Every response names the routing header, so that an owner's
		// guard follows the namespace's (ownerguard.Owner.RoutingHeader).
		RoutingHeader: n.cfg.Header,
	}
	resp.MigrateOut, resp.MigrateIn = s.out, s.in
	s.sentGen = n.nextGen
	// The owner answers a message that changes what it holds: wait for
	// that answer before writing again (deferMessage). A renewal of
	// exactly what it listed last is not answered.
	s.awaiting = len(s.grant)+len(s.out)+len(s.in) > 0 || !sameLeases(s.renew, s.lastHeld)
	if s.awaiting {
		s.awaitUntil, s.awaitQueued = now+int64(n.awaitWait()), false
	}
	return resp
}

// leasesFromIndex sets s's message cache of leases (renewals, grants,
// recalls) from its index alone, runs in ring order, with no read of the
// table: at R = 65536 the 131 owners a join recalls from hold about 131
// arcs each, and a binary search and a table read per arc was most of the
// join's step. It reports whether an arc may be named by a migration order.
func (n *namespace) leasesFromIndex(s *session) (mig bool) {
	s.flush()
	var renew, grant []lease.Lease
	var recalls []ring.Range
	s.mine.Each(func(r ring.Range, v mineArc) {
		mig = mig || v.mig
		switch {
		case v.st == Free:
		case v.st != Granted:
			if k := len(recalls) - 1; k >= 0 && recalls[k].End == r.Start {
				recalls[k].End = r.End
			} else {
				recalls = append(recalls, r)
			}
		case v.confirmed:
			renew = append(renew, lease.Lease{Range: r, Gen: v.gen})
		default:
			grant = append(grant, lease.Lease{Range: r, Gen: v.gen})
		}
	})
	s.renew, s.grant, s.recalls = canonLeases(renew), canonLeases(grant), recalls
	return mig
}

// canonLeases puts disjoint leases in the canonical order an owner keeps
// them in: by end, adjacent ones of one generation merged, and the last
// merged into the first where they meet across zero.
func canonLeases(ls []lease.Lease) []lease.Lease {
	if len(ls) == 0 {
		return nil
	}
	slices.SortFunc(ls, func(a, b lease.Lease) int {
		switch {
		case a.Range.End < b.Range.End:
			return -1
		case a.Range.End > b.Range.End:
			return 1
		}
		return 0
	})
	out := ls[:0]
	for _, l := range ls {
		out = appendLease(out, l)
	}
	return mergeWrap(out)
}

// appendLease appends l, merging it into the previous lease when they are
// adjacent with the same generation.
func appendLease(ls []lease.Lease, l lease.Lease) []lease.Lease {
	if k := len(ls) - 1; k >= 0 && ls[k].Gen == l.Gen && ls[k].Range.End == l.Range.Start {
		ls[k].Range.End = l.Range.End
		return ls
	}
	return append(ls, l)
}

// mergeWrap joins the last and first leases when they meet across zero.
func mergeWrap(ls []lease.Lease) []lease.Lease {
	if k := len(ls) - 1; k > 0 && ls[k].Gen == ls[0].Gen && ls[k].Range.End == ls[0].Range.Start {
		ls[0].Range.Start = ls[k].Range.Start
		ls = ls[:k]
	}
	if len(ls) == 1 && ls[0].Range.Start == ls[0].Range.End {
		ls[0].Range = ring.Full()
	}
	return ls
}

func (n *namespace) nextDeadline() time.Time {
	n.settle()
	var d time.Time
	if at, ok := n.deadlines.next(); ok {
		d = time.Unix(0, at)
	}
	if t := n.log.nextTruncation(); !t.IsZero() && (d.IsZero() || t.Before(d)) {
		d = t
	}
	return d
}
