package manager_test

import (
	"testing"
	"time"
)

// TestGrantConfirmationsSkipTheWalk checks that an owner answering a grant
// with exactly the leases it was sent is confirmed without the walk of its
// arcs (Stats.FastConfirms), and that the state this leaves is the one the
// walk would have left: the core's invariants hold after every delivery
// (Verify compares each cached message with the arcs it stands for), and
// the pool converges with every arc held under the manager's generation.
// The simulator checks the same over its fault schedules (make sim).
func TestGrantConfirmationsSkipTheWalk(t *testing.T) {
	c := newCluster(t, 1024)
	verified := 0
	c.onStep = func() {
		verified++
		if err := c.m.Verify(); err != nil {
			t.Fatalf("after delivery %d: %v", verified, err)
		}
	}
	for i := range 8 {
		c.addOwner(ownerName(i), uint64(i+1))
	}
	c.run(10 * time.Minute)
	before := c.m.Stats()
	if before.FastConfirms == 0 {
		t.Fatalf("8 owners joining: no confirmation took the fast path (%d requests accepted)", before.Accepted)
	}
	// A ninth owner: recalls from the others, grants to it.
	c.addOwner(ownerName(8), 9)
	c.run(10 * time.Minute)
	after := c.m.Stats()
	if after.FastConfirms == before.FastConfirms {
		t.Fatalf("a join: no confirmation took the fast path (%d requests accepted)", after.Accepted-before.Accepted)
	}
	if after.Releases == before.Releases {
		t.Fatalf("a join released nothing: the walk's path was not exercised")
	}
	t.Logf("%d deliveries verified; fast confirmations %d then %d of %d and %d accepted requests",
		verified, before.FastConfirms, after.FastConfirms-before.FastConfirms, before.Accepted, after.Accepted-before.Accepted)
}
