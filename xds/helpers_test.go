package xds

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

const defaultTestTimeout = 10 * time.Second

// q is a quarter of the circle.
const q = uint64(1) << 62

func arcEntry(start, end uint64, owner string, gen lease.Gen) lease.Entry {
	e := lease.Entry{Range: ring.Range{Start: start, End: end}, Owner: owner, Gen: gen}
	if owner != "" {
		e.Addr = owner + ":8080"
	}
	return e
}

// fourArcs is a view of four quarters: (3q,0] a, (0,q] b, (q,2q] free,
// (2q,3q] c.
func fourArcs() []lease.Entry {
	return []lease.Entry{
		arcEntry(3*q, 0, "a", 1),
		arcEntry(0, q, "b", 2),
		arcEntry(q, 2*q, "", 3),
		arcEntry(2*q, 3*q, "c", 4),
	}
}

// testWriter sends logs to t.Log until the test ends.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

// newTestServer serves a new lease table on 127.0.0.1 and returns it with
// a client connection.
func newTestServer(t *testing.T, cfg LeaseTableConfig) (*LeaseTable, *grpc.ClientConn) {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lt := NewLeaseTable(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	lt.Register(s)
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-served })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lt, conn
}

func testNode(ns string) *core.Node {
	return &core.Node{Id: "lookup-1", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		NamespaceMetadataKey: structpb.NewStringValue(ns),
	}}}
}

// deltaClient is an ADS delta client that acknowledges what it receives.
type deltaClient struct {
	t *testing.T
	s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func openDelta(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node *core.Node, typeURL string, initial map[string]string) *deltaClient {
	t.Helper()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &deltaClient{t: t, s: s}
	c.send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, InitialResourceVersions: initial})
	return c
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if err := c.s.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recvRaw receives a response without acknowledging it.
func (c *deltaClient) recvRaw() *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	resp, err := c.s.Recv()
	if err != nil {
		c.t.Fatalf("delta recv: %v", err)
	}
	return resp
}

// recv receives and acknowledges a response.
func (c *deltaClient) recv() *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	resp := c.recvRaw()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce})
	return resp
}

// recvErr waits for the stream to fail and returns its status code.
func (c *deltaClient) recvErr() codes.Code {
	c.t.Helper()
	resp, err := c.s.Recv()
	if err == nil {
		c.t.Fatalf("delta recv: got %v, want an error", resp)
	}
	return status.Code(err)
}

// sotwClient is an ADS state-of-the-world client that acknowledges what it
// receives.
type sotwClient struct {
	t *testing.T
	s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func openSotw(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node *core.Node, typeURL string) *sotwClient {
	t.Helper()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &sotwClient{t: t, s: s}
	c.send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL})
	return c
}

func (c *sotwClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	if err := c.s.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *sotwClient) recvRaw() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.s.Recv()
	if err != nil {
		c.t.Fatalf("sotw recv: %v", err)
	}
	return resp
}

func (c *sotwClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp := c.recvRaw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce})
	return resp
}

func (c *sotwClient) recvErr() codes.Code {
	c.t.Helper()
	resp, err := c.s.Recv()
	if err == nil {
		c.t.Fatalf("sotw recv: got %v, want an error", resp)
	}
	return status.Code(err)
}

// wantDelta checks that a delta response sets exactly the arcs of want (at
// versions equal to their generations) and removes exactly the ranges of
// removed.
func wantDelta(t *testing.T, resp *discovery.DeltaDiscoveryResponse, ns string, want []lease.Entry, removed []ring.Range) {
	t.Helper()
	if resp.TypeUrl != ArcTypeURL {
		t.Fatalf("type %q, want %q", resp.TypeUrl, ArcTypeURL)
	}
	got := map[string]lease.Entry{}
	for _, r := range resp.Resources {
		var a fugev1.Arc
		if err := r.Resource.UnmarshalTo(&a); err != nil {
			t.Fatalf("resource %s: %v", r.Name, err)
		}
		e, err := wire.EntryFrom(&a)
		if err != nil {
			t.Fatalf("resource %s: %v", r.Name, err)
		}
		if a.Namespace != ns || r.Name != wire.ArcName(ns, e.Range) {
			t.Errorf("resource %s holds an arc of %q at %v", r.Name, a.Namespace, e.Range)
		}
		if r.Version != strconv.FormatUint(uint64(e.Gen), 10) {
			t.Errorf("resource %s has version %q, generation %d", r.Name, r.Version, e.Gen)
		}
		got[r.Name] = e
	}
	wantSet := map[string]lease.Entry{}
	for _, e := range want {
		wantSet[wire.ArcName(ns, e.Range)] = e
	}
	if !maps.Equal(got, wantSet) {
		t.Errorf("resources:\n got %v\nwant %v", got, wantSet)
	}
	var wantRemoved []string
	for _, r := range removed {
		wantRemoved = append(wantRemoved, wire.ArcName(ns, r))
	}
	gotRemoved := slices.Sorted(slices.Values(resp.RemovedResources))
	slices.Sort(wantRemoved)
	if !slices.Equal(gotRemoved, wantRemoved) {
		t.Errorf("removed %v, want %v", gotRemoved, wantRemoved)
	}
}

// wantSotw checks that a SotW response is exactly the view.
func wantSotw(t *testing.T, resp *discovery.DiscoveryResponse, ns string, view []lease.Entry, version uint64) {
	t.Helper()
	if resp.TypeUrl != ArcTypeURL || resp.VersionInfo != strconv.FormatUint(version, 10) {
		t.Errorf("type %q version %q, want %q %d", resp.TypeUrl, resp.VersionInfo, ArcTypeURL, version)
	}
	var got []*fugev1.Arc
	for _, r := range resp.Resources {
		var a fugev1.Arc
		if err := r.UnmarshalTo(&a); err != nil {
			t.Fatalf("resource: %v", err)
		}
		got = append(got, &a)
	}
	if len(got) != len(view) {
		t.Fatalf("got %d arcs, want %d: %v", len(got), len(view), got)
	}
	for _, e := range view {
		if !slices.ContainsFunc(got, func(a *fugev1.Arc) bool { return proto.Equal(a, wire.Arc(ns, e)) }) {
			t.Errorf("arc %v missing from %v", e, got)
		}
	}
}
