package xds

import (
	"slices"
	"strconv"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// published is the version_info of a namespace's block cache: the LSN of
// the last view that changed a block.
func published(lt *LeaseTable, ns string) string {
	lt.mu.RLock()
	defer lt.mu.RUnlock()
	c := lt.spaces[ns].caches[ArcBlockTypeURL]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// withOwner is view with arc i held by owner at generation gen.
func withOwner(view []lease.Entry, i int, owner string, gen lease.Gen) []lease.Entry {
	out := slices.Clone(view)
	out[i] = arcEntry(out[i].Range.Start, out[i].Range.End, owner, gen)
	return out
}

// TestCoalescing: views that arrive within FlushInterval of the last
// publication are kept, and only the latest is published when the interval
// has passed; the ones in between are never sent.
func TestCoalescing(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil)

	// Views 2 to 5, each giving (0,q] to someone else, and view 3 also
	// changing (2q,3q], all within the interval.
	views := map[uint64][]lease.Entry{1: v1}
	for lsn := uint64(2); lsn <= 5; lsn++ {
		v := withOwner(v1, 1, "o"+strconv.FormatUint(lsn, 10), lease.Gen(10+lsn))
		if lsn == 3 {
			v = withOwner(v, 3, "x", 20)
		}
		views[lsn] = v
		lt.NamespaceView("ns", v, lsn)
	}
	if st := lt.Stats(); st.Views != 5 || st.Flushes != 1 || fc.Armed() != 1 || published(lt, "ns") != "1" {
		t.Fatalf("before the interval: stats %+v, %d timers, published %s; want 5 views, 1 flush, 1 timer, published 1", st, fc.Armed(), published(lt, "ns"))
	}
	fc.Advance(FlushInterval - time.Nanosecond)
	if st := lt.Stats(); st.Flushes != 1 || published(lt, "ns") != "1" {
		t.Fatalf("just before the interval: stats %+v, published %s", st, published(lt, "ns"))
	}
	fc.Advance(time.Nanosecond)
	if st := lt.Stats(); st.Flushes != 2 || fc.Armed() != 0 || published(lt, "ns") != "5" {
		t.Fatalf("after the interval: stats %+v, %d timers, published %s; want 2 flushes, no timer, published 5", st, fc.Armed(), published(lt, "ns"))
	}
	// One push, of view 5: block 16 at 5. View 3's change to block 48 was
	// undone by view 4 before anything was published, so it is never sent.
	wantDelta(t, c.recv(), "ns", views[5], at{16: 5}, nil)

	// The next view, arriving at once, waits for the next interval.
	v6 := withOwner(views[5], 2, "y", 30)
	lt.NamespaceView("ns", v6, 6)
	if fc.Armed() != 1 || published(lt, "ns") != "5" {
		t.Fatalf("view 6 published at once (%s) or no timer (%d)", published(lt, "ns"), fc.Armed())
	}
	fc.Advance(FlushInterval)
	wantDelta(t, c.recv(), "ns", v6, at{32: 6}, nil)
	if st := lt.Stats(); st.Pushes != 3 {
		t.Errorf("stats %+v, want 3 pushes", st)
	}
}

// TestCoalesceBurst: 100 views in a burst, on the real clock, reach a
// subscribed client in few pushes, each a whole view in the order given,
// the last one last.
func TestCoalesceBurst(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	const n = 100
	views := [][]lease.Entry{evenArcs(256)}
	for i := 1; i <= n; i++ {
		views = append(views, withOwner(views[i-1], i, "burst"+strconv.Itoa(i), lease.Gen(1000+i)))
	}
	lt.NamespaceView("ns", views[0], 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	var tb table
	r := c.recv()
	wantDelta(t, r, "ns", views[0], allAt(1), nil)
	tb.apply(t, "ns", r)

	start := time.Now()
	for i := 1; i <= n; i++ {
		lt.NamespaceView("ns", views[i], uint64(i+1))
	}
	elapsed := time.Since(start)

	// Arcs 1 to 100 end in blocks 0 to 25: no other block is ever resent.
	pushes, last := 0, 0
	for last < n {
		r := c.recv()
		pushes++
		for _, res := range r.Resources {
			if b, _ := decodeBlock(t, "ns", res.Name, res.Resource); b > 25 {
				t.Errorf("push %d resends block %d, which no view changed", pushes, b)
			}
		}
		tb.apply(t, "ns", r)
		k := slices.IndexFunc(views, tb.is)
		if k <= last {
			t.Fatalf("push %d leaves the client at view %d, after view %d", pushes, k, last)
		}
		last = k
	}
	// At most one publication at once and one per interval after it, plus
	// the last one.
	bound := 2 + int(elapsed/FlushInterval)
	st := lt.Stats()
	t.Logf("%d views in %v: %d publications, %d pushes", n, elapsed, st.Flushes-1, pushes)
	if pushes > bound || pushes > 20 || int(st.Flushes)-1 > bound {
		t.Errorf("%d views in %v: %d publications and %d pushes, want at most %d and far fewer than %d", n, elapsed, st.Flushes-1, pushes, bound, n)
	}
	if st.Views != n+1 {
		t.Errorf("stats %+v, want %d views", st, n+1)
	}
}

// TestLoneChangeNotDelayed: a view that arrives after a quiet period is
// published at once. The clock is fake and never fires a timer unless told
// to, so the push arriving proves that no timer was waited for.
func TestLoneChangeNotDelayed(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil)

	fc.Advance(FlushInterval) // quiet for a whole interval
	v2 := withOwner(v1, 1, "d", 5)
	lt.NamespaceView("ns", v2, 2)
	if n := fc.Armed(); n != 0 {
		t.Fatalf("a lone view armed %d timers", n)
	}
	wantDelta(t, c.recv(), "ns", v2, at{16: 2}, nil)

	// The same after a quiet period that ended with a timer's publication.
	v3 := withOwner(v2, 1, "e", 6)
	lt.NamespaceView("ns", v3, 3) // within the interval: kept
	if n := fc.Armed(); n != 1 {
		t.Fatalf("a view within the interval armed %d timers, want 1", n)
	}
	fc.Advance(FlushInterval)
	wantDelta(t, c.recv(), "ns", v3, at{16: 3}, nil)
	fc.Advance(FlushInterval)
	v4 := withOwner(v3, 1, "f", 7)
	lt.NamespaceView("ns", v4, 4)
	if n := fc.Armed(); n != 0 {
		t.Fatalf("a lone view armed %d timers", n)
	}
	wantDelta(t, c.recv(), "ns", v4, at{16: 4}, nil)
}

// TestHeartbeatAfterPendingView: a heartbeat publishes the kept view
// first, so its blocks reach the client before the heartbeat.
func TestHeartbeatAfterPendingView(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil)
	// The server handles requests in order: once it has answered the
	// heartbeat subscription it has handled the blocks' acknowledgement,
	// so the blocks are watched again.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: HeartbeatTypeURL})
	if r := c.recv(); r.TypeUrl != HeartbeatTypeURL || len(r.Resources) != 0 {
		t.Fatalf("first heartbeat response %v, want an empty one", r)
	}

	v2 := withOwner(v1, 1, "d", 5)
	lt.NamespaceView("ns", v2, 2) // within the interval: kept
	if fc.Armed() != 1 || published(lt, "ns") != "1" {
		t.Fatalf("view 2 not kept: %d timers, published %s", fc.Armed(), published(lt, "ns"))
	}
	lt.Heartbeat("ns")
	if n := fc.Armed(); n != 0 {
		t.Errorf("the heartbeat left %d timers armed", n)
	}
	r := c.recv()
	if r.TypeUrl != ArcBlockTypeURL {
		t.Fatalf("first message after the heartbeat is %s, want the kept view's blocks", r.TypeUrl)
	}
	wantDelta(t, r, "ns", v2, at{16: 2}, nil)
	r = c.recv()
	var hb fugev1.Heartbeat
	if r.TypeUrl != HeartbeatTypeURL || len(r.Resources) != 1 || r.Resources[0].Resource.UnmarshalTo(&hb) != nil || hb.Seq != 1 {
		t.Fatalf("second message %v, want heartbeat 1", r)
	}
}

// TestNamespaceDeletedCancelsPending: a view kept for later is forgotten
// when its namespace is deleted, and never published.
func TestNamespaceDeletedCancelsPending(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil)

	lt.NamespaceView("ns", withOwner(v1, 1, "d", 5), 2) // kept
	if n := fc.Armed(); n != 1 {
		t.Fatalf("%d timers, want 1", n)
	}
	lt.NamespaceDeleted("ns")
	if n := fc.Armed(); n != 0 {
		t.Errorf("deletion left %d timers armed", n)
	}
	fc.Advance(FlushInterval)
	wantDelta(t, c.recv(), "ns", nil, at{}, allBlockNames("ns"))
	if code := c.recvErr(); code != codes.NotFound {
		t.Errorf("after the removals: %v, want NotFound", code)
	}
	if st := lt.Stats(); st.Flushes != 1 || st.Namespaces != 0 {
		t.Errorf("stats %+v, want 1 flush, no namespace", st)
	}

	// Created again within the interval, the namespace is served at once.
	v3 := withOwner(v1, 2, "e", 6)
	lt.NamespaceView("ns", v3, 3)
	wantDelta(t, openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil).recv(), "ns", v3, allAt(3), nil)
}

// TestSharedResources: every response, on every stream, carries the one
// marshaled Any of each block version; a stream keeps only the versions it
// was sent, 64 of them.
func TestSharedResources(t *testing.T) {
	lt := NewLeaseTable(LeaseTableConfig{})
	lt.NamespaceView("ns", fourArcs(), 1)
	m := mux{lt}
	var deltas []*discovery.DeltaDiscoveryResponse
	for range 2 {
		out := make(chan cache.DeltaResponse, 1)
		sub := stream.NewDeltaSubscription(nil, nil, nil, true)
		if _, err := m.CreateDeltaWatch(&cache.DeltaRequest{Node: testNode("ns"), TypeUrl: ArcBlockTypeURL}, &sub, out); err != nil {
			t.Fatal(err)
		}
		r := <-out
		if n := len(r.GetNextVersionMap()); n != testBlocks {
			t.Errorf("a stream keeps %d versions, want %d", n, testBlocks)
		}
		resp, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, resp)
	}
	out := make(chan cache.Response, 1)
	sub := stream.NewSotwSubscription(nil, true)
	if _, err := m.CreateWatch(&cache.Request{Node: testNode("ns"), TypeUrl: ArcBlockTypeURL}, &sub, out); err != nil {
		t.Fatal(err)
	}
	sotw, err := (<-out).GetDiscoveryResponse()
	if err != nil {
		t.Fatal(err)
	}

	lt.mu.RLock()
	res := lt.spaces["ns"].caches[ArcBlockTypeURL].res
	lt.mu.RUnlock()
	if len(res) != testBlocks || len(sotw.Resources) != testBlocks {
		t.Fatalf("%d resources cached, %d sent over SotW; want %d", len(res), len(sotw.Resources), testBlocks)
	}
	for _, a := range sotw.Resources {
		b, _ := decodeBlock(t, "ns", "", a)
		r := res[wire.BlockName("ns", b)]
		if r == nil || a != r.any {
			t.Errorf("SotW block %d is not the cached Any", b)
		}
	}
	for i, d := range deltas {
		if len(d.Resources) != testBlocks {
			t.Fatalf("delta %d carries %d blocks", i, len(d.Resources))
		}
		for _, dr := range d.Resources {
			if r := res[dr.Name]; r == nil || dr != r.delta || dr.Resource != r.any {
				t.Errorf("delta %d: %s is not the cached resource", i, dr.Name)
			}
		}
	}
}

// TestChangedWithin: a published view counts as a change for the given
// time after it, by the table's clock; a heartbeat does not.
func TestChangedWithin(t *testing.T) {
	fc := newFakeClock()
	lt := newLeaseTable(LeaseTableConfig{}, fc)
	if lt.ChangedWithin("ns", time.Hour) {
		t.Error("a namespace without a view changed")
	}
	lt.NamespaceView("ns", fourArcs(), 1)
	if !lt.ChangedWithin("ns", 10*time.Millisecond) {
		t.Error("a view just published is not a change within 10ms")
	}
	fc.Advance(10 * time.Millisecond)
	if lt.ChangedWithin("ns", 10*time.Millisecond) {
		t.Error("a view published 10ms ago is a change within 10ms")
	}
	lt.Heartbeat("ns")
	if lt.ChangedWithin("ns", 10*time.Millisecond) {
		t.Error("a heartbeat counted as a change")
	}
	lt.NamespaceView("ns", withOwner(fourArcs(), 1, "x", 9), 2)
	if !lt.ChangedWithin("ns", time.Millisecond) {
		t.Error("the second view is not a change")
	}
	if lt.ChangedWithin("other", time.Hour) {
		t.Error("another namespace changed")
	}
}
