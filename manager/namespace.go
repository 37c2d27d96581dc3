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
	confirmed bool  // the holder listed it since the grant: send as renewal, never re-grant
	clean     bool  // freed by a clean migration: its new generation is not a loss
	expiry    int64 // manager-side hold end, unix nanoseconds; 0 when free
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
	// waiting marks a new incarnation that replaced a live one: it is
	// granted nothing while any arc of its name is an orphan (a name is
	// not an identity; see replace).
	waiting bool
}

// namespace is one pool: its owners, lease table and change log.
type namespace struct {
	m              *Manager
	cfg            NamespaceConfig
	hold           time.Duration
	sessions       map[string]*session
	retired        map[string][]uint64 // per owner name, nonces of ended incarnations
	addrs          map[string]string   // last known address per owner name
	desired        *ring.Ring
	membersChanged bool // the desired ring must be recomputed
	changed        bool // an arc was freed or changed hands: reconcile and publish
	split          bool // arcs were split to match an owner's ranges: compact
	ownersDirty    bool // the owner records changed: commit them
	table          *ring.Table[arc]
	view           *ring.Table[viewVal]
	nextGen        lease.Gen
	stepGen        lease.Gen // the generation given to arcs freed in the current step
	stepGrantGen   lease.Gen // the generation given to arcs granted in the current step that were free before it
	seq            uint64    // last sequence number sent to any session: monotonic per peer even when a session is re-created
	log            changeLog
	dirty          map[string]bool // sessions to write to at the end of the step
}

const maxRetired = 16

func newNamespace(m *Manager, nc NamespaceConfig, now time.Time) *namespace {
	n := &namespace{
		m:        m,
		cfg:      nc,
		hold:     HoldDuration(nc.LeaseDuration),
		sessions: map[string]*session{},
		retired:  map[string][]uint64{},
		addrs:    map[string]string{},
		nextGen:  1,
		dirty:    map[string]bool{},
	}
	n.desired, _ = ring.New(nil)
	n.table = ring.NewTable(arc{gen: 1})
	n.view = ring.NewTable(viewVal{Gen: 1})
	n.log.init(now)
	return n
}

func (n *namespace) retire(name string, nonce uint64) {
	r := append(n.retired[name], nonce)
	if len(r) > maxRetired {
		r = r[len(r)-maxRetired:]
	}
	n.retired[name] = r
}

// request handles one LeaseRequest (Centrifuge §2.3).
func (n *namespace) request(req lease.LeaseRequest, now time.Time) (Output, error) {
	st := &n.m.stats
	st.Requests++
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
		if s != nil {
			n.retire(s.name, s.nonce)
			// The new incarnation is not draining: a restart after a clean
			// leave (or a drain) puts the name back in the ring.
			n.membersChanged = n.membersChanged || s.draining
		} else {
			n.membersChanged = true
		}
		n.ownersDirty = true
		s = &session{name: req.Owner, addr: req.Addr, nonce: req.Nonce}
		n.sessions[req.Owner] = s
		n.replace(s)
		if n.addrs[req.Owner] != req.Addr {
			n.addrs[req.Owner] = req.Addr
		}
		opening = true
		st.Opened++
	} else if filter && req.Seq <= s.peerSeq {
		st.DroppedStale++
		return n.step(now, nil), nil
	}
	s.peerSeq = req.Seq
	s.lastRecv = now
	if req.PeerNonce != n.m.cfg.Nonce {
		// It has not heard from this manager incarnation: it cannot have
		// acted on anything we sent, so nothing it omits is released.
		opening = true
	}
	if !opening && filter && req.AckSeq != s.mySeq {
		// A racing leaving request is dropped like any other: the owner
		// has stopped believing all the same, but the manager does not
		// act on it, and the owner's arcs expire T·65/60 after its last
		// accepted request, as after a crash.
		st.DroppedRacing++
		if s.resendAt.IsZero() {
			s.resendAt = now.Add(n.m.backoff())
		}
		return n.step(now, nil), nil
	}
	st.Accepted++
	st.Refused += uint64(len(req.Refused))
	if req.Leaving {
		n.leave(s)
	}
	if !opening {
		n.applyHeld(s, req)
	}
	n.dirty[s.name] = true
	return n.step(now, nil), nil
}

// addrHolder names the live, non-draining owner other than name whose
// session has addr, or "". Envoy and grpc-go keep one endpoint per address,
// so the desired ring (which lists the non-draining owners) must never give
// one address to two owners.
func (n *namespace) addrHolder(addr, name string) string {
	for _, s := range n.sessions {
		if s.name != name && !s.draining && s.addr == addr {
			return s.name
		}
	}
	return ""
}

// replace makes s, a new session, the incarnation of its name. A name is
// not an identity: an earlier incarnation may still run, cut off from the
// manager (a restarted pod whose old process is only partitioned) and
// believe what it held until its own lease ends, T after the last request
// it sent. So its arcs become orphans: no session may renew or release
// them, and they are granted again, to anyone, s included, only once they
// expire, T·65/60 after the manager last heard from that incarnation. Until
// then s waits and is granted nothing, so that every arc held under a name
// belongs to one incarnation, which is what a new leader needs to know to
// restore the table (OwnerRecord.Waiting). With UnsafeReplace (negative
// control) the old behaviour: the arcs pass to s as renewals, which it
// refuses, and they are regranted at once.
func (n *namespace) replace(s *session) {
	for i := 0; i < n.table.Len(); i++ {
		a := n.table.Value(i)
		if a.holder != s.name || a.st == Free {
			continue
		}
		if n.m.cfg.UnsafeReplace {
			a.confirmed = true
		} else if !a.orphan {
			a.st, a.confirmed, a.orphan, a.orphanAddr = Recalling, true, true, n.addrs[a.holder]
		}
		s.waiting = s.waiting || a.orphan
		n.table.SetValue(i, a)
	}
}

// endWaits lets waiting sessions be granted once no orphan of their name
// is left. It runs after expiry in each step.
func (n *namespace) endWaits() {
	var waiting []*session
	for _, s := range n.sessions {
		if s.waiting {
			waiting = append(waiting, s)
		}
	}
	if len(waiting) == 0 {
		return
	}
	orphans := map[string]bool{}
	for i := 0; i < n.table.Len(); i++ {
		if a := n.table.Value(i); a.orphan {
			orphans[a.holder] = true
		}
	}
	for _, s := range waiting {
		if !orphans[s.name] {
			s.waiting = false
			n.ownersDirty, n.changed = true, true
		}
	}
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
	n.membersChanged, n.ownersDirty = true, true
	n.m.stats.Leaves++
}

// applyHeld releases every arc of s that s no longer lists, and marks the
// listed ones as confirmed.
func (n *namespace) applyHeld(s *session, req lease.LeaseRequest) {
	arcs := n.table.Len()
	defer func() { n.split = n.split || n.table.Len() != arcs }()
	held := ring.NewTable(lease.Gen(0)) // 0: not held (generations start at 1)
	for _, l := range req.Held {
		held.Set(l.Range, l.Gen)
		n.table.Refine(l.Range)
	}
	mig := ring.NewTable(false)
	for _, r := range req.Migrated {
		mig.Set(r, true)
		n.table.Refine(r)
	}
	// Every arc now lies inside one arc of held and one of mig.
	for i := 0; i < n.table.Len(); i++ {
		a := n.table.Value(i)
		if a.holder != s.name || a.st == Free || a.orphan {
			continue
		}
		r, _ := n.table.At(i)
		if held.Get(r.End) == a.gen {
			a.confirmed = true
		} else {
			a = n.free(mig.Get(r.End))
			n.m.stats.Releases++
			n.changed = true
		}
		n.table.SetValue(i, a)
	}
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

// step runs expiry, reconciles the lease table with the desired ring, writes
// to the owners that need it and records the lookups' view changes.
func (n *namespace) step(now time.Time, _ []string) Output {
	// Arcs freed by applyHeld before this call share this step's generation.
	defer func() { n.stepGen, n.stepGrantGen, n.changed, n.split = 0, 0, false, false }()
	nowNs := now.UnixNano()
	// Map order is fine here: which sessions expire does not depend on it.
	for name, s := range n.sessions {
		if !now.Before(s.lastRecv.Add(n.hold)) {
			// Not retired: the same incarnation may come back after a
			// partition; by then its own leases have expired.
			delete(n.sessions, name)
			delete(n.dirty, name)
			n.membersChanged, n.ownersDirty = true, true
			n.m.stats.SessionExpiries++
		}
	}
	for i := 0; i < n.table.Len(); i++ {
		if a := n.table.Value(i); a.st != Free && a.expiry <= nowNs {
			n.table.SetValue(i, n.free(false))
			n.m.stats.Expiries++
			n.changed = true
		}
	}
	n.endWaits()
	// A plain renewal changes nothing: the table is reconciled, compacted
	// and diffed only after an arc was freed or the membership changed.
	changed := n.changed || n.membersChanged
	if n.membersChanged {
		n.membersChanged = false
		n.desired = n.desiredRing()
	}
	if changed {
		n.reconcile()
	}
	var out Output
	for name, s := range n.sessions {
		if !s.resendAt.IsZero() && !now.Before(s.resendAt) {
			n.dirty[name] = true
			n.m.stats.RaceResends++
		}
	}
	for _, name := range sortedKeys(n.dirty) {
		if s := n.sessions[name]; s != nil {
			out.Send = append(out.Send, n.message(s))
		}
	}
	clear(n.dirty)
	if changed || n.split {
		n.table.Compact()
	}
	if changed || n.ownersDirty {
		if c := n.publish(now); len(c.Changes) > 0 || c.Owners != nil {
			out.Commits = append(out.Commits, c)
		}
	}
	n.log.truncate(now, n.m.cfg.LogRetention)
	return out
}

// desiredRing apportions R among the live, non-draining owners.
func (n *namespace) desiredRing() *ring.Ring {
	var names []string
	for name, s := range n.sessions {
		if !s.draining {
			names = append(names, name)
		}
	}
	owners, err := ring.Apportion(names, n.cfg.RingSize)
	if err != nil {
		panic("manager: apportion: " + err.Error()) // names are unique and R was validated
	}
	r, err := ring.New(owners)
	if err != nil {
		panic("manager: ring: " + err.Error())
	}
	return r
}

// reconcile moves the lease table toward the desired ring: recall arcs held
// by the wrong owner, cancel recalls that are wanted again, grant free arcs.
func (n *namespace) reconcile() {
	d := n.desired
	if d.Len() > 0 {
		hs := make([]uint64, d.Len())
		for i, e := range d.Entries() {
			hs[i] = e.Hash
		}
		n.table.SplitSorted(hs)
	}
	for i := 0; i < n.table.Len(); i++ {
		a := n.table.Value(i)
		r, _ := n.table.At(i)
		want := d.LookupOwner(r.End)
		if ws := n.sessions[want]; ws != nil && ws.waiting {
			// Nothing moves toward an owner that may not be granted
			// anything yet: its arcs stay where they are until it may.
			want = ""
			if a.st != Free {
				continue
			}
		}
		switch {
		case a.orphan:
			continue // only expiry ends it
		case a.st == Granted && a.holder != want:
			a.st = Recalling
			a.confirmed = true // from now on it may only be renewed
			n.dirty[a.holder] = true
			n.m.stats.Recalls++
		case a.st == Recalling && a.holder == want:
			a.st = Granted
			n.dirty[a.holder] = true
		case a.st == Free && want != "":
			// An arc freed in this step was never seen free: its new
			// generation, which nobody has held, goes to the grant.
			g := a.gen
			if g != n.stepGen {
				g = n.grantGen()
			}
			a = arc{holder: want, gen: g, st: Granted, clean: a.clean}
			n.dirty[want] = true
			n.m.stats.Grants++
		default:
			continue
		}
		n.table.SetValue(i, a)
	}
}

// message writes the complete set of leases of s: renewals and grants. Every
// lease in it is held by the manager until hold after the request it
// acknowledges was received.
func (n *namespace) message(s *session) lease.LeaseResponse {
	until := s.lastRecv.Add(n.hold).UnixNano()
	var renew, grant []lease.Lease
	for i := 0; i < n.table.Len(); i++ {
		a := n.table.Value(i)
		if a.holder != s.name || a.st != Granted {
			continue
		}
		if a.expiry < until {
			a.expiry = until
			n.table.SetValue(i, a)
		}
		r, _ := n.table.At(i)
		if a.confirmed {
			renew = appendLease(renew, lease.Lease{Range: r, Gen: a.gen})
		} else {
			grant = appendLease(grant, lease.Lease{Range: r, Gen: a.gen})
		}
	}
	n.seq++
	s.mySeq = n.seq
	s.resendAt = time.Time{}
	return lease.LeaseResponse{
		Namespace: n.cfg.Name,
		Owner:     s.name,
		Header:    lease.Header{Nonce: n.m.cfg.Nonce, Seq: s.mySeq, PeerNonce: s.nonce, AckSeq: s.peerSeq},
		Renew:     mergeWrap(renew),
		Grant:     mergeWrap(grant),
		// Every response names the routing header, so that an owner's
		// guard follows the namespace's (ownerguard.Owner.RoutingHeader).
		RoutingHeader: n.cfg.Header,
	}
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
	var d time.Time
	min := func(t time.Time) {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	for _, s := range n.sessions {
		min(s.lastRecv.Add(n.hold))
		min(s.resendAt)
	}
	for i := 0; i < n.table.Len(); i++ {
		if a := n.table.Value(i); a.st != Free {
			min(time.Unix(0, a.expiry))
		}
	}
	min(n.log.nextTruncation(n.m.cfg.LogRetention))
	return d
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
