package ownerguard

import (
	"time"

	"github.com/fuge-project/fuge/ring"
)

// Leave ends the incarnation cleanly. It drops everything held, at once and
// whatever the expiry times, and returns the last request to send: Held
// empty, Leaving set, under the next sequence number and acknowledging the
// last response heard, like any request. Output.Revoked lists every range
// that was held.
//
// The order is the safety argument of a clean leave: the shell must publish
// the Core's View (now empty) before it sends the request, so that no check
// succeeds once the manager may regrant what was held. A manager that
// accepts the request takes the owner out of the ring and grants its arcs to
// the others at once. It does so even when the request races a message to
// this owner (a manager accepts a racing leaving request as a leave, and
// nothing more: its Migrated ranges count as plain releases), which is safe
// only because a Core that has left never believes anything again.
//
// After Leave the Core is done: Step, Tick and Resend do nothing, as before
// Start, NextDeadline is the zero time, and Left reports true; Start must
// not be called again (a restart is a new Core with a new Incarnation).
// Leave does nothing before Start or after an earlier Leave.
func (c *Core) Leave(now time.Time) Output {
	if !c.started {
		return Output{}
	}
	revoked := c.view.heldRanges()
	c.install(ring.NewTable(slot{}), 0)
	req := c.send(now) // Held(now) is empty from here on
	req.Leaving = true
	c.started = false
	return Output{Send: req, Revoked: revoked}
}

// Left reports whether Leave has ended the incarnation.
func (c *Core) Left() bool { return !c.started && c.mySeq > 0 }
