package xds

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestDeltaBlocks follows a delta client through changes. The clock is
// advanced before each view, so every view is published at once.
// TestDeltaBlocks runs on a Lookup's stream (serveLookup) and on a stream
// of any other client (go-control-plane's handler).
func TestDeltaBlocks(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) { testDeltaBlocks(t, plain) })
	}
}

func testDeltaBlocks(t *testing.T, plain bool) {
	ctx := testContext(t)
	if plain {
		ctx = plainStream(ctx)
	}
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	publish := func(v []lease.Entry, lsn uint64) {
		fc.Advance(FlushInterval)
		lt.NamespaceView("ns", v, lsn)
	}
	v1 := fourArcs()
	publish(v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil) // the 64 blocks, 60 of them empty

	// Two arcs change hands: exactly their two blocks are pushed.
	v2 := slices.Clone(v1)
	v2[1] = arcEntry(0, q, "d", 5)
	v2[2] = arcEntry(q, 2*q, "a", 6)
	publish(v2, 2)
	wantDelta(t, c.recv(), "ns", v2, at{16: 2, 32: 2}, nil)

	// (3q,0] and (0,q] merge into (3q,q]: block 0 is left empty and block
	// 16 changes; (2q,3q] splits at 2.5q, which ends in block 40.
	v3 := []lease.Entry{
		arcEntry(3*q, q, "a", 7),
		v2[2],
		arcEntry(2*q, 2*q+q/2, "c", 8),
		arcEntry(2*q+q/2, 3*q, "e", 8),
	}
	publish(v3, 3)
	wantDelta(t, c.recv(), "ns", v3, at{0: 3, 16: 3, 40: 3, 48: 3}, nil)

	// The same view again changes nothing: the next push is the next change.
	publish(v3, 4)
	v5 := slices.Clone(v3)
	v5[1] = arcEntry(q, 2*q, "", 9)
	publish(v5, 5)
	wantDelta(t, c.recv(), "ns", v5, at{32: 5}, nil)

	if st := lt.Stats(); st.Streams != 1 || st.Pushes != 4 || st.Namespaces != 1 || st.Views != 5 || st.Flushes != 5 {
		t.Errorf("stats %+v, want 1 stream, 4 pushes, 1 namespace, 5 views and flushes", st)
	}
}

// TestLookupStreamWildcardOnly checks that a Lookup stream that subscribes
// by name is refused: serveLookup serves wildcard subscriptions only.
func TestLookupStreamWildcardOnly(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	lt.NamespaceView("ns", fourArcs(), 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	c.recv()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ArcBlockTypeURL, ResourceNamesSubscribe: []string{"ns/block/3"}})
	if code := c.recvErr(); code != codes.InvalidArgument {
		t.Errorf("subscription by name: %v, want InvalidArgument", code)
	}
}

func TestOneArcOneBlock(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := evenArcs(256)
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil)

	v2 := slices.Clone(v1)
	v2[77] = arcEntry(v2[77].Range.Start, v2[77].Range.End, "moved", 900)
	lt.NamespaceView("ns", v2, 2)
	wantDelta(t, c.recv(), "ns", v2, at{wire.BlockOf(v2[77].Range.End, testBits): 2}, nil)

	// A new address under the same generation (the manager promises it
	// never does this) is still a change of the block.
	v3 := slices.Clone(v2)
	v3[5].Addr = "elsewhere:9090"
	lt.NamespaceView("ns", v3, 3)
	wantDelta(t, c.recv(), "ns", v3, at{wire.BlockOf(v3[5].Range.End, testBits): 3}, nil)
}

func TestDeltaReconnect(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	publish := func(v []lease.Entry, lsn uint64) {
		fc.Advance(FlushInterval)
		lt.NamespaceView("ns", v, lsn)
	}
	node := testNode("ns")
	v1 := fourArcs()
	publish(v1, 1)
	first, disconnect := context.WithCancel(ctx)
	var tb table
	r := openDelta(first, t, conn, node, ArcBlockTypeURL, nil).recv()
	wantDelta(t, r, "ns", v1, allAt(1), nil)
	tb.apply(t, "ns", r)
	disconnect()

	// While the lookup is away, two arcs change hands, in blocks 48 and 0.
	v2 := slices.Clone(v1)
	v2[3] = arcEntry(2*q, 3*q, "d", 5)
	publish(v2, 2)
	v3 := slices.Clone(v2)
	v3[0] = arcEntry(3*q, 0, "b", 6)
	publish(v3, 3)

	// It reconnects with the 64 block versions it holds and receives those
	// two blocks only.
	r = openDelta(ctx, t, conn, node, ArcBlockTypeURL, tb.versions).recv()
	wantDelta(t, r, "ns", v3, at{0: 3, 48: 2}, nil)
	tb.apply(t, "ns", r)
	if !tb.is(v3) {
		t.Fatalf("after reconnecting the client holds %v, want %v", tb.blocks, cut(v3))
	}

	// Up to date, a reconnecting lookup receives an empty response.
	upToDate := openDelta(ctx, t, conn, node, ArcBlockTypeURL, tb.versions)
	wantDelta(t, upToDate.recv(), "ns", v3, at{}, nil)

	// One that holds resources that are not served (a block out of range,
	// an arc of the former one-resource-per-arc model) is told to remove
	// them.
	stale := map[string]string{"ns/block/64": "1", wire.ArcName("ns", v1[0].Range): "1"}
	for name, v := range tb.versions {
		stale[name] = v
	}
	wantDelta(t, openDelta(ctx, t, conn, node, ArcBlockTypeURL, stale).recv(), "ns", v3, at{}, []string{"ns/block/64", wire.ArcName("ns", v1[0].Range)})

	// The up-to-date stream's next message is the next change, nothing else.
	v4 := slices.Clone(v3)
	v4[1] = arcEntry(0, q, "e", 7)
	publish(v4, 4)
	wantDelta(t, upToDate.recv(), "ns", v4, at{16: 4}, nil)
}

func TestSotw(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openSotw(ctx, t, conn, testNode("ns"), ArcBlockTypeURL)
	wantSotw(t, c.recv(), "ns", v1, 1)

	v2 := slices.Clone(v1)
	v2[2] = arcEntry(q, 2*q, "b", 5)
	lt.NamespaceView("ns", v2, 2)
	wantSotw(t, c.recv(), "ns", v2, 2)

	// A merge: the whole table again, without the merged ranges.
	v3 := []lease.Entry{arcEntry(3*q, q, "a", 6), v2[2], v2[3]}
	lt.NamespaceView("ns", v3, 3)
	wantSotw(t, c.recv(), "ns", v3, 3)
}

func TestHeartbeat(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	lt.Heartbeat("ns") // no view yet: ignored
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)

	// One ADS stream subscribes to blocks and heartbeats.
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: HeartbeatTypeURL})
	byType := map[string]*discovery.DeltaDiscoveryResponse{}
	for range 2 {
		r := c.recv()
		byType[r.TypeUrl] = r
	}
	if r := byType[ArcBlockTypeURL]; r == nil {
		t.Fatal("no blocks")
	}
	wantDelta(t, byType[ArcBlockTypeURL], "ns", v1, allAt(1), nil)
	if r := byType[HeartbeatTypeURL]; r == nil || len(r.Resources) != 0 {
		t.Fatalf("first heartbeat response %v, want an empty one", r)
	}

	for seq := uint64(1); seq <= 2; seq++ {
		lt.Heartbeat("ns")
		r := c.recv()
		if r.TypeUrl != HeartbeatTypeURL || len(r.Resources) != 1 {
			t.Fatalf("heartbeat push %v", r)
		}
		var hb fugev1.Heartbeat
		if err := r.Resources[0].Resource.UnmarshalTo(&hb); err != nil {
			t.Fatal(err)
		}
		if res := r.Resources[0]; res.Name != "ns/heartbeat" || res.Version != strconv.FormatUint(seq, 10) || hb.Namespace != "ns" || hb.Seq != seq {
			t.Errorf("heartbeat %s@%s %v, want ns/heartbeat@%d seq %d", res.Name, res.Version, &hb, seq, seq)
		}
	}

	// A SotW client receives the current heartbeat, then the next one.
	s := openSotw(ctx, t, conn, testNode("ns"), HeartbeatTypeURL)
	for seq := uint64(2); seq <= 3; seq++ {
		if seq == 3 {
			lt.Heartbeat("ns")
		}
		r := s.recv()
		var hb fugev1.Heartbeat
		if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(&hb) != nil || hb.Seq != seq || r.VersionInfo != strconv.FormatUint(seq, 10) {
			t.Errorf("SotW heartbeat %v, want seq %d", r, seq)
		}
	}
}

func TestNamespacesIsolated(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	va := fourArcs()
	vb := []lease.Entry{arcEntry(5, 5, "z", 1)}
	lt.NamespaceView("a", va, 1)
	lt.NamespaceView("b", vb, 1)
	ca := openDelta(ctx, t, conn, testNode("a"), ArcBlockTypeURL, nil)
	cb := openDelta(ctx, t, conn, &core.Node{Id: "lookup-2", Cluster: "b"}, ArcBlockTypeURL, nil) // cluster fallback
	wantDelta(t, ca.recv(), "a", va, allAt(1), nil)
	wantDelta(t, cb.recv(), "b", vb, allAt(1), nil)

	vb2 := []lease.Entry{arcEntry(5, 5, "y", 2)}
	lt.NamespaceView("b", vb2, 2)
	wantDelta(t, cb.recv(), "b", vb2, at{0: 2}, nil)

	// a's next message is its own change: it heard nothing of b's.
	va2 := slices.Clone(va)
	va2[0] = arcEntry(3*q, 0, "y", 5)
	lt.NamespaceView("a", va2, 2)
	wantDelta(t, ca.recv(), "a", va2, at{0: 2}, nil)
}

func TestGate(t *testing.T) {
	ctx := testContext(t)
	gate := func(ctx context.Context) error {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("fuge-leader", "10.0.0.2:7401"))
		return status.Error(codes.FailedPrecondition, "manager: not the leader")
	}
	lt, conn := newTestServer(t, LeaseTableConfig{Gate: gate})
	lt.NamespaceView("ns", fourArcs(), 1)
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	// Streams that a Lookup opens are gated; others (Envoy, gRPC) are not.
	lookupCtx := metadata.AppendToOutgoingContext(ctx, wire.ClientKindKey, wire.ClientLookup)

	d, err := ads.DeltaAggregatedResources(lookupCtx)
	if err != nil {
		t.Fatal(err)
	}
	// The server may refuse the stream before this request arrives: the
	// send may see io.EOF, and the status comes with Recv.
	_ = d.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("ns"), TypeUrl: ArcBlockTypeURL})
	if _, err := d.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delta stream: %v, want FailedPrecondition", err)
	}
	if got := d.Trailer().Get("fuge-leader"); !slices.Equal(got, []string{"10.0.0.2:7401"}) {
		t.Errorf("delta trailer fuge-leader %q", got)
	}

	s, err := ads.StreamAggregatedResources(lookupCtx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&discovery.DiscoveryRequest{Node: testNode("ns"), TypeUrl: ArcBlockTypeURL})
	if _, err := s.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("SotW stream: %v, want FailedPrecondition", err)
	}
	if got := s.Trailer().Get("fuge-leader"); !slices.Equal(got, []string{"10.0.0.2:7401"}) {
		t.Errorf("SotW trailer fuge-leader %q", got)
	}

	if st := lt.Stats(); st.Refused != 2 || st.Streams != 0 || st.Pushes != 0 {
		t.Errorf("stats %+v, want 2 refused, no stream, no push", st)
	}

	// An unmarked stream (an Envoy or a gRPC client) is served despite the
	// gate.
	o := openSotw(ctx, t, conn, testNode("ns"), ArcBlockTypeURL)
	if r := o.recvRaw(); len(r.Resources) != testBlocks {
		t.Errorf("unmarked stream got %d resources, want the %d blocks", len(r.Resources), testBlocks)
	}
	if st := lt.Stats(); st.Refused != 2 {
		t.Errorf("stats %+v, want still 2 refused", st)
	}
}

func TestNACK(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	nack := &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "block rejected"}

	d := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	r := d.recvRaw()
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ArcBlockTypeURL, ResponseNonce: r.Nonce, ErrorDetail: nack})
	s := openSotw(ctx, t, conn, testNode("ns"), ArcBlockTypeURL)
	sr := s.recvRaw()
	s.send(&discovery.DiscoveryRequest{TypeUrl: ArcBlockTypeURL, ResponseNonce: sr.Nonce, ErrorDetail: nack})

	// A NACK brings nothing back: each stream's next message is the next
	// change, and the server handled the NACK before sending it.
	v2 := slices.Clone(v1)
	v2[1] = arcEntry(0, q, "c", 5)
	lt.NamespaceView("ns", v2, 2)
	wantDelta(t, d.recv(), "ns", v2, at{16: 2}, nil)
	wantSotw(t, s.recv(), "ns", v2, 2)
	if st := lt.Stats(); st.NACKs != 2 {
		t.Errorf("stats %+v, want 2 NACKs", st)
	}
}

func TestNamespaceDeleted(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	lt.NamespaceView("other", []lease.Entry{arcEntry(0, 0, "", 1)}, 1)
	d := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, d.recv(), "ns", v1, allAt(1), nil)
	s := openSotw(ctx, t, conn, testNode("ns"), ArcBlockTypeURL)
	wantSotw(t, s.recv(), "ns", v1, 1)

	lt.NamespaceDeleted("ns")
	wantDelta(t, d.recv(), "ns", nil, at{}, allBlockNames("ns"))
	if r := s.recv(); len(r.Resources) != 0 {
		t.Errorf("SotW after deletion: %v, want no blocks", r)
	}
	// Acknowledging, both streams learn the namespace is gone.
	if code := d.recvErr(); code != codes.NotFound {
		t.Errorf("delta: %v, want NotFound", code)
	}
	if code := s.recvErr(); code != codes.NotFound {
		t.Errorf("SotW: %v, want NotFound", code)
	}
	lt.Heartbeat("ns") // does not bring it back
	if code := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil).recvErr(); code != codes.NotFound {
		t.Errorf("new stream: %v, want NotFound", code)
	}
	// A lookup reconnecting with blocks of the deleted namespace is told to
	// remove them, then refused; one that names a namespace this node never
	// heard of is refused at once and keeps its table.
	known := map[string]string{wire.BlockName("ns", 16): "1"}
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, known)
	wantDelta(t, c.recv(), "ns", nil, at{}, blockNames("ns", 16))
	if code := c.recvErr(); code != codes.NotFound {
		t.Errorf("reconnected stream: %v, want NotFound", code)
	}
	known = map[string]string{wire.BlockName("never", 16): "1"}
	if code := openDelta(ctx, t, conn, testNode("never"), ArcBlockTypeURL, known).recvErr(); code != codes.NotFound {
		t.Errorf("unknown namespace: %v, want NotFound", code)
	}
	lt.NamespaceDeleted("ns") // twice is harmless
	if st := lt.Stats(); st.Namespaces != 1 {
		t.Errorf("stats %+v, want 1 namespace", st)
	}

	// Created again, the namespace is served afresh, at once.
	lt.NamespaceView("ns", v1, 9)
	wantDelta(t, openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil).recv(), "ns", v1, allAt(9), nil)
}

func TestRefusedRequests(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	lt.NamespaceView("ns", fourArcs(), 1)
	badMeta := &core.Node{Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{NamespaceMetadataKey: structpb.NewNumberValue(3)}}}
	for _, tc := range []struct {
		name    string
		node    *core.Node
		typeURL string
		want    codes.Code
	}{
		{"unknown namespace", testNode("nope"), ArcBlockTypeURL, codes.NotFound},
		{"no namespace", &core.Node{Id: "x"}, ArcBlockTypeURL, codes.InvalidArgument},
		{"namespace not a string", badMeta, ArcBlockTypeURL, codes.InvalidArgument},
		{"unknown type", testNode("ns"), "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", codes.InvalidArgument},
		{"per-arc type no longer served", testNode("ns"), "type.googleapis.com/fuge.v1.Arc", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := openDelta(ctx, t, conn, tc.node, tc.typeURL, nil).recvErr(); code != tc.want {
				t.Errorf("delta: %v, want %v", code, tc.want)
			}
			if code := openSotw(ctx, t, conn, tc.node, tc.typeURL).recvErr(); code != tc.want {
				t.Errorf("SotW: %v, want %v", code, tc.want)
			}
		})
	}
}

func TestInvalidViewSkipped(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, allAt(1), nil)

	bad := slices.Clone(v1)
	bad[1] = arcEntry(0, q+1, "x", 9) // overlaps (q,2q]
	lt.NamespaceView("ns", bad, 2)
	lt.NamespaceView("new", nil, 1)
	if st := lt.Stats(); st.BadViews != 2 || st.Namespaces != 1 || st.Views != 1 {
		t.Errorf("stats %+v, want 2 bad views, 1 view, 1 namespace", st)
	}
	v3 := slices.Clone(v1)
	v3[2] = arcEntry(q, 2*q, "x", 10)
	lt.NamespaceView("ns", v3, 3)
	wantDelta(t, c.recv(), "ns", v3, at{32: 3}, nil)
}

// TestLookupCatchesUp checks that a Lookup that reconnects holding blocks
// newer than this node's view (it comes from a node ahead of this one)
// hears nothing until this node has published a view at least as new,
// even one that changes no block, or until MaxCatchUp has passed.
func TestLookupCatchesUp(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	v := fourArcs()
	lt.NamespaceView("ns", v, 3)
	held := map[string]string{"ns/block/0": "5", "ns/block/16": "4"}

	// syncs sends a Heartbeat subscription on c and waits for its answer:
	// the stream's requests are handled in order, so the ArcBlock request
	// before it has been handled too.
	syncs := func(c *deltaClient) {
		t.Helper()
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: HeartbeatTypeURL})
		if r := c.recvRaw(); r.GetTypeUrl() != HeartbeatTypeURL {
			t.Fatalf("a %s response (version %s) while the node is behind", r.GetTypeUrl(), r.GetSystemVersionInfo())
		}
	}
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, held)
	syncs(c)
	fc.Advance(FlushInterval)
	lt.NamespaceView("ns", v, 4) // still behind
	fc.Advance(FlushInterval)
	lt.NamespaceView("ns", v, 5) // caught up, though no block changed
	r := c.recvRaw()
	if r.GetTypeUrl() != ArcBlockTypeURL || r.GetSystemVersionInfo() != "5" {
		t.Fatalf("first ArcBlock response at %q (%s), want 5", r.GetSystemVersionInfo(), r.GetTypeUrl())
	}

	// A client claiming a version this node never reaches (a namespace
	// deleted and created again restarts its LSNs) is answered after
	// MaxCatchUp.
	c2 := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, map[string]string{"ns/block/0": "99"})
	syncs(c2)
	fc.Advance(MaxCatchUp)
	if r := c2.recvRaw(); r.GetTypeUrl() != ArcBlockTypeURL || r.GetSystemVersionInfo() != "5" {
		t.Fatalf("after MaxCatchUp: %s at %q, want ArcBlocks at 5", r.GetTypeUrl(), r.GetSystemVersionInfo())
	}
}

// TestLookupStreamUnacknowledged checks that a Lookup stream whose client
// has not acknowledged a response is still sent what it subscribes to (by
// a sender of its own, not the pool's workers, whose sends must not
// block).
func TestLookupStreamUnacknowledged(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	lt.NamespaceView("ns", fourArcs(), 1)
	lt.Heartbeat("ns")
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	if r := c.recvRaw(); r.GetTypeUrl() != ArcBlockTypeURL { // not acknowledged
		t.Fatalf("first response %s", r.GetTypeUrl())
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: HeartbeatTypeURL})
	if r := c.recvRaw(); r.GetTypeUrl() != HeartbeatTypeURL || len(r.GetResources()) != 1 {
		t.Fatalf("heartbeat response: %s with %d resources", r.GetTypeUrl(), len(r.GetResources()))
	}
}

// TestRecheckLookups checks that a marked Lookup stream asks the gate again
// at its next request: admitted, it goes on; refused, it ends with the
// gate's status and trailer, and only the streams marked do.
func TestRecheckLookups(t *testing.T) {
	ctx := testContext(t)
	var refuse atomic.Bool
	gate := func(ctx context.Context) error {
		if !refuse.Load() {
			return nil
		}
		_ = grpc.SetTrailer(ctx, metadata.Pairs("fuge-standby", "10.0.0.3:7401"))
		return status.Error(codes.Unavailable, "manager: the leader leaves Lookup streams to its standbys")
	}
	lt, conn := newTestServer(t, LeaseTableConfig{Gate: gate})
	marked := func() int {
		lt.smu.Lock()
		defer lt.smu.Unlock()
		n := 0
		for st := range lt.lookups {
			if st.recheck.Load() {
				n++
			}
		}
		return n
	}
	va := fourArcs()
	lt.NamespaceView("ns", va, 1)
	a := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	b := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	wantDelta(t, a.recv(), "ns", va, allAt(1), nil)
	wantDelta(t, b.recv(), "ns", va, allAt(1), nil)

	// Marked while the gate admits them: both go on.
	if n := lt.RecheckLookups(1); n != 2 {
		t.Fatalf("RecheckLookups(1) marked %d of 2 streams", n)
	}
	va2 := slices.Clone(va)
	va2[0] = arcEntry(3*q, 0, "y", 5)
	lt.NamespaceView("ns", va2, 2)
	wantDelta(t, a.recv(), "ns", va2, at{0: 2}, nil)
	wantDelta(t, b.recv(), "ns", va2, at{0: 2}, nil)
	poll(t, "the marks to be checked", func() bool { return marked() == 0 })
	if st := lt.Stats(); st.Streams != 2 || st.Rechecked != 0 {
		t.Fatalf("stats %+v, want 2 streams and none ended", st)
	}

	// The gate refuses now: of two streams, the one marked ends at its
	// next request (an acknowledgement), the other is served.
	refuse.Store(true)
	if n := lt.RecheckLookups(2); n != 1 {
		t.Fatalf("RecheckLookups(2) marked %d of 2 streams", n)
	}
	va3 := slices.Clone(va2)
	va3[1] = arcEntry(0, q, "z", 6)
	lt.NamespaceView("ns", va3, 3)
	// Each gets va3 and acknowledges it, unless an acknowledgement still
	// on its way ended it first.
	var errs [2]error
	for i, c := range []*deltaClient{a, b} {
		resp, err := c.s.Recv()
		if errs[i] = err; err == nil {
			wantDelta(t, resp, "ns", va3, at{16: 3}, nil)
			_ = c.s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce})
		}
	}
	poll(t, "the marked stream to end", func() bool { return lt.Stats().Rechecked == 1 })
	va4 := slices.Clone(va3)
	va4[2] = arcEntry(q, 2*q, "w", 7)
	lt.NamespaceView("ns", va4, 4)
	ended := 0
	for i, c := range []*deltaClient{a, b} {
		err := errs[i]
		if err == nil {
			var resp *discovery.DeltaDiscoveryResponse
			if resp, err = c.s.Recv(); err == nil {
				wantDelta(t, resp, "ns", va4, at{32: 4}, nil)
				continue
			}
		}
		ended++
		if status.Code(err) != codes.Unavailable || !slices.Equal(c.s.Trailer().Get("fuge-standby"), []string{"10.0.0.3:7401"}) {
			t.Errorf("the marked stream ended with %v, trailer %v; want the gate's UNAVAILABLE and fuge-standby", err, c.s.Trailer())
		}
	}
	if st := lt.Stats(); ended != 1 || st.Streams != 1 || st.Rechecked != 1 {
		t.Errorf("%d streams ended, stats %+v; want 1 ended, 1 stream left, 1 ended at a recheck", ended, lt.Stats())
	}
}
