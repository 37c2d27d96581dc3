package ownerguard

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

func TestLeaveDropsEverythingThenAsks(t *testing.T) {
	c, m, req := granted(t, nil, leaseA, leaseB) // request seq 2 sent at 1s
	// The manager answers seq 2 (its seq 2); A and B are renewed.
	c.Step(m.reply(req, []lease.Lease{leaseA, leaseB}, nil), at(2*time.Second))
	h, ok := c.GetOwnershipHandle(150, at(3*time.Second))
	if !ok {
		t.Fatal("A not held before Leave")
	}
	view := c.View()

	out := c.Leave(at(3 * time.Second))
	checkOutput(t, "Leave", out, nil, []ring.Range{rangeA, rangeB})
	checkHeld(t, "after Leave", c, at(3*time.Second))
	if _, ok := c.GetOwnershipHandle(150, at(3*time.Second)); ok || c.CheckContinuousOwnership(h, at(3*time.Second)) {
		t.Error("a check succeeds after Leave")
	}
	if len(view.Held(at(3*time.Second))) != 2 {
		t.Error("Leave modified a published View")
	}
	r := out.Send
	if r == nil {
		t.Fatal("Leave sent nothing")
	}
	want := lease.Header{Nonce: testInc, Seq: 3, PeerNonce: mgrNonce, AckSeq: 2}
	if !r.Leaving || len(r.Held) != 0 || r.Header != want || r.Owner != testName || r.Namespace != testNS {
		t.Errorf("leaving request %+v, want Leaving, Held empty, header %v", r, want)
	}
	if !c.Left() {
		t.Error("Left() = false after Leave")
	}
	if s := c.Stats(); s.Sent != 3 {
		t.Errorf("Stats().Sent = %d, want 3", s.Sent)
	}

	// The Core is done: nothing it hears or times brings anything back.
	checkDeadline(t, "after Leave", c, time.Time{})
	grant := m.reply(r, nil, []lease.Lease{leaseA})
	if out := c.Step(grant, at(4*time.Second)); out.Send != nil || len(out.Granted) != 0 {
		t.Errorf("Step after Leave produced %+v", out)
	}
	if out := c.Tick(at(time.Hour)); out.Send != nil || len(out.Revoked) != 0 {
		t.Errorf("Tick after Leave produced %+v", out)
	}
	if out := c.Resend(at(time.Hour)); out.Send != nil {
		t.Errorf("Resend after Leave produced %+v", out)
	}
	if out := c.Leave(at(time.Hour)); out.Send != nil || len(out.Revoked) != 0 {
		t.Errorf("second Leave produced %+v", out)
	}
	checkHeld(t, "after the grant", c, at(4*time.Second))
}

// Leave reports as revoked what the upcall has not yet heard revoked:
// leases that ran out but that no Tick has expired yet.
func TestLeaveRevokesUnexpired(t *testing.T) {
	c, _, _ := granted(t, nil, leaseA) // held until T
	out := c.Leave(at(testT + time.Second))
	checkOutput(t, "Leave", out, nil, []ring.Range{rangeA})
}

func TestLeaveBeforeStart(t *testing.T) {
	c := newCore(t, nil)
	if out := c.Leave(at(0)); out.Send != nil || len(out.Revoked) != 0 {
		t.Errorf("Leave before Start produced %+v", out)
	}
	if c.Left() {
		t.Error("Left() before Start")
	}
}
