package manager

import (
	"fmt"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// State is the manager's state of one arc of the lease table.
type State uint8

// Arc states.
const (
	Free      State = iota // no owner may hold it; grantable
	Granted                // held by its holder
	Recalling              // recalled from its holder; not yet released or expired
)

func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Granted:
		return "granted"
	case Recalling:
		return "recalling"
	}
	return "?"
}

// arc is the value of one arc of the lease table. It is comparable so that
// adjacent equal arcs merge.
type arc struct {
	holder    string // owner name; "" when free
	gen       lease.Gen
	st        State
	confirmed bool // the holder listed it since the grant: send as renewal, never re-grant
	clean     bool // freed by a clean migration: its new generation is not a loss
	// Migration (migrate.go): to is the new owner a Recalling arc was
	// recalled for as a migration (its holder exports to it); a clean arc
	// was released as migrated by src under generation from, and is
	// granted to to as an import.
	to, src string
	from    lease.Gen
	// srcAddr is where src served MigrationService when the import was
	// granted: the import order names it even after src's session is gone,
	// so that an import re-sent (not yet confirmed) is never sent as a
	// plain grant while lookups see it migrated (the fetch then fails and
	// the range is regranted with a loss).
	srcAddr string
	// expiry is the manager-side hold end of a Recalling arc or an orphan,
	// in unix nanoseconds, fixed when it was recalled or orphaned. A Granted
	// arc expires with its holder's session (session.until) and has 0
	// here, as has a free one.
	expiry int64
	// orphan marks an arc held by an earlier incarnation of holder, which
	// a newer one has replaced: no session can renew or release it (its
	// holder may still run, cut off, and believe it until its own lease
	// ends), so it is Recalling until it expires. orphanAddr is where that
	// incarnation served it, which lookups keep routing to meanwhile.
	orphan     bool
	orphanAddr string
}

// session is one incarnation of an owner, as the manager knows it.
type session struct {
	name, addr string
	nonce      uint64 // the owner's incarnation nonce
	mySeq      uint64 // last seq sent to this incarnation
	peerSeq    uint64 // last seq heard from it
	lastRecv   time.Time
	resendAt   time.Time // pending re-send after a dropped racing request
	draining   bool
	migAddr    string // where it serves MigrationService; "" if it cannot migrate
	// ringMark is the namespace's ringMark when ringNames last found it
	// among the desired ring's owners.
	ringMark uint64
	// waiting marks a new incarnation that replaced a live one: it is
	// granted nothing while any arc it orphaned (orphanRanges) is left (a
	// name is not an identity; see replace).
	waiting      bool
	orphanRanges []ring.Range

	// until is when its Granted arcs expire (unix nanoseconds): T·65/60
	// after the request that the latest message to it acknowledged.
	// untilQueued: a grantedExpiry deadline is pending for it.
	until       int64
	untilQueued bool
	// mine is where it holds arcs, Granted or Recalling (not orphans), and
	// what of each its message needs (mineArc; the zero value where it
	// holds none): the index that lets a request, a message or an expiry
	// touch only its arcs instead of the whole table. version counts
	// changes to those arcs (holder, state, generation, confirmation).
	mine    *ring.Table[mineArc]
	version uint64
	// pending are index updates not yet applied to mine: applied in one
	// merge pass when the index is next read (flush), since a step may
	// change thousands of one session's arcs.
	pending []ring.Assignment[mineArc]
	// The renewal fast path: the Held of the last request applied and the
	// version after it; a request listing exactly that, with no change to
	// its arcs since, changes nothing.
	lastHeld    []lease.Lease
	heldVersion uint64
	// The message cache: renewals and grants as of msgVersion-1 (0: none).
	// Messages share these slices; nobody modifies them.
	renew, grant []lease.Lease
	out, in      []lease.Migration // migration orders (migrate.go)
	msgVersion   uint64
	// recalls are where the arcs of s that were in neither list lie
	// (Recalling ones) when the cache was built, in ring order, adjacent
	// ones merged: confirmsMessage needs none, releasesMessage visits only
	// those.
	recalls []ring.Range
	// load is its latest load report (balance.go); nil until one.
	load *ownerLoad

	// Stop and wait (step.go, deferMessage). awaiting: the latest message
	// to it changes what it holds (a grant, a recall, a migration order)
	// and it has not answered yet; further messages wait for that answer,
	// or until awaitUntil (unix nanoseconds). sentGen is the namespace's
	// highest generation when the latest message was written: an
	// unconfirmed grant under a higher one was never sent (unsent).
	awaiting    bool
	awaitUntil  int64
	awaitQueued bool // an awaitExpiry deadline is pending for awaitUntil
	sentGen     lease.Gen
}

// unsent reports whether a, one of s's arcs, is a grant that no message
// to s has carried yet (its message waits, deferMessage): s cannot hold
// it, nor list it in a request.
func (s *session) unsent(a arc) bool {
	return a.st == Granted && !a.confirmed && a.gen > s.sentGen
}

// namespace is one pool: its owners, lease table and change log.
type namespace struct {
	m        *Manager
	cfg      NamespaceConfig
	hold     time.Duration
	sessions map[string]*session
	byAddr   map[string][]string // the names of the sessions with each address (putSession)
	ringMark uint64              // ringNames's count of calls (session.ringMark)
	// ringNames's two lists, kept between calls: it runs on every join
	// and leave, and two new lists of every name each time were 0.8 GB of
	// BenchmarkStorm10x's 5,000 joins.
	ringKept, ringMerged []string
	retired              map[string][]uint64 // per owner name, nonces of ended incarnations
	addrs                map[string]string   // last known address per owner name
	desired              *ring.Ring
	membersChanged       bool // the desired ring must be recomputed
	changed              bool // an arc was freed or changed hands: reconcile and publish
	split                bool // arcs were split to match an owner's ranges: compact
	table                *ring.Table[arc]
	// view is the lookups' view of the table (view.go). Its equal
	// neighbours are merged only now and then (boundView): a view kept
	// merged was cut again by the next grant of a merged arc, and each
	// cut or merge moved the whole view (half of an owner's request at
	// R = 65536). viewArcs caches its arc count merged (-1: unknown).
	view         *ring.Table[viewVal]
	viewArcs     int
	nextGen      lease.Gen
	stepGen      lease.Gen // the generation given to arcs freed in the current step
	stepGrantGen lease.Gen // the generation given to arcs granted in the current step that were free before it
	seq          uint64    // last sequence number sent to any session: monotonic per peer even when a session is re-created
	log          changeLog
	dirty        map[string]bool // sessions to write to at the end of the step
	// held are the sessions whose message waits for their answer to the
	// last (deferMessage); their answer or awaitExpiry makes them dirty
	// again. Kept apart from dirty so that a step looks only at what it
	// changed: in a join storm of 5,000 owners thousands wait at once, and
	// sorting and checking all of them in every step was a third of the
	// leader's CPU.
	held map[string]bool
	// dirtyOwners names the owners whose records changed in this step:
	// publish commits theirs (or their removal), not the whole list.
	dirtyOwners map[string]bool
	// Where the table may have neighbours to merge since it was last
	// compacted: the ranges of the arcs that a change made equal to a
	// neighbour (set) and the points it was split at (compactTable looks
	// only there); oneArc: it was one arc then, whose end is arbitrary.
	uncompacted []ring.Range
	splitAt     []uint64
	oneArc      bool
	// touched lists the ranges whose arcs changed in this step (or whose
	// desired owner did): reconcile and publish look only there, so a step
	// costs what it changes, not the size of the ring.
	touched []ring.Range
	// deadlines holds every timer: session expiries, holds of Granted arcs
	// (per session), of Recalling arcs and orphans, and race re-sends.
	deadlines deadlineHeap
	waiting   int // sessions waiting
	// events are the step's recalls and expiries, per kind and owner
	// (note), handed out in Output.Events.
	events   []CoreEvent
	eventIdx map[coreEventKey]int
	// vnodes are the desired ring's counts V_h (Σ = RingSize), committed
	// in the owner records; bal is the balancing policy's state (balance.go).
	vnodes map[string]int
	bal    balancer
}

const maxRetired = 16

func newNamespace(m *Manager, nc NamespaceConfig, now time.Time) *namespace {
	n := &namespace{
		m:        m,
		cfg:      nc,
		hold:     HoldDuration(nc.LeaseDuration),
		sessions: map[string]*session{},
		byAddr:   map[string][]string{},
		retired:  map[string][]uint64{},
		addrs:    map[string]string{},
		nextGen:  1,
		dirty:    map[string]bool{},
		held:     map[string]bool{},
		vnodes:   map[string]int{},

		dirtyOwners: map[string]bool{},
	}
	n.bal.policy = newPolicy(nc.Balance)
	n.desired, _ = ring.New(nil)
	n.table = ring.NewTable(arc{gen: 1})
	n.oneArc = true
	n.view = ring.NewTable(viewVal{Gen: 1})
	n.viewArcs = 1
	n.log.init(n.m.cfg.LogRetention)
	return n
}

// ownerChanged marks name's owner record for the next commit.
func (n *namespace) ownerChanged(name string) { n.dirtyOwners[name] = true }

func newSession(name, addr string, nonce uint64) *session {
	return &session{name: name, addr: addr, nonce: nonce, mine: ring.NewTable(mineArc{})}
}

func (n *namespace) retire(name string, nonce uint64) {
	r := append(n.retired[name], nonce)
	if len(r) > maxRetired {
		r = r[len(r)-maxRetired:]
	}
	n.retired[name] = r
}

// holderOf is the session that holds a, in its index, or nil: a Granted or
// Recalling arc that is not an orphan belongs to its holder's session.
func (n *namespace) holderOf(a arc) *session {
	if a.st == Free || a.orphan {
		return nil
	}
	return n.sessions[a.holder]
}

// set replaces the value of table arc i, keeping the sessions' indexes and
// the step's touched ranges up to date. Every change to an arc goes
// through here.
func (n *namespace) set(i int, a arc) {
	old := n.table.Value(i)
	if old == a {
		return
	}
	r, _ := n.table.At(i)
	n.table.SetValue(i, a)
	n.touched = append(n.touched, r)
	// Only an arc now equal to a neighbour can merge with it, so only
	// such an arc waits for compactTable. A set that changes nothing
	// lookups see (a confirmation) is not followed by a compaction:
	// recording every one let a join storm's R confirmations wait for the
	// next change, whose step then walked them all (35 ms at R = 65536).
	// Of two arcs equal at the step's end, the one set last saw the other
	// as it is then, so no merge is missed.
	if k := n.table.Len(); k > 1 && (n.table.Value((i+k-1)%k) == a || n.table.Value((i+1)%k) == a) {
		n.uncompacted = append(n.uncompacted, r)
	}
	os, ns := n.holderOf(old), n.holderOf(a)
	if os != nil {
		os.version++
		if os != ns {
			os.note(ring.Assignment[mineArc]{Range: r})
		}
	}
	if ns == nil {
		return
	}
	if ns != os {
		ns.version++
	}
	if m := mineOf(a); ns != os || m != mineOf(old) {
		ns.note(ring.Assignment[mineArc]{Range: r, Value: m})
	}
}

// mineArc is what a session's index (session.mine) records of an arc the
// session holds: what its message lists the arc as (leasesFromIndex). The
// zero value (Free) is an arc it does not hold.
type mineArc struct {
	gen       lease.Gen
	st        State
	confirmed bool
	// mig: the arc may be named by a migration order (an export of a
	// Recalling arc, an import not yet confirmed), which needs more of
	// the arc and its peer's session: message walks the table for those.
	mig bool
}

// mineOf is what an index records of a, which its holder's session holds.
func mineOf(a arc) mineArc {
	return mineArc{gen: a.gen, st: a.st, confirmed: a.confirmed,
		mig: a.st == Recalling && a.to != "" || a.st == Granted && !a.confirmed && a.clean && a.src != ""}
}

// note queues an update to s's index. A session whose messages are brought
// forward (confirmsMessage) is not read for long, and each confirmation is
// an update: past twice the index's size plus a margin, the updates are
// applied, so that what waits stays in proportion to what s holds.
func (s *session) note(u ring.Assignment[mineArc]) {
	s.pending = append(s.pending, u)
	if len(s.pending) > 2*s.mine.Len()+64 {
		s.flush()
	}
}

// flush applies s's pending index updates. A large buffer is let go: a
// join storm's updates would otherwise stay allocated for each of
// thousands of sessions (12 MB at ten times PRS's owners, R = 65536).
func (s *session) flush() {
	if len(s.pending) == 0 {
		return
	}
	s.mine.SetAll(s.pending)
	s.mine.Compact()
	if cap(s.pending) > 256 {
		s.pending = nil
	} else {
		s.pending = s.pending[:0]
	}
}

// arcsOf calls fn with the index of every arc that s holds (Granted or
// Recalling, not orphans), in ring order of its runs. fn may change arc
// values (through set) but not the table's boundaries.
func (n *namespace) arcsOf(s *session, fn func(i int)) {
	s.flush()
	var runs []ring.Range
	s.mine.Each(func(r ring.Range, v mineArc) {
		if v.st != Free {
			if k := len(runs) - 1; k >= 0 && runs[k].End == r.Start {
				runs[k].End = r.End // one run, though the arcs differ
			} else {
				runs = append(runs, r)
			}
		}
	})
	for _, r := range runs {
		n.indicesIn(r, fn)
	}
}

// MaxRangesPerRing bounds the ranges one LeaseRequest may list (held,
// refused or migrated), as a multiple of the namespace's ring size.
const MaxRangesPerRing = 4

// request handles one LeaseRequest (Centrifuge §2.3).
func (n *namespace) request(req lease.LeaseRequest, now time.Time) (Output, error) {
	st := &n.m.stats
	st.Requests++
	// An owner's ranges are disjoint and end at entries of the present or
	// an earlier ring, so an honest list stays within a small multiple of
	// RingSize (the simulator saw 1.4·R while arcs were split between
	// rings); a longer one is not an honest owner's, and would cost the
	// leader in proportion to it.
	if limit := MaxRangesPerRing * n.cfg.RingSize; !n.m.cfg.UnsafeNoBounds && (len(req.Held) > limit || len(req.Refused) > limit || len(req.Migrated) > limit) {
		st.RefusedOversize++
		return Output{}, fmt.Errorf("%w: %d held, %d refused and %d migrated ranges; namespace %q allows at most %d (%d × ring size)",
			ErrBadRequest, len(req.Held), len(req.Refused), len(req.Migrated), n.cfg.Name, limit, MaxRangesPerRing)
	}
	filter := !n.m.cfg.DisableRaceFilter
	s := n.sessions[req.Owner]
	opening := false
	if s == nil || s.nonce != req.Nonce {
		if slices.Contains(n.retired[req.Owner], req.Nonce) {
			// A late message from an ended incarnation, or one that a
			// newer incarnation replaced while it was cut off.
			st.DroppedOld++
			return Output{}, ErrIncarnationReplaced
		}
		if other := n.addrHolder(req.Addr, req.Owner); other != "" {
			st.RefusedAddr++
			return Output{}, fmt.Errorf("%w: %s is %q's until it leaves or expires (up to %v after its last renewal)",
				ErrAddressInUse, req.Addr, other, n.hold)
		}
		if s == nil && len(n.sessions) >= n.cfg.RingSize {
			st.RefusedFull++
			return Output{}, fmt.Errorf("%w: %q has %d owners, as many as its ring size; %q is refused until one leaves or expires",
				ErrNamespaceFull, n.cfg.Name, len(n.sessions), req.Owner)
		}
		old := s
		s = newSession(req.Owner, req.Addr, req.Nonce)
		if old != nil {
			n.retire(old.name, old.nonce)
			// The new incarnation is not draining: a restart after a clean
			// leave (or a drain) puts the name back in the ring.
			n.membersChanged = n.membersChanged || old.draining
			n.replace(old, s)
		} else {
			n.membersChanged = true
		}
		n.ownerChanged(req.Owner)
		n.putSession(s)
		if n.addrs[req.Owner] != req.Addr {
			n.addrs[req.Owner] = req.Addr
		}
		opening = true
		st.Opened++
	} else if filter && req.Seq <= s.peerSeq {
		st.DroppedStale++
		return n.step(now), nil
	}
	s.peerSeq = req.Seq
	if s.lastRecv.IsZero() {
		n.deadlines.push(deadline{at: now.Add(n.hold).UnixNano(), kind: sessionExpiry, s: s})
	}
	s.lastRecv = now
	if req.PeerNonce != n.m.cfg.Nonce {
		// It has not heard from this manager incarnation: it cannot have
		// acted on anything we sent, so nothing it omits is released.
		opening = true
	}
	if !opening && filter && req.AckSeq != s.mySeq {
		if !req.Leaving {
			st.DroppedRacing++
			if s.resendAt.IsZero() {
				s.resendAt = now.Add(n.m.backoff())
				n.deadlines.push(deadline{at: s.resendAt.UnixNano(), kind: resend, s: s})
			}
			return n.step(now), nil
		}
		// A racing leaving request is taken as a leave and nothing else.
		// The filter keeps the manager from reading a Held list written
		// without a message the owner had not seen (a grant it would go
		// on to believe); a leaving owner believes nothing from the
		// moment it sent this, whatever reaches it later (ownerguard's
		// Core.Leave), so its empty Held stays true, and its arcs go to
		// the others now rather than T·65/60 after its last accepted
		// request, as after a crash. What it says beyond leaving answers
		// messages it may not have seen: its Migrated ranges are taken
		// as plain releases (with loss, never as clean handovers), its
		// refusals and load are ignored.
		st.AcceptedRacingLeaves++
		req.Migrated, req.Refused, req.Load = nil, nil, nil
	}
	st.Accepted++
	s.awaiting = false // it answered the latest message, or opens
	st.Refused += uint64(len(req.Refused))
	n.migrationRequest(s, req)
	if req.Load != nil {
		n.noteLoad(s, req.Load, now)
	}
	if req.Leaving {
		n.leave(s)
	}
	if !opening {
		n.applyHeld(s, req)
	}
	n.dirty[s.name] = true
	return n.step(now), nil
}

// addrHolder names the live, non-draining owner other than name whose
// session has addr, or "". Envoy and grpc-go keep one endpoint per address,
// so the desired ring (which lists the non-draining owners) must never give
// one address to two owners.
func (n *namespace) addrHolder(addr, name string) string {
	for _, other := range n.byAddr[addr] {
		if s := n.sessions[other]; other != name && !s.draining {
			return other
		}
	}
	return ""
}

// putSession installs s as its name's session, replacing any other, and
// keeps byAddr, the index addrHolder reads instead of every session (a scan
// per new session made a join storm of 5,000 owners quadratic).
func (n *namespace) putSession(s *session) {
	if old := n.sessions[s.name]; old != nil {
		n.dropSession(old)
	}
	n.sessions[s.name] = s
	n.byAddr[s.addr] = append(n.byAddr[s.addr], s.name)
}

// dropSession removes s, its name's session, and its address's index entry.
func (n *namespace) dropSession(s *session) {
	delete(n.sessions, s.name)
	names := slices.DeleteFunc(n.byAddr[s.addr], func(name string) bool { return name == s.name })
	if len(names) == 0 {
		delete(n.byAddr, s.addr)
	} else {
		n.byAddr[s.addr] = names
	}
}

// replace makes s, a new session, the incarnation of old's name. A name is
// not an identity: the earlier incarnation may still run, cut off from the
// manager (a restarted pod whose old process is only partitioned) and
// believe what it held until its own lease ends, T after the last request
// it sent. So its arcs become orphans: no session may renew or release
// them, and they are granted again, to anyone, s included, only once they
// expire, T·65/60 after the manager last heard from that incarnation
// (session.until for its Granted arcs; a Recalling arc keeps its own).
// Until then s waits and is granted nothing, so that every arc held under a
// name belongs to one incarnation, which is what a new leader needs to know
// to restore the table (OwnerRecord.Waiting). With UnsafeReplace (negative
// control) the old behaviour: the arcs pass to s as renewals, which it
// refuses, and they are regranted at once. The caller installs s in
// n.sessions afterwards.
func (n *namespace) replace(old, s *session) {
	if old.waiting {
		n.waiting--
	}
	var orphaned []ring.Range
	n.arcsOf(old, func(i int) {
		a := n.table.Value(i)
		r, _ := n.table.At(i)
		if n.m.cfg.UnsafeReplace {
			// Hand it to the new session (installed next) as a renewal
			// only; move the index entry by hand.
			a.confirmed = true
			n.table.SetValue(i, a)
			n.touched = append(n.touched, r) // its address may change
			n.uncompacted = append(n.uncompacted, r)
			s.note(ring.Assignment[mineArc]{Range: r, Value: mineOf(a)})
			s.version++
			return
		}
		if a.st == Granted {
			a.expiry = old.until
		}
		a.st, a.confirmed, a.orphan, a.orphanAddr = Recalling, true, true, n.addrs[a.holder]
		n.set(i, a)
		orphaned = append(orphaned, r)
		n.deadlines.push(deadline{at: a.expiry, kind: arcExpiry, r: r})
	})
	if n.m.cfg.UnsafeReplace {
		s.until = old.until
		n.deadlines.push(deadline{at: s.until, kind: grantedExpiry, s: s})
	}
	// Arcs old orphaned itself, when it was waiting, stay orphans, and s
	// waits for them too.
	orphaned = append(orphaned, old.orphanRanges...)
	if len(orphaned) > 0 {
		s.waiting, s.orphanRanges = true, orphaned
		n.waiting++
	}
}

// endWaits lets waiting sessions be granted once no orphan they wait for
// is left. It runs after expiry in each step that freed arcs.
func (n *namespace) endWaits() {
	if n.waiting == 0 || !n.changed {
		return
	}
	for _, s := range n.sessions {
		if !s.waiting || n.anyOrphan(s.orphanRanges) {
			continue
		}
		s.waiting, s.orphanRanges = false, nil
		n.waiting--
		n.changed = true
		n.ownerChanged(s.name)
		// Its arcs of the desired ring may be granted now.
		n.touchOwner(s.name)
	}
}

// anyOrphan reports whether an orphan is left in rs.
func (n *namespace) anyOrphan(rs []ring.Range) bool {
	for _, r := range rs {
		found := false
		n.eachIn(r, func(a arc) { found = found || a.orphan })
		if found {
			return true
		}
	}
	return false
}

// leave takes s out of the desired ring on a clean leave
// (lease.LeaseRequest.Leaving): the owner has stopped serving every range
// and holds nothing. Its request's Held is empty, so applyHeld then releases
// all its arcs, and this same step's reconcile grants them to the others,
// committed before anyone is told: lookups see each arc change hands once,
// under the generation it was freed with. The session stays, draining,
// until it expires like any other. An opening request (one that has not
// heard from this manager incarnation) releases nothing, leaving or not:
// its arcs expire as after a crash.
func (n *namespace) leave(s *session) {
	s.draining = true
	n.membersChanged = true
	n.ownerChanged(s.name)
	n.m.stats.Leaves++
}

// applyHeld releases every arc of s that s no longer lists, and marks the
// listed ones as confirmed. A request that lists exactly what the last one
// applied did, with no change to s's arcs since, changes nothing, and is
// recognised in O(held ranges) without looking at the table.
func (n *namespace) applyHeld(s *session, req lease.LeaseRequest) {
	if len(req.Migrated) == 0 && s.heldVersion == s.version && s.lastHeld != nil && sameLeases(req.Held, s.lastHeld) {
		return
	}
	if n.confirmsMessage(s, req) || n.releasesMessage(s, req) {
		return
	}
	arcs := n.table.Len()
	defer func() { n.split = n.split || n.table.Len() != arcs }()
	// Cut the table at the held and migrated ranges' ends, so that each of
	// s's arcs lies inside one held range or outside all of them.
	xs := make([]uint64, 0, 2*(len(req.Held)+len(req.Migrated)))
	for _, l := range req.Held {
		xs = append(xs, l.Range.Start, l.Range.End)
	}
	for _, r := range req.Migrated {
		xs = append(xs, r.Start, r.End)
	}
	n.table.SplitAll(xs)
	if n.table.Len() != arcs {
		n.splitAt = append(n.splitAt, xs...)
	}
	held := byEnd(req.Held)
	var mig []ring.Range
	if len(req.Migrated) > 0 {
		mig = slices.Clone(req.Migrated)
	}
	n.arcsOf(s, func(i int) {
		a := n.table.Value(i)
		r, _ := n.table.At(i)
		if g, ok := genAt(held, r.End); ok && g == a.gen {
			if !a.confirmed {
				a.confirmed = true
				n.set(i, a)
			}
			return
		}
		if n.keepImport(s, a) {
			return
		}
		if s.unsent(a) && !req.Leaving {
			// Granted after the message this request answers was
			// written: the owner has not heard of it, so leaving it
			// out releases nothing.
			return
		}
		n.set(i, n.released(a, inAny(mig, r.End)))
		n.m.stats.Releases++
		n.changed = true
	})
	s.lastHeld, s.heldVersion = req.Held, s.version
}

// confirmsMessage applies, in O(held ranges + granted arcs), the common
// answer to a grant: a request that lists exactly the leases of the latest
// message to s (its renewals and its grants), nothing of s having changed
// since that message was written, and s holding no arc but those (none
// recalled). The general walk would find every arc listed under its own
// generation and confirm it; here only the grants' arcs are visited, and
// the message cache is brought forward instead of rebuilt: what were
// grants are renewals now, and no migration order is left (an import is
// confirmed when listed). At R = 65536, where an owner of 500 holds about
// 131 arcs, the walk and the rebuild took a binary search per arc each,
// and the hundreds of confirmations after a join or a leave queued behind
// them on the leader's loop. It reports false, having changed nothing,
// where any of that does not hold.
func (n *namespace) confirmsMessage(s *session, req lease.LeaseRequest) bool {
	if len(req.Migrated) > 0 || req.Leaving || s.msgVersion != s.version+1 || len(s.recalls) > 0 ||
		len(s.grant) == 0 || len(req.Held) > len(s.renew)+len(s.grant) {
		return false
	}
	union := make([]lease.Lease, 0, len(s.renew)+len(s.grant))
	union = canonLeases(append(append(union, s.renew...), s.grant...))
	if !sameLeases(req.Held, union) {
		return false
	}
	idx, ok := n.arcsIn(len(s.grant), func(k int) ring.Range { return s.grant[k].Range }, func(k int, a arc) bool {
		return a.holder == s.name && a.st == Granted && !a.confirmed && a.gen == s.grant[k].Gen
	})
	if !ok {
		return false
	}
	for _, i := range idx {
		a := n.table.Value(i)
		a.confirmed = true
		n.set(i, a)
	}
	s.lastHeld, s.heldVersion = req.Held, s.version
	s.renew, s.grant, s.out, s.in = union, nil, nil, nil
	s.msgVersion = s.version + 1
	n.m.stats.FastConfirms++
	return true
}

// releasesMessage applies, in O(held ranges + recalled arcs), the common
// answer to a recall: a request that lists exactly the renewals of the
// latest message to s, a message that granted nothing, nothing of s having
// changed since it was written, so that what the request leaves out is
// exactly what that message recalled (s's Recalling arcs, in s.recalls).
// The general walk would find every listed arc confirmed already and
// release each recalled one as a plain release (the request migrated
// nothing); here only the recalled arcs are visited, and the message cache
// is brought forward: what s holds now is its renewals. At R = 65536 each
// of the about 131 owners answering a join's or a drain's recall holds
// about 131 arcs, and the walk (a binary search per arc, and one per
// listed end to cut the table) was most of the leader's 120 µs per answer
// (BenchmarkRequest/recalled). A message with grants as well takes the
// walk: none of a join's answers at R = 65536 was one. It reports false,
// having changed nothing, where any of that does not hold.
func (n *namespace) releasesMessage(s *session, req lease.LeaseRequest) bool {
	if len(req.Migrated) > 0 || req.Leaving || s.msgVersion != s.version+1 || len(s.recalls) == 0 ||
		len(s.grant) > 0 || !sameLeases(req.Held, s.renew) {
		return false // (with no grants there is no import: s.in is empty)
	}
	release, ok := n.arcsIn(len(s.recalls), func(k int) ring.Range { return s.recalls[k] }, func(_ int, a arc) bool {
		return a.holder == s.name && a.st == Recalling
	})
	if !ok {
		return false
	}
	for _, i := range release {
		n.set(i, n.released(n.table.Value(i), false))
		n.m.stats.Releases++
	}
	n.changed = true
	s.lastHeld, s.heldVersion = req.Held, s.version
	s.out, s.recalls = nil, nil
	s.msgVersion = s.version + 1
	n.m.stats.FastReleases++
	return true
}

// arcsIn returns the indexes of the arcs in ranges rangeAt(0..k-1) and
// reports whether every one lies inside its range, is not an orphan and
// passes want(k, arc): the check before a fast path (confirmsMessage,
// releasesMessage) changes anything.
func (n *namespace) arcsIn(k int, rangeAt func(int) ring.Range, want func(k int, a arc) bool) ([]int, bool) {
	var idx []int
	for j := range k {
		rr, ok := rangeAt(j), true
		n.indicesIn(rr, func(i int) {
			r, a := n.table.At(i)
			ok = ok && !a.orphan && within(r, rr) && want(j, a)
			idx = append(idx, i)
		})
		if !ok {
			return nil, false
		}
	}
	return idx, true
}

// within reports whether arc r lies inside l (both half-open, (Start, End]).
func within(r, l ring.Range) bool {
	if l.IsFull() {
		return true
	}
	if r.IsFull() {
		return false
	}
	a, b := r.Start-l.Start, r.End-l.Start
	return a < b && b <= l.End-l.Start
}

// byEnd returns ls sorted by the end of their ranges (a copy if needed).
func byEnd(ls []lease.Lease) []lease.Lease {
	less := func(a, b lease.Lease) int {
		switch {
		case a.Range.End < b.Range.End:
			return -1
		case a.Range.End > b.Range.End:
			return 1
		}
		return 0
	}
	if slices.IsSortedFunc(ls, less) {
		return ls
	}
	ls = slices.Clone(ls)
	slices.SortFunc(ls, less)
	return ls
}

// genAt returns the generation of the lease of ls (sorted by end, not
// overlapping) that contains h.
func genAt(ls []lease.Lease, h uint64) (lease.Gen, bool) {
	i, _ := slices.BinarySearchFunc(ls, h, func(l lease.Lease, h uint64) int {
		switch {
		case l.Range.End < h:
			return -1
		case l.Range.End > h:
			return 1
		}
		return 0
	})
	if i == len(ls) {
		i = 0 // a range wrapping past zero ends first
	}
	if i < len(ls) && ls[i].Range.Contains(h) {
		return ls[i].Gen, true
	}
	return 0, false
}

func inAny(rs []ring.Range, h uint64) bool {
	for _, r := range rs {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// sameLeases reports whether a and b list the same leases.
func sameLeases(a, b []lease.Lease) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// grantGen is the generation for granting an arc that has been free since an
// earlier step: lookups have seen it free under its generation, so the grant
// takes a new one. Every change lookups can see thus changes the generation.
func (n *namespace) grantGen() lease.Gen {
	if n.stepGrantGen == 0 {
		n.nextGen++
		n.stepGrantGen = n.nextGen
	}
	return n.stepGrantGen
}

// free returns a free arc under this step's new generation.
func (n *namespace) free(clean bool) arc {
	if n.stepGen == 0 {
		n.nextGen++
		n.stepGen = n.nextGen
	}
	return arc{gen: n.stepGen, st: Free, clean: clean}
}

// emptied returns m with no entries: cleared in place while small, a new
// map once it held many. A cleared map keeps its slots and every later
// range over it scans them all: after a storm marked 5,000 owners dirty,
// each renewal's step scanned 5,000 empty slots to find its one name.
func emptied[V any](m map[string]V) map[string]V {
	if len(m) > emptiedMax {
		return make(map[string]V)
	}
	clear(m)
	return m
}

const emptiedMax = 64

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
