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
	c, verified := verifiedPool(t, 1024, 8)
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
		*verified, before.FastConfirms, after.FastConfirms-before.FastConfirms, before.Accepted, after.Accepted-before.Accepted)
}

// TestRecallAnswersSkipTheWalk checks that an owner answering a recall by
// leaving out exactly the recalled arcs is released without the walk of its
// arcs (Stats.FastReleases), for a join and for a drain, and that the state
// this leaves is the one the walk would have left: the core's invariants,
// the cached recalls among them, hold after every delivery, and the pool
// converges with every arc held under the manager's generation.
func TestRecallAnswersSkipTheWalk(t *testing.T) {
	c, verified := verifiedPool(t, 4096, 40)
	s0 := c.m.Stats()
	c.addOwner(ownerName(40), 41) // recalls from the others
	c.run(10 * time.Minute)
	s1 := c.m.Stats()
	if s1.Recalls == s0.Recalls || s1.FastReleases == s0.FastReleases {
		t.Fatalf("a join: %d recalls, %d answers released without the walk", s1.Recalls-s0.Recalls, s1.FastReleases-s0.FastReleases)
	}
	out, err := c.m.Drain(benchNS, ownerName(2), c.now) // recalls from the drained owner
	if err != nil {
		t.Fatal(err)
	}
	c.managerOut(out)
	c.run(10 * time.Minute)
	s2 := c.m.Stats()
	if s2.FastReleases == s1.FastReleases {
		t.Fatalf("a drain: no answer released without the walk (%d recalls)", s2.Recalls-s1.Recalls)
	}
	t.Logf("%d deliveries verified; releases without the walk: join %d of %d recalls, drain %d of %d",
		*verified, s1.FastReleases-s0.FastReleases, s1.Recalls-s0.Recalls, s2.FastReleases-s1.FastReleases, s2.Recalls-s1.Recalls)
}

// verifiedPool returns a cluster of n owners at ring size r, converged,
// that checks the core's invariants (Verify) after every delivery from its
// start; verified counts the deliveries checked.
func verifiedPool(t *testing.T, r, n int) (c *cluster, verified *int) {
	t.Helper()
	c = newCluster(t, r)
	verified = new(int)
	c.onStep = func() {
		*verified++
		if err := c.m.Verify(); err != nil {
			t.Fatalf("after delivery %d: %v", *verified, err)
		}
	}
	for i := range n {
		c.addOwner(ownerName(i), uint64(i+1))
	}
	c.run(10 * time.Minute)
	return c, verified
}
