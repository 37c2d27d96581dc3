package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// gateState is the whole-table gate's slots in use and streams waiting.
func gateState(lt *LeaseTable) (used, waiting int) {
	lt.whole.mu.Lock()
	defer lt.whole.mu.Unlock()
	return lt.whole.used, len(lt.whole.waiting)
}

// TestWholeTableGate checks that Lookup streams are sent whole tables a
// slot at a time (one slot here): a stream waits until the one before has
// acknowledged its table, or its stream ended, or the slot's hold passed;
// that a late acknowledgement returns nothing twice; that a stream which
// ends while waiting is passed over; and that a response smaller than a
// whole table does not wait.
func TestWholeTableGate(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerWith(t, LeaseTableConfig{}, fc, func(lt *LeaseTable) {
		lt.whole.slots, lt.whole.min = 1, testBlocks
	})
	v := fourArcs()
	lt.NamespaceView("ns", v, 1)
	lt.Heartbeat("ns")
	pushes := func() uint64 { return lt.Stats().Pushes }
	// wantGate waits for the gate's state and the count of streams that
	// have waited (each counted once its wait's bound is armed).
	wantGate := func(what string, used, waiting int, waits uint64) {
		t.Helper()
		poll(t, what, func() bool {
			u, w := gateState(lt)
			return u == used && w == waiting && lt.Stats().WholeWaits == waits
		})
	}
	ack := func(c *deltaClient, r *discovery.DeltaDiscoveryResponse) {
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	}
	// synced waits until c's requests so far have been handled: they are
	// handled in order, and a Heartbeat subscription is answered at once.
	synced := func(c *deltaClient) {
		t.Helper()
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: HeartbeatTypeURL})
		if r := c.recv(); r.GetTypeUrl() != HeartbeatTypeURL {
			t.Fatalf("got %s, want the Heartbeat", r.GetTypeUrl())
		}
	}
	open := func() (*deltaClient, context.CancelFunc) {
		cctx, cancel := context.WithCancel(ctx)
		return openDelta(cctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil), cancel
	}

	// a holds the slot until it acknowledges; b waits, sent nothing.
	a, _ := open()
	ra := a.recvRaw()
	wantDelta(t, ra, "ns", v, allAt(1), nil)
	b, _ := open()
	wantGate("b to wait", 1, 1, 1)
	if n := pushes(); n != 1 {
		t.Fatalf("%d responses sent while b waits, want a's 1", n)
	}
	ack(a, ra)
	rb := b.recvRaw()
	wantDelta(t, rb, "ns", v, allAt(1), nil)

	// b does not acknowledge: c waits until the slot's hold passes.
	c, _ := open()
	wantGate("c to wait", 1, 1, 2)
	if armed := fc.Armed(); armed != 2 {
		t.Fatalf("%d timers armed, want b's hold and c's wait", armed)
	}
	fc.Advance(lt.whole.hold)
	rc := c.recvRaw()
	wantDelta(t, rc, "ns", v, allAt(1), nil)
	// b's late acknowledgement returns no slot: c still holds it.
	ack(b, rb)
	synced(b)
	wantGate("c to hold the slot alone", 1, 0, 2)

	// d waits, then its stream ends: c's acknowledgement passes it over
	// and returns the slot.
	d, cancelD := open()
	wantGate("d to wait", 1, 1, 3)
	cancelD()
	if code := d.recvErr(); code == 0 {
		t.Fatal("d's stream did not end")
	}
	poll(t, "d's stream to close", func() bool { return lt.Stats().Streams == 3 })
	ack(c, rc)
	synced(c)
	wantGate("the slot back", 0, 0, 3)

	// e holds the slot, f waits, e's stream ends: f is sent its table.
	e, cancelE := open()
	e.recvRaw()
	f, _ := open()
	wantGate("f to wait", 1, 1, 4)
	cancelE()
	rf := f.recvRaw()
	wantDelta(t, rf, "ns", v, allAt(1), nil)

	// While f holds the slot, a change of one block reaches a at once.
	v2 := slices.Clone(v)
	v2[0] = arcEntry(3*q, 0, "y", 9)
	fc.Advance(FlushInterval)
	lt.NamespaceView("ns", v2, 2)
	r := a.recv()
	if len(r.Resources) != 1 {
		t.Fatalf("a change of one arc sent %d blocks", len(r.Resources))
	}
	ack(f, rf)
	if r := f.recv(); len(r.Resources) != 1 {
		t.Fatalf("f was sent %d blocks for a change of one arc", len(r.Resources))
	}
	synced(f)
	wantGate("the slot back after f", 0, 0, 4)
	if armed := fc.Armed(); armed != 0 {
		t.Fatalf("%d hold or wait timers still armed", armed)
	}
	if st := lt.Stats(); st.WholeWaits != 4 || st.WholeBypasses != 0 {
		t.Fatalf("stats: %d waits, %d bypasses; want b's, c's, d's and f's, none", st.WholeWaits, st.WholeBypasses)
	}
}

// TestWholeTableGateBound checks that a stream waits for a slot no longer
// than the gate's wait: past it, it is sent its table without one, and the
// holder's acknowledgement then returns the slot to the gate.
func TestWholeTableGateBound(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerWith(t, LeaseTableConfig{}, fc, func(lt *LeaseTable) {
		lt.whole.slots, lt.whole.min = 1, testBlocks
		lt.whole.hold, lt.whole.wait = time.Minute, 2*time.Second
	})
	v := fourArcs()
	lt.NamespaceView("ns", v, 1)
	a := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	ra := a.recvRaw()
	b := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	poll(t, "b to wait", func() bool { return lt.Stats().WholeWaits == 1 })
	fc.Advance(lt.whole.wait - time.Millisecond)
	if st := lt.Stats(); st.Pushes != 1 || st.WholeBypasses != 0 {
		t.Fatalf("before the wait's bound: %d pushes, %d bypasses; want a's 1, none", st.Pushes, st.WholeBypasses)
	}
	fc.Advance(time.Millisecond)
	wantDelta(t, b.recv(), "ns", v, allAt(1), nil)
	if n := lt.Stats().WholeBypasses; n != 1 {
		t.Fatalf("%d bypasses, want b's", n)
	}
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ra.TypeUrl, ResponseNonce: ra.Nonce})
	poll(t, "the slot back", func() bool {
		used, waiting := gateState(lt)
		return used == 0 && waiting == 0
	})
	if armed := fc.Armed(); armed != 0 {
		t.Fatalf("%d timers still armed", armed)
	}
}
