package ownerguard

import (
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Handle records that a key was owned under a generation (PRS §2.2: an
// ownership handle). Store it with any state created for the key, and check
// it with CheckContinuousOwnership before trusting that state.
type Handle struct {
	Key   uint64     // the key's hash
	Range ring.Range // the held arc containing Key when the handle was made (ring.Full() for the whole circle)
	Gen   lease.Gen  // the generation it was held under
}

// View is an immutable snapshot of a Core's held set, safe for concurrent
// use: a shell publishes Core.View through an atomic pointer after every
// Start, Step and Tick, and request handlers check ownership against it
// without a lock. Its checks do not allocate.
type View struct {
	t      *ring.Table[slot]
	expiry int64         // every held arc is held while now < expiry
	held   []lease.Lease // t's held arcs as merged leases, in ring order; read-only
}

// newView returns the View of t, held until exp.
func newView(t *ring.Table[slot], exp int64) *View {
	var ls []lease.Lease
	t.Each(func(r ring.Range, s slot) {
		if s.Held {
			ls = appendLease(ls, lease.Lease{Range: r, Gen: s.Gen})
		}
	})
	return &View{t: t, expiry: exp, held: closeLeases(ls)}
}

// renewed returns v held until exp instead.
func (v *View) renewed(exp int64) *View { return &View{t: v.t, expiry: exp, held: v.held} }

// View returns a snapshot of what is held now. It does not copy; the Core
// replaces its table on every change instead of modifying it.
func (c *Core) View() *View { return c.view }

// GetOwnershipHandle reports whether the key with hash keyHash is held at
// now and, if so, returns a handle on it (PRS §2.2, step 1).
func (v *View) GetOwnershipHandle(keyHash uint64, now time.Time) (Handle, bool) {
	return v.handleAt(keyHash, now.UnixNano())
}

// handleAt is GetOwnershipHandle at now in unix nanoseconds.
func (v *View) handleAt(keyHash uint64, now int64) (Handle, bool) {
	i := v.t.Find(keyHash)
	r, s := v.t.At(i)
	if !s.serving() || v.expiry <= now {
		return Handle{}, false
	}
	return Handle{Key: keyHash, Range: canon(r), Gen: s.Gen}, true
}

// CheckContinuousOwnership reports whether h's key has been held without
// interruption from the moment h was made until now (PRS §2.2, steps 2 and
// 4): it is held at now under h's generation. See the package documentation
// for why equal generations imply continuity.
func (v *View) CheckContinuousOwnership(h Handle, now time.Time) bool {
	return v.continuousAt(h, now.UnixNano())
}

// continuousAt is CheckContinuousOwnership at now in unix nanoseconds.
func (v *View) continuousAt(h Handle, now int64) bool {
	s := v.t.Get(h.Key)
	return s.serving() && v.expiry > now && s.Gen == h.Gen
}

// CheckLeaseNow is Centrifuge's name (§3.2) for GetOwnershipHandle: it
// reports whether keyHash is held at now, and under which generation (the
// "lease number").
func (v *View) CheckLeaseNow(keyHash uint64, now time.Time) (lease.Gen, bool) {
	h, ok := v.GetOwnershipHandle(keyHash, now)
	return h.Gen, ok
}

// CheckLeaseContinuous is Centrifuge's name (§3.2) for
// CheckContinuousOwnership.
func (v *View) CheckLeaseContinuous(keyHash uint64, gen lease.Gen, now time.Time) bool {
	return v.CheckContinuousOwnership(Handle{Key: keyHash, Gen: gen}, now)
}

// GetOwnershipHandle is View.GetOwnershipHandle on the current state.
func (c *Core) GetOwnershipHandle(keyHash uint64, now time.Time) (Handle, bool) {
	return c.view.GetOwnershipHandle(keyHash, now)
}

// CheckContinuousOwnership is View.CheckContinuousOwnership on the current
// state.
func (c *Core) CheckContinuousOwnership(h Handle, now time.Time) bool {
	return c.view.CheckContinuousOwnership(h, now)
}

// CheckLeaseNow is View.CheckLeaseNow on the current state.
func (c *Core) CheckLeaseNow(keyHash uint64, now time.Time) (lease.Gen, bool) {
	return c.view.CheckLeaseNow(keyHash, now)
}

// CheckLeaseContinuous is View.CheckLeaseContinuous on the current state.
func (c *Core) CheckLeaseContinuous(keyHash uint64, gen lease.Gen, now time.Time) bool {
	return c.view.CheckLeaseContinuous(keyHash, gen, now)
}

// canon writes the whole circle as ring.Full(), whatever its Start.
func canon(r ring.Range) ring.Range {
	if r.IsFull() {
		return ring.Full()
	}
	return r
}

// appendRange appends r to rs, merging it into the last range when they
// meet. Ranges must come in ring order, as Table.Each yields them.
func appendRange(rs []ring.Range, r ring.Range) []ring.Range {
	if k := len(rs) - 1; k >= 0 && !rs[k].IsFull() && rs[k].End == r.Start {
		rs[k] = canon(ring.Range{Start: rs[k].Start, End: r.End})
		return rs
	}
	return append(rs, canon(r))
}

// closeRanges merges the last range into the first when they meet across
// the end of Table.Each's order (the first arc of a Table wraps).
func closeRanges(rs []ring.Range) []ring.Range {
	if k := len(rs) - 1; k > 0 && rs[k].End == rs[0].Start {
		rs[0] = canon(ring.Range{Start: rs[k].Start, End: rs[0].End})
		rs = rs[:k]
	}
	return rs
}

// appendLease is appendRange for leases: only equal generations merge.
func appendLease(ls []lease.Lease, l lease.Lease) []lease.Lease {
	if k := len(ls) - 1; k >= 0 && ls[k].Gen == l.Gen && !ls[k].Range.IsFull() && ls[k].Range.End == l.Range.Start {
		ls[k].Range = canon(ring.Range{Start: ls[k].Range.Start, End: l.Range.End})
		return ls
	}
	return append(ls, lease.Lease{Range: canon(l.Range), Gen: l.Gen})
}

// closeLeases is closeRanges for leases.
func closeLeases(ls []lease.Lease) []lease.Lease {
	if k := len(ls) - 1; k > 0 && ls[k].Gen == ls[0].Gen && ls[k].Range.End == ls[0].Range.Start {
		ls[0].Range = canon(ring.Range{Start: ls[k].Range.Start, End: ls[0].Range.End})
		ls = ls[:k]
	}
	return ls
}
