package ownerguard

import (
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Resend does what Tick does and, if Tick did not send, sends a fresh request
// at once. A shell calls it when it opens a new stream, so that the session
// reopens on the new manager without waiting for the periodic request. The
// request is an ordinary next request (a new Seq, everything held), so the
// protocol's rules apply to it unchanged. It does nothing before Start.
func (c *Core) Resend(now time.Time) Output {
	if !c.started {
		return Output{}
	}
	out := c.Tick(now)
	if out.Send == nil {
		out.Send = c.send(now)
	}
	return out
}

// emptyView holds nothing: an Owner publishes it before Start and after
// Close.
func emptyView() *View { return &View{t: ring.NewTable(slot{})} }

// Held returns the leases held at now, as Core.Held does.
func (v *View) Held(now time.Time) []lease.Lease {
	if v.expiry <= now.UnixNano() {
		return nil
	}
	return slices.Clone(v.held)
}

// heldRanges returns every range held in v, expired or not, merged.
func (v *View) heldRanges() []ring.Range {
	var rs []ring.Range
	v.t.Each(func(r ring.Range, s slot) {
		if s.Held {
			rs = appendRange(rs, r)
		}
	})
	return closeRanges(rs)
}
