package xds

import (
	"cmp"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
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
// (2q,3q] c. Their ends lie in blocks 0, 16, 32 and 48.
func fourArcs() []lease.Entry {
	return []lease.Entry{
		arcEntry(3*q, 0, "a", 1),
		arcEntry(0, q, "b", 2),
		arcEntry(q, 2*q, "", 3),
		arcEntry(2*q, 3*q, "c", 4),
	}
}

// evenArcs is a view of n equal arcs (n a power of two), arc i being
// (i*2^64/n, (i+1)*2^64/n] held by owner "o<i>" at generation i+1.
func evenArcs(n int) []lease.Entry {
	step := uint64(1) << 63 / uint64(n) * 2
	out := make([]lease.Entry, n)
	for i := range out {
		out[i] = arcEntry(uint64(i)*step, uint64(i+1)*step, "o"+strconv.Itoa(i), lease.Gen(i+1))
	}
	return out
}

// fakeClock is a clock that moves only when told to. Its timers fire,
// synchronously, in Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.done
		tm.done = true
		return was
	}
}

// Advance moves the clock and runs the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, tm := range c.timers {
		if !tm.done && !tm.at.After(c.now) {
			tm.done = true
			due = append(due, tm.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// Armed counts the timers that have neither fired nor been stopped.
func (c *fakeClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, tm := range c.timers {
		if !tm.done {
			n++
		}
	}
	return n
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
	return newTestServerClock(t, cfg, realClock{})
}

// newTestServerClock is newTestServer with the table's clock set.
func newTestServerClock(t *testing.T, cfg LeaseTableConfig, clk clock) (*LeaseTable, *grpc.ClientConn) {
	t.Helper()
	return newTestServerWith(t, cfg, clk, nil)
}

// newTestServerWith is newTestServerClock with set, if not nil, called on
// the table before it is served.
func newTestServerWith(t *testing.T, cfg LeaseTableConfig, clk clock, set func(*LeaseTable)) (*LeaseTable, *grpc.ClientConn) {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lt := newLeaseTable(cfg, clk)
	if set != nil {
		set(lt)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(lt.ServerOptions()...)
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

// openDelta opens a delta stream and sends its first request. A stream for
// the lease table's own types is opened as a Lookup's (serveLookup), unless
// ctx says otherwise (plainStream); other types go to go-control-plane's
// handler.
func openDelta(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node *core.Node, typeURL string, initial map[string]string) *deltaClient {
	t.Helper()
	if (typeURL == ArcBlockTypeURL || typeURL == HeartbeatTypeURL) && ctx.Value(plainKey{}) == nil {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.ClientKindKey, wire.ClientLookup)
	}
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

// cut cuts a view into its 64 blocks, each in ring order, the way a lookup
// expects them (the end's top 6 bits).
func cut(view []lease.Entry) [testBlocks][]lease.Entry {
	var out [testBlocks][]lease.Entry
	for _, e := range view {
		b := e.Range.End >> 58
		out[b] = append(out[b], e)
	}
	for _, es := range out {
		slices.SortFunc(es, func(a, b lease.Entry) int { return cmp.Compare(a.Range.End, b.Range.End) })
	}
	return out
}

// decodeBlock checks one block resource of ns and returns its number and
// arcs.
func decodeBlock(t *testing.T, ns, name string, a *anypb.Any) (uint32, []lease.Entry) {
	t.Helper()
	var blk fugev1.ArcBlock
	if err := a.UnmarshalTo(&blk); err != nil {
		t.Fatalf("resource %s: %v", name, err)
	}
	es, err := wire.EntriesFromBlock(ns, &blk)
	if err != nil {
		t.Fatalf("resource %s: %v", name, err)
	}
	if name != "" && name != wire.BlockName(ns, blk.Block) {
		t.Errorf("resource %s holds block %d", name, blk.Block)
	}
	return blk.Block, es
}

// at lists blocks and the LSN each should be sent at.
type at map[uint32]uint64

// allAt is every block at one LSN.
func allAt(lsn uint64) at {
	out := at{}
	for b := range uint32(testBlocks) {
		out[b] = lsn
	}
	return out
}

// blockNames names blocks of ns.
func blockNames(ns string, bs ...uint32) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = wire.BlockName(ns, b)
	}
	return out
}

// allBlockNames names the 64 blocks of ns.
func allBlockNames(ns string) []string {
	var out []string
	for b := range uint32(testBlocks) {
		out = append(out, wire.BlockName(ns, b))
	}
	return out
}

// wantDelta checks that a delta response sets exactly the blocks of want,
// each at its LSN and holding the arcs of view that end in it, and removes
// exactly the resources named in removed.
func wantDelta(t *testing.T, resp *discovery.DeltaDiscoveryResponse, ns string, view []lease.Entry, want at, removed []string) {
	t.Helper()
	if resp.TypeUrl != ArcBlockTypeURL {
		t.Fatalf("type %q, want %q", resp.TypeUrl, ArcBlockTypeURL)
	}
	blocks := cut(view)
	got := at{}
	for _, r := range resp.Resources {
		b, es := decodeBlock(t, ns, r.Name, r.Resource)
		if _, dup := got[b]; dup {
			t.Errorf("block %d sent twice", b)
		}
		v, err := strconv.ParseUint(r.Version, 10, 64)
		if err != nil {
			t.Errorf("block %d version %q: %v", b, r.Version, err)
		}
		got[b] = v
		if !slices.Equal(es, blocks[b]) {
			t.Errorf("block %d holds %v, want %v", b, es, blocks[b])
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("blocks at versions:\n got %v\nwant %v", got, want)
	}
	gotRemoved := slices.Sorted(slices.Values(resp.RemovedResources))
	wantRemoved := slices.Sorted(slices.Values(removed))
	if !slices.Equal(gotRemoved, wantRemoved) {
		t.Errorf("removed %v, want %v", gotRemoved, wantRemoved)
	}
}

// wantSotw checks that a SotW response is the whole view: the 64 blocks,
// each once, with version_info the LSN.
func wantSotw(t *testing.T, resp *discovery.DiscoveryResponse, ns string, view []lease.Entry, version uint64) {
	t.Helper()
	if resp.TypeUrl != ArcBlockTypeURL || resp.VersionInfo != strconv.FormatUint(version, 10) {
		t.Errorf("type %q version %q, want %q %d", resp.TypeUrl, resp.VersionInfo, ArcBlockTypeURL, version)
	}
	if len(resp.Resources) != testBlocks {
		t.Fatalf("got %d blocks, want %d", len(resp.Resources), testBlocks)
	}
	blocks := cut(view)
	seen := map[uint32]bool{}
	for _, r := range resp.Resources {
		b, es := decodeBlock(t, ns, "", r)
		if seen[b] {
			t.Errorf("block %d sent twice", b)
		}
		seen[b] = true
		if !slices.Equal(es, blocks[b]) {
			t.Errorf("block %d holds %v, want %v", b, es, blocks[b])
		}
	}
}

// table is a delta client's copy of a namespace's blocks.
type table struct {
	blocks   [testBlocks][]lease.Entry
	versions map[string]string
}

// apply applies a delta response to the table.
func (tb *table) apply(t *testing.T, ns string, resp *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	if tb.versions == nil {
		tb.versions = map[string]string{}
	}
	for _, r := range resp.Resources {
		b, es := decodeBlock(t, ns, r.Name, r.Resource)
		tb.blocks[b] = es
		tb.versions[r.Name] = r.Version
	}
	for _, name := range resp.RemovedResources {
		delete(tb.versions, name)
	}
}

// is reports whether the table holds exactly the view.
func (tb *table) is(view []lease.Entry) bool {
	want := cut(view)
	for b := range want {
		if !slices.Equal(tb.blocks[b], want[b]) {
			return false
		}
	}
	return len(tb.versions) == testBlocks
}

type plainKey struct{}

// plainStream marks ctx so that openDelta opens a stream as an Envoy or
// any other client would: served by go-control-plane's handler.
func plainStream(ctx context.Context) context.Context {
	return context.WithValue(ctx, plainKey{}, true)
}

// The views of these tests are small and most hear no ring size: they are
// served in the fewest blocks.
const (
	testBits   = wire.MinBlockBits
	testBlocks = 1 << testBits
)
