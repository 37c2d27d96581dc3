package ownerguard

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// slot is the owner's view of one arc. An arc not held is the zero slot, so
// that Compact merges everything not held. Every held arc has the same
// expiry, the Core's: an accepted response renews or grants everything it
// keeps until T after the request it acknowledges was sent, and drops the
// rest, so the arcs held always come from the same response.
type slot struct {
	Gen  lease.Gen
	Held bool
	// Importing: held (listed and renewed) but not served until its state
	// is imported (core_migrate.go): the checks refuse it.
	Importing bool
}

// serving reports whether the slot answers the checks.
func (s slot) serving() bool { return s.Held && !s.Importing }

// refusal marks a point whose renewal was refused, under the renewed gen.
type refusal struct {
	On  bool
	Gen lease.Gen
}

// Output is the work a Core hands back from one call.
type Output struct {
	// Send is a request to send now, or nil.
	Send *lease.LeaseRequest
	// Granted lists ranges newly held, or held under a new generation
	// (the ownership upcall's grant half), merged and in ring order (by
	// End, as Core.Held).
	Granted []ring.Range
	// Revoked lists ranges no longer held under the generation they were
	// held under: recalled, expired, or superseded by a new grant. A range
	// recalled to be exported (Offers) is not in it: the shell reports it
	// revoked once the export is over, so the application keeps its state
	// until then (it no longer serves it either way).
	Revoked []ring.Range
	// Imports lists ranges granted as imports, for the shell to fetch
	// (core_migrate.go); Offers lists ranges recalled as migrations, for
	// the shell to export to the named new owner until Deadline.
	Imports []Import
	Offers  []Offer
}

// CoreStats counts a Core's messages.
type CoreStats struct {
	Sent                    uint64 // requests sent
	Accepted                uint64 // responses accepted
	DroppedStale            uint64 // responses not newer than the last heard
	DroppedRacing           uint64 // responses not acknowledging the latest request
	DroppedOtherIncarnation uint64 // responses addressed to another incarnation
	Refused                 uint64 // leases refused (each merged lease counts once)
	// Renewed counts accepted responses that renewed exactly what was held
	// and granted nothing: the common case, which costs O(held ranges) and
	// allocates nothing but the new View.
	Renewed uint64
}

// Core is the owner side of the lease protocol as a pure state machine (see
// the package documentation). It does no I/O and reads no clock: every call
// takes the current time. A Core is not safe for concurrent use; View returns
// a snapshot that is.
type Core struct {
	cfg CoreConfig
	rnd *rand.Rand

	// held is never modified once installed: every change builds a new
	// table, so that View can share it. expiry is when every held arc
	// expires (unix nanoseconds; held while now < expiry).
	held   *ring.Table[slot]
	expiry int64
	view   *View

	started   bool
	mySeq     uint64 // last sequence number sent
	sentAt    int64  // when request mySeq was sent
	peerNonce uint64 // last manager nonce heard
	peerSeq   uint64 // last manager sequence number heard
	renewAt   int64  // when the next periodic request is due

	resendPending bool  // a race re-send is scheduled
	resendAt      int64 // when it is due
	// races counts the race re-sends scheduled since a response was last
	// accepted: each doubles the backoff window (backoff).
	races int

	refused []lease.Lease // refused since the last request
	mig     migState      // core_migrate.go
	stats   CoreStats
}

// NewCore returns a Core holding nothing. Call Start to send the first
// request.
func NewCore(cfg CoreConfig) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rnd := cfg.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(cfg.Incarnation, cfg.Incarnation^0x9e3779b97f4a7c15))
	}
	c := &Core{cfg: cfg, rnd: rnd}
	c.install(ring.NewTable(slot{}), 0)
	return c, nil
}

// Config returns the config in use, with defaults filled in.
func (c *Core) Config() CoreConfig { return c.cfg }

// Stats returns the message counters.
func (c *Core) Stats() CoreStats { return c.stats }

// install makes t, held until exp, the held set and publishes its View.
func (c *Core) install(t *ring.Table[slot], exp int64) {
	c.held, c.expiry = t, exp
	c.view = newView(t, exp)
}

// heldAt is the merged list of leases held at n: the View's, shared and
// read-only, or nil once they expired.
func (c *Core) heldAt(n int64) []lease.Lease {
	if c.expiry <= n {
		return nil
	}
	return c.view.held
}

// Start opens the session: it returns the first request (Seq 1, nothing
// held). Call it once; Step and Tick do nothing before it.
func (c *Core) Start(now time.Time) Output {
	c.started = true
	return Output{Send: c.send(now)}
}

// send builds the next request and resets the timers.
func (c *Core) send(now time.Time) *lease.LeaseRequest {
	n := now.UnixNano()
	c.mySeq++
	req := &lease.LeaseRequest{
		Namespace: c.cfg.Namespace,
		Owner:     c.cfg.Name,
		Addr:      c.cfg.Addr,
		Header: lease.Header{
			Nonce:     c.cfg.Incarnation,
			Seq:       c.mySeq,
			PeerNonce: c.peerNonce,
			AckSeq:    c.peerSeq,
		},
		Held:    c.heldAt(n), // shared with the View: read-only
		Refused: c.refused,
	}
	c.refused = nil
	c.mig.fill(c, req)
	c.sentAt = n
	c.renewAt = n + int64(c.cfg.RenewInterval)
	c.resendPending = false
	c.stats.Sent++
	return req
}

// Step handles a response from the manager.
func (c *Core) Step(resp lease.LeaseResponse, now time.Time) Output {
	if !c.started || resp.Namespace != c.cfg.Namespace || resp.Owner != c.cfg.Name {
		return Output{}
	}
	if resp.PeerNonce != c.cfg.Incarnation {
		c.stats.DroppedOtherIncarnation++
		return Output{}
	}
	filter := !c.cfg.DisableRaceFilter
	last := c.peerSeq
	if resp.Nonce != c.peerNonce {
		last = 0 // a new manager incarnation or leader: its numbering is new
	}
	if filter && resp.Seq <= last {
		c.stats.DroppedStale++
		return Output{}
	}
	c.peerNonce, c.peerSeq = resp.Nonce, resp.Seq
	if filter && resp.AckSeq != c.mySeq {
		// Sent before the manager saw our latest request. Recording its
		// sequence number above makes our re-send acknowledge it.
		c.stats.DroppedRacing++
		if !c.resendPending {
			c.resendPending = true
			c.resendAt = now.UnixNano() + int64(c.backoff())
			c.races++
		}
		return Output{}
	}
	return c.accept(resp, now)
}

// backoff draws a delay uniformly from [RaceBackoffMin, hi], where hi is
// RaceBackoffMax doubled for every race re-send since a response was last
// accepted, up to half the renew interval (never below RaceBackoffMax).
// The manager re-sends after a racing request as this Core does after a
// racing response; when both sides' messages take longer than the window
// (a manager answering 14,000-lease requests under load), fixed windows
// keep the two crossing, every response dropped, until the leases lapse.
// Widening the owner's window lets the manager's re-send arrive while the
// owner waits, as binary exponential backoff resolves any such contention.
func (c *Core) backoff() time.Duration {
	lo, hi := c.cfg.RaceBackoffMin, c.cfg.RaceBackoffMax
	if ceil := max(hi, c.cfg.RenewInterval/2); c.races > 0 {
		hi = min(hi<<min(c.races, 16), ceil)
	}
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(c.rnd.Int64N(int64(hi-lo)+1))
}

// accept applies a response that acknowledges the latest request.
func (c *Core) accept(resp lease.LeaseResponse, now time.Time) Output {
	n := now.UnixNano()
	c.stats.Accepted++
	c.resendPending, c.races = false, 0
	exp := c.sentAt + int64(c.cfg.LeaseDuration)
	live := exp > n

	// The common case: a renewal of exactly what is held, nothing granted.
	// Only the expiry moves; the table and its lease list are shared.
	held := c.heldAt(n)
	if live && len(resp.Grant) == 0 && len(held) > 0 && sameLeases(resp.Renew, held) && len(resp.MigrateOut) == 0 {
		c.stats.Renewed++
		c.mig.migrated = nil // nothing is recalled any more
		c.expiry = exp
		c.view = c.view.renewed(exp)
		return Output{}
	}

	// cur is what is held now, after expiry.
	cur := c.held
	if c.expiry <= n {
		cur = ring.NewTable(slot{})
	} else {
		cur = cur.Clone() // applyResponse refines it
	}
	next, refused := applyResponse(cur, resp, live)
	var out Output
	out.Imports = c.markImports(next, resp, n)
	out.Offers = c.offerExports(next, resp, n)

	var nref []lease.Lease
	refused.Each(func(r ring.Range, v refusal) {
		if v.On {
			nref = appendLease(nref, lease.Lease{Range: r, Gen: v.Gen})
		}
	})
	nref = closeLeases(nref)
	c.refused = append(c.refused, nref...)
	c.stats.Refused += uint64(len(nref))

	out.Granted, out.Revoked = diff(c.held, next)
	out.Revoked = withoutOffers(out.Revoked, out.Offers)
	before := c.view.held
	c.install(next, exp)
	if len(out.Granted) > 0 || len(out.Revoked) > 0 || len(nref) > 0 || len(out.Offers) > 0 ||
		!sameLeases(before, c.view.held) {
		out.Send = c.send(now)
	}
	return out
}

// applyResponse returns the held set after a response, given cur, what is
// held now (after expiry): renewals of what cur holds under the same
// generation, and grants, when live (they are held until the Core's new
// expiry). It
// also returns the refusals: renewals of what cur does not hold, and every
// lease of a response that was not live. Both tables are compacted. It
// refines cur.
func applyResponse(cur *ring.Table[slot], resp lease.LeaseResponse, live bool) (next *ring.Table[slot], refused *ring.Table[refusal]) {
	// The Sets on next and refused are collected in order and applied with
	// SetAll: the manager lists leases clockwise without overlaps, so each
	// list is a merge pass or two rather than a table insertion per lease.
	var nextSets []ring.Assignment[slot]
	var refusedSets []ring.Assignment[refusal]
	renewed := make([]ring.Range, len(resp.Renew))
	for i, l := range resp.Renew {
		renewed[i] = l.Range
	}
	cur.UpdateAll(renewed, func(i int, r ring.Range, v slot) slot {
		l := resp.Renew[i]
		if live && v.Held && v.Gen == l.Gen {
			nextSets = append(nextSets, ring.Assignment[slot]{Range: r, Value: slot{Gen: l.Gen, Held: true, Importing: v.Importing}})
		} else {
			refusedSets = append(refusedSets, ring.Assignment[refusal]{Range: r, Value: refusal{On: true, Gen: l.Gen}})
		}
		return v
	})
	for _, l := range resp.Grant {
		if live {
			nextSets = append(nextSets, ring.Assignment[slot]{Range: l.Range, Value: slot{Gen: l.Gen, Held: true}})
			refusedSets = append(refusedSets, ring.Assignment[refusal]{Range: l.Range})
		} else {
			// Too late to take: by the time it arrived, the lease it
			// would start had run out. Not taking it is refusing it.
			refusedSets = append(refusedSets, ring.Assignment[refusal]{Range: l.Range, Value: refusal{On: true, Gen: l.Gen}})
		}
	}
	next = ring.NewTable(slot{})
	next.SetAll(nextSets)
	next.Compact()
	refused = ring.NewTable(refusal{})
	refused.SetAll(refusedSets)
	refused.Compact()
	return next, refused
}

// Tick expires leases and sends the periodic request or a due race re-send.
func (c *Core) Tick(now time.Time) Output {
	if !c.started {
		return Output{}
	}
	n := now.UnixNano()
	var out Output
	if c.expiry <= n {
		if out.Revoked = c.view.heldRanges(); len(out.Revoked) > 0 {
			c.install(ring.NewTable(slot{}), 0)
		}
	}
	if c.mig.failDue(c, n) {
		out.Send = c.send(now)
	}
	if (c.resendPending && n >= c.resendAt) || n >= c.renewAt {
		out.Send = c.send(now)
	}
	return out
}

// NextDeadline is the earliest time at which Tick has work: the periodic
// request, a race re-send, or a lease expiry. It may be in the past. It is
// the zero time before Start. Compare it with Before or Equal: its location
// is not that of the times passed in.
func (c *Core) NextDeadline() time.Time {
	if !c.started {
		return time.Time{}
	}
	d := c.renewAt
	if c.resendPending && c.resendAt < d {
		d = c.resendAt
	}
	if len(c.view.held) > 0 && c.expiry < d {
		d = c.expiry
	}
	if at, ok := c.mig.next(); ok && at < d {
		d = at
	}
	return time.Unix(0, d)
}

// Held returns the leases held at now (not expired), with adjacent ranges of
// one generation merged, in ring order: by End, so a range that wraps past
// zero comes first.
func (c *Core) Held(now time.Time) []lease.Lease { return slices.Clone(c.heldAt(now.UnixNano())) }

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

// diff returns the ranges held in b and not in a under the same generation
// (granted), and the ranges held in a and not in b under the same generation
// (revoked). Expiry times do not matter. It walks the two tables together,
// in time linear in their sizes.
func diff(a, b *ring.Table[slot]) (granted, revoked []ring.Range) {
	ring.Walk(a, b, func(r ring.Range, va, vb slot) {
		sa, sb := va.serving(), vb.serving()
		if !sa && !sb || sa && sb && va.Gen == vb.Gen {
			return
		}
		if sa {
			revoked = appendRange(revoked, r)
		}
		if sb {
			granted = appendRange(granted, r)
		}
	})
	return closeRanges(granted), closeRanges(revoked)
}
