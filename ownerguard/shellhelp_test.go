package ownerguard

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

func TestResend(t *testing.T) {
	c := newCore(t, nil)
	if out := c.Resend(at(0)); out.Send != nil {
		t.Fatalf("Resend before Start sent %+v", out.Send)
	}
	arc := rg(0x1000, 0x2000)
	c, _, req := granted(t, nil, ls(arc, 7)) // request 2 sent at 1s

	// Before any deadline, Resend sends the next request anyway.
	out := c.Resend(at(2 * time.Second))
	if out.Send == nil || out.Send.Seq != req.Seq+1 || !eqLeases(out.Send.Held, []lease.Lease{ls(arc, 7)}) {
		t.Fatalf("Resend = %+v, want seq %d holding %v", out.Send, req.Seq+1, arc)
	}
	checkOutput(t, "Resend", out, nil, nil)
	checkDeadline(t, "after Resend", c, at(2*time.Second+testT/4))

	// Past the lease's expiry (T after request 1, sent at 0), Resend also
	// does Tick's work: the lease is revoked and the request omits it.
	out = c.Resend(at(testT))
	checkOutput(t, "Resend after expiry", out, nil, []ring.Range{arc})
	if out.Send == nil || len(out.Send.Held) != 0 {
		t.Fatalf("Resend after expiry = %+v, want a request holding nothing", out.Send)
	}
}

func TestViewHeld(t *testing.T) {
	arc := rg(0x1000, 0x2000)
	c, _, _ := granted(t, nil, ls(arc, 7))
	v := c.View()
	if got := v.Held(at(time.Second)); !eqLeases(got, c.Held(at(time.Second))) || len(got) != 1 {
		t.Errorf("View.Held = %v, Core.Held = %v", lease.FormatLeases(got), lease.FormatLeases(c.Held(at(time.Second))))
	}
	if got := v.Held(at(testT)); len(got) != 0 {
		t.Errorf("View.Held after expiry = %v", lease.FormatLeases(got))
	}
	if got := v.heldRanges(); !eqRanges(got, []ring.Range{arc}) {
		t.Errorf("heldRanges = %v", got)
	}
	if got := emptyView().Held(at(0)); len(got) != 0 {
		t.Errorf("emptyView().Held = %v", got)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := BackoffConfig{Base: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: -1}.WithDefaults()
	for _, tc := range []struct {
		k    int
		want time.Duration
	}{
		{0, 50 * time.Millisecond}, {1, 100 * time.Millisecond}, {5, 1600 * time.Millisecond},
		{6, 2 * time.Second}, {40, 2 * time.Second}, {1000, 2 * time.Second},
	} {
		if got := b.Delay(tc.k, 0.9); got != tc.want {
			t.Errorf("delay(%d) = %v, want %v", tc.k, got, tc.want)
		}
	}
	j := BackoffConfig{}.WithDefaults() // jitter 0.2
	if lo, hi := j.Delay(0, 0), j.Delay(0, 0.999999); lo != 40*time.Millisecond || hi < 59*time.Millisecond || hi > 60*time.Millisecond {
		t.Errorf("jittered delay(0) spans [%v, %v], want [40ms, 60ms)", lo, hi)
	}
}
