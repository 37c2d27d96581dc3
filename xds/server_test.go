package xds

import (
	"context"
	"slices"
	"strconv"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestDeltaArcs(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, nil)

	// Two arcs change hands: exactly those two are pushed.
	v2 := slices.Clone(v1)
	v2[1] = arcEntry(0, q, "d", 5)
	v2[2] = arcEntry(q, 2*q, "a", 6)
	lt.NamespaceView("ns", v2, 2)
	wantDelta(t, c.recv(), "ns", v2[1:3], nil)

	// (3q,0] and (0,q] merge; (2q,3q] splits in two.
	v3 := []lease.Entry{
		arcEntry(3*q, q, "a", 7),
		v2[2],
		arcEntry(2*q, 2*q+q/2, "c", 8),
		arcEntry(2*q+q/2, 3*q, "e", 8),
	}
	lt.NamespaceView("ns", v3, 3)
	wantDelta(t, c.recv(), "ns", []lease.Entry{v3[0], v3[2], v3[3]}, []ring.Range{v1[0].Range, v1[1].Range, v1[3].Range})

	// The same view again changes nothing: the next push is the next change.
	lt.NamespaceView("ns", v3, 4)
	v5 := slices.Clone(v3)
	v5[1] = arcEntry(q, 2*q, "", 9)
	lt.NamespaceView("ns", v5, 5)
	wantDelta(t, c.recv(), "ns", v5[1:2], nil)

	if st := lt.Stats(); st.Streams != 1 || st.Pushes != 4 || st.Namespaces != 1 {
		t.Errorf("stats %+v, want 1 stream, 4 pushes, 1 namespace", st)
	}
}

func TestDeltaReconnect(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	node := testNode("ns")
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	first, disconnect := context.WithCancel(ctx)
	wantDelta(t, openDelta(first, t, conn, node, ArcTypeURL, nil).recv(), "ns", v1, nil)
	disconnect()

	// While the lookup is away, one arc changes hands.
	v2 := slices.Clone(v1)
	v2[3] = arcEntry(2*q, 3*q, "d", 5)
	lt.NamespaceView("ns", v2, 2)

	// It reconnects with the generations it holds and receives that arc only.
	known := map[string]string{}
	for _, e := range v1 {
		known[wire.ArcName("ns", e.Range)] = strconv.FormatUint(uint64(e.Gen), 10)
	}
	wantDelta(t, openDelta(ctx, t, conn, node, ArcTypeURL, known).recv(), "ns", v2[3:], nil)

	// Up to date, a reconnecting lookup receives an empty response.
	known[wire.ArcName("ns", v2[3].Range)] = "5"
	upToDate := openDelta(ctx, t, conn, node, ArcTypeURL, known)
	wantDelta(t, upToDate.recv(), "ns", nil, nil)

	// One that holds a range that no longer exists is told to remove it.
	stale := map[string]string{wire.ArcName("ns", ring.Range{Start: 3 * q, End: q}): "9"}
	for name, v := range known {
		stale[name] = v
	}
	wantDelta(t, openDelta(ctx, t, conn, node, ArcTypeURL, stale).recv(), "ns", nil, []ring.Range{{Start: 3 * q, End: q}})

	// The up-to-date stream's next message is the next change, nothing else.
	v3 := slices.Clone(v2)
	v3[0] = arcEntry(3*q, 0, "b", 6)
	lt.NamespaceView("ns", v3, 3)
	wantDelta(t, upToDate.recv(), "ns", v3[:1], nil)
}

func TestSotw(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openSotw(ctx, t, conn, testNode("ns"), ArcTypeURL)
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

	// One ADS stream subscribes to arcs and heartbeats.
	c := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: HeartbeatTypeURL})
	byType := map[string]*discovery.DeltaDiscoveryResponse{}
	for range 2 {
		r := c.recv()
		byType[r.TypeUrl] = r
	}
	wantDelta(t, byType[ArcTypeURL], "ns", v1, nil)
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
	ca := openDelta(ctx, t, conn, testNode("a"), ArcTypeURL, nil)
	cb := openDelta(ctx, t, conn, &core.Node{Id: "lookup-2", Cluster: "b"}, ArcTypeURL, nil) // cluster fallback
	wantDelta(t, ca.recv(), "a", va, nil)
	wantDelta(t, cb.recv(), "b", vb, nil)

	vb2 := []lease.Entry{arcEntry(5, 5, "y", 2)}
	lt.NamespaceView("b", vb2, 2)
	wantDelta(t, cb.recv(), "b", vb2, nil)

	// a's next message is its own change: it heard nothing of b's.
	va2 := slices.Clone(va)
	va2[0] = arcEntry(3*q, 0, "y", 5)
	lt.NamespaceView("a", va2, 2)
	wantDelta(t, ca.recv(), "a", va2[:1], nil)
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

	d, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The server may refuse the stream before this request arrives: the
	// send may see io.EOF, and the status comes with Recv.
	_ = d.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("ns"), TypeUrl: ArcTypeURL})
	if _, err := d.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delta stream: %v, want FailedPrecondition", err)
	}
	if got := d.Trailer().Get("fuge-leader"); !slices.Equal(got, []string{"10.0.0.2:7401"}) {
		t.Errorf("delta trailer fuge-leader %q", got)
	}

	s, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&discovery.DiscoveryRequest{Node: testNode("ns"), TypeUrl: ArcTypeURL})
	if _, err := s.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("SotW stream: %v, want FailedPrecondition", err)
	}
	if got := s.Trailer().Get("fuge-leader"); !slices.Equal(got, []string{"10.0.0.2:7401"}) {
		t.Errorf("SotW trailer fuge-leader %q", got)
	}

	if st := lt.Stats(); st.Refused != 2 || st.Streams != 0 || st.Pushes != 0 {
		t.Errorf("stats %+v, want 2 refused, no stream, no push", st)
	}
}

func TestNACK(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	nack := &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "arc rejected"}

	d := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil)
	r := d.recvRaw()
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ArcTypeURL, ResponseNonce: r.Nonce, ErrorDetail: nack})
	s := openSotw(ctx, t, conn, testNode("ns"), ArcTypeURL)
	sr := s.recvRaw()
	s.send(&discovery.DiscoveryRequest{TypeUrl: ArcTypeURL, ResponseNonce: sr.Nonce, ErrorDetail: nack})

	// A NACK brings nothing back: each stream's next message is the next
	// change, and the server handled the NACK before sending it.
	v2 := slices.Clone(v1)
	v2[1] = arcEntry(0, q, "c", 5)
	lt.NamespaceView("ns", v2, 2)
	wantDelta(t, d.recv(), "ns", v2[1:2], nil)
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
	d := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil)
	wantDelta(t, d.recv(), "ns", v1, nil)
	s := openSotw(ctx, t, conn, testNode("ns"), ArcTypeURL)
	wantSotw(t, s.recv(), "ns", v1, 1)

	lt.NamespaceDeleted("ns")
	var all []ring.Range
	for _, e := range v1 {
		all = append(all, e.Range)
	}
	wantDelta(t, d.recv(), "ns", nil, all)
	if r := s.recv(); len(r.Resources) != 0 {
		t.Errorf("SotW after deletion: %v, want no arcs", r)
	}
	// Acknowledging, both streams learn the namespace is gone.
	if code := d.recvErr(); code != codes.NotFound {
		t.Errorf("delta: %v, want NotFound", code)
	}
	if code := s.recvErr(); code != codes.NotFound {
		t.Errorf("SotW: %v, want NotFound", code)
	}
	lt.Heartbeat("ns") // does not bring it back
	if code := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil).recvErr(); code != codes.NotFound {
		t.Errorf("new stream: %v, want NotFound", code)
	}
	// A lookup reconnecting with arcs of the deleted namespace is told to
	// remove them, then refused; one that names a namespace this node never
	// heard of is refused at once and keeps its table.
	known := map[string]string{wire.ArcName("ns", v1[0].Range): "1"}
	c := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, known)
	wantDelta(t, c.recv(), "ns", nil, all[:1])
	if code := c.recvErr(); code != codes.NotFound {
		t.Errorf("reconnected stream: %v, want NotFound", code)
	}
	known = map[string]string{wire.ArcName("never", v1[0].Range): "1"}
	if code := openDelta(ctx, t, conn, testNode("never"), ArcTypeURL, known).recvErr(); code != codes.NotFound {
		t.Errorf("unknown namespace: %v, want NotFound", code)
	}
	lt.NamespaceDeleted("ns") // twice is harmless
	if st := lt.Stats(); st.Namespaces != 1 {
		t.Errorf("stats %+v, want 1 namespace", st)
	}

	// Created again, the namespace is served afresh.
	lt.NamespaceView("ns", v1, 9)
	wantDelta(t, openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil).recv(), "ns", v1, nil)
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
		{"unknown namespace", testNode("nope"), ArcTypeURL, codes.NotFound},
		{"no namespace", &core.Node{Id: "x"}, ArcTypeURL, codes.InvalidArgument},
		{"namespace not a string", badMeta, ArcTypeURL, codes.InvalidArgument},
		{"unknown type", testNode("ns"), "type.googleapis.com/envoy.config.listener.v3.Listener", codes.InvalidArgument},
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
	c := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, nil)

	bad := slices.Clone(v1)
	bad[1] = arcEntry(0, q+1, "x", 9) // overlaps (q,2q]
	lt.NamespaceView("ns", bad, 2)
	lt.NamespaceView("new", nil, 1)
	if st := lt.Stats(); st.BadViews != 2 || st.Namespaces != 1 {
		t.Errorf("stats %+v, want 2 bad views, 1 namespace", st)
	}
	v3 := slices.Clone(v1)
	v3[2] = arcEntry(q, 2*q, "x", 10)
	lt.NamespaceView("ns", v3, 3)
	wantDelta(t, c.recv(), "ns", v3[2:3], nil)
}

// TestSameGenerationChange: should a view change an arc without changing
// its generation, clients still hear of it, under a version that is not
// the bare generation.
func TestSameGenerationChange(t *testing.T) {
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	v1 := fourArcs()
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcTypeURL, nil)
	wantDelta(t, c.recv(), "ns", v1, nil)

	v2 := slices.Clone(v1)
	v2[1].Addr = "moved:9090"
	lt.NamespaceView("ns", v2, 2)
	r := c.recv()
	var a fugev1.Arc
	if len(r.Resources) != 1 || r.Resources[0].Resource.UnmarshalTo(&a) != nil {
		t.Fatalf("push %v, want one arc", r)
	}
	if !proto.Equal(&a, wire.Arc("ns", v2[1])) || r.Resources[0].Version != "2.1" {
		t.Errorf("pushed %v@%s, want %v@2.1", &a, r.Resources[0].Version, v2[1])
	}
}
