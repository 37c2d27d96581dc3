package lb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	deltasrv "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// defaultTestTimeout bounds every wait in these tests.
const defaultTestTimeout = 10 * time.Second

// xdsServer is a stand-in for the manager's xds package: delta ADS from
// go-control-plane over a blockCache of the 64 ArcBlock resources, named
// and versioned as the xds package names and versions them, and a
// LinearCache of the heartbeat; and a gate that makes it a standby.
type xdsServer struct {
	t      *testing.T
	ns     string
	blocks *blockCache
	hbs    *cache.LinearCache
	hbSeq  uint64

	mu        sync.Mutex
	gen       int64 // incarnation: stream ids restart with each
	addr      string
	gs        *grpc.Server
	cancel    context.CancelFunc
	leader    *string // non-nil: refuse streams, naming *leader
	toStandby string  // non-empty: refuse streams as a leader naming this standby
	hang      bool    // accept streams and never answer
	opens     int
	log       []record
	changed   chan struct{}
}

// record is a request received or a response sent on a stream, identified
// across restarts as gen<<32 | id.
type record struct {
	stream int64
	req    *discovery.DeltaDiscoveryRequest
	resp   *discovery.DeltaDiscoveryResponse
}

var _ deltasrv.Callbacks = (*xdsServer)(nil)

// newXDSServer starts a server on 127.0.0.1 holding the table es (in 64
// blocks, at LSN 1) and a heartbeat.
func newXDSServer(t *testing.T, ns string, es ...lease.Entry) *xdsServer {
	s := &xdsServer{
		t: t, ns: ns,
		blocks:  newBlockCache(),
		hbs:     cache.NewLinearCache(HeartbeatTypeURL),
		addr:    "127.0.0.1:0",
		changed: make(chan struct{}),
	}
	s.setTable(es...)
	s.heartbeat()
	s.start()
	t.Cleanup(s.stop)
	return s
}

// start serves on s.addr: a restart reuses the port.
func (s *xdsServer) start() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen %s: %v", s.addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mux := &cache.MuxCache{
		Classify:      func(r *cache.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cache.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cache.Cache{ArcBlockTypeURL: s.blocks, HeartbeatTypeURL: s.hbs},
	}
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, ads{srv: deltasrv.NewServer(ctx, mux, s)})
	s.mu.Lock()
	s.gen++
	s.addr, s.gs, s.cancel = ln.Addr().String(), gs, cancel
	s.mu.Unlock()
	go func() { _ = gs.Serve(ln) }()
}

// stop closes the listener and every stream.
func (s *xdsServer) stop() {
	s.mu.Lock()
	gs, cancel := s.gs, s.cancel
	s.gs, s.cancel = nil, nil
	s.mu.Unlock()
	if gs != nil {
		gs.Stop()
		cancel()
	}
}

func (s *xdsServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

type ads struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	srv deltasrv.Server
}

func (a ads) DeltaAggregatedResources(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return a.srv.DeltaStreamHandler(st, resource.AnyType)
}

// tableBlocks cuts the table es into the 64 blocks of namespace ns, each
// holding the arcs that end in it in ring order.
func tableBlocks(ns string, es []lease.Entry) map[uint32]*fugev1.ArcBlock {
	return tableBlocksOf(ns, testBits, es)
}

// tableBlocksOf cuts es into the 2^bits blocks of ns.
func tableBlocksOf(ns string, bits uint32, es []lease.Entry) map[uint32]*fugev1.ArcBlock {
	byBlock := make([][]lease.Entry, 1<<bits)
	for _, e := range es {
		b := wire.BlockOf(e.Range.End, bits)
		byBlock[b] = append(byBlock[b], e)
	}
	out := make(map[uint32]*fugev1.ArcBlock, len(byBlock))
	for b, bes := range byBlock {
		slices.SortFunc(bes, func(x, y lease.Entry) int { return cmp.Compare(x.Range.End, y.Range.End) })
		out[uint32(b)] = wire.ArcBlock(ns, bits, uint32(b), bes)
	}
	return out
}

// setTable makes es the lease table: the blocks that change are published
// at the next LSN, in one push.
func (s *xdsServer) setTable(es ...lease.Entry) { s.publish(tableBlocks(s.ns, es)) }

// publish sets the blocks in set (those that differ from what is
// published) and deletes the blocks del, in one push at the next LSN.
func (s *xdsServer) publish(set map[uint32]*fugev1.ArcBlock, del ...uint32) {
	named := make(map[string]*fugev1.ArcBlock, len(set))
	for b, m := range set {
		named[wire.BlockName(s.ns, b)] = m
	}
	names := make([]string, len(del))
	for i, b := range del {
		names[i] = wire.BlockName(s.ns, b)
	}
	if err := s.blocks.publish(named, names); err != nil {
		s.t.Fatal(err)
	}
}

// heartbeat rewrites the heartbeat resource.
func (s *xdsServer) heartbeat() {
	s.hbSeq++
	if err := s.hbs.UpdateResource(HeartbeatName(s.ns), &fugev1.Heartbeat{Namespace: s.ns, Seq: s.hbSeq}); err != nil {
		s.t.Fatal(err)
	}
}

// standby makes the server refuse streams as a standby naming leader.
func (s *xdsServer) standby(leader string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leader = &leader
}

// fallback reports whether a stream asks the leader to serve it.
func fallback(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(wire.LeaderFallbackKey)) > 0
}

// shedTo makes the server refuse streams as a leader that leaves Lookups
// to its standbys, naming standby.
func (s *xdsServer) shedTo(standby string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.toStandby = standby
}

// hangStreams makes the server accept streams and never answer them.
func (s *xdsServer) hangStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = true
}

func (s *xdsServer) OnDeltaStreamOpen(ctx context.Context, _ int64, _ string) error {
	s.mu.Lock()
	s.opens++
	leader, hang, toStandby := s.leader, s.hang, s.toStandby
	s.signalLocked()
	switch {
	case hang:
		<-ctx.Done()
		return ctx.Err()
	case toStandby != "" && !fallback(ctx):
		_ = grpc.SetTrailer(ctx, metadata.Pairs(StandbyTrailer, toStandby))
		return status.Errorf(codes.Unavailable, "the leader leaves Lookup streams to its standbys; standby: %q", toStandby)
	case leader == nil:
		return nil
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, *leader))
	return status.Errorf(codes.FailedPrecondition, "not the leader; leader: %q", *leader)
}

func (s *xdsServer) OnDeltaStreamClosed(int64, *corev3.Node) {}

func (s *xdsServer) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	s.mu.Lock()
	defer s.signalLocked()
	s.log = append(s.log, record{stream: s.gen<<32 | id, req: proto.Clone(req).(*discovery.DeltaDiscoveryRequest)})
	return nil
}

func (s *xdsServer) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	s.mu.Lock()
	defer s.signalLocked()
	s.log = append(s.log, record{stream: s.gen<<32 | id, resp: proto.Clone(resp).(*discovery.DeltaDiscoveryResponse)})
}

// signalLocked wakes waiters and unlocks.
func (s *xdsServer) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// wait waits until cond, called under the server's lock with its records,
// holds.
func (s *xdsServer) wait(what string, cond func(log []record, opens int) bool) {
	s.t.Helper()
	deadline := time.NewTimer(defaultTestTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok, ch := cond(s.log, s.opens), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			s.t.Fatalf("timed out waiting for the server to see %s", what)
		}
	}
}

// records returns a copy of the log.
func (s *xdsServer) records() []record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// lastStream returns the records of the latest stream.
func lastStream(log []record) []record {
	var last int64
	for _, r := range log {
		last = max(last, r.stream)
	}
	return slices.DeleteFunc(slices.Clone(log), func(r record) bool { return r.stream != last })
}

// sent counts the responses of type typeURL on the latest stream.
func (s *xdsServer) sent(typeURL string) int {
	n := 0
	for _, r := range lastStream(s.records()) {
		if r.resp != nil && r.resp.TypeUrl == typeURL {
			n++
		}
	}
	return n
}

// waitAcked waits until at least n responses of type typeURL were sent on
// the latest stream, opened since the server last started, and each was
// answered (ACK or NACK). The Lookup answers a response once it has dealt
// with it, so its effects are then visible.
func (s *xdsServer) waitAcked(typeURL string, n int) {
	s.t.Helper()
	s.wait(fmt.Sprintf("%d %s responses answered", n, typeURL), func(log []record, _ int) bool {
		sent, answered := map[string]bool{}, map[string]bool{}
		last := lastStream(log)
		if len(last) == 0 || last[0].stream>>32 != s.gen { // called under s.mu
			return false
		}
		for _, r := range last {
			switch {
			case r.resp != nil && r.resp.TypeUrl == typeURL:
				sent[r.resp.Nonce] = true
			case r.req != nil && r.req.TypeUrl == typeURL && r.req.ResponseNonce != "":
				answered[r.req.ResponseNonce] = true
			}
		}
		for nonce := range sent {
			if !answered[nonce] {
				return false
			}
		}
		return len(sent) >= n
	})
}

// blockCache is a delta-only go-control-plane cache of ArcBlock resources
// versioned as the manager versions them, by the decimal LSN of each
// block's last change (LinearCache versions delta resources by a hash of
// their bytes). It serves wildcard subscriptions only. Each watch is
// answered at most once, and the first request of a stream at once, even
// with nothing to send, as the xds package does.
type blockCache struct {
	mu      sync.Mutex
	lsn     uint64
	res     map[string]publishedBlock
	watches map[uint64]blockWatch
	nextID  uint64
}

type publishedBlock struct {
	msg *fugev1.ArcBlock
	res *discovery.Resource
}

type blockWatch struct {
	req *cache.DeltaRequest
	sub cache.Subscription
	out chan cache.DeltaResponse
}

var _ cache.Cache = (*blockCache)(nil)

func newBlockCache() *blockCache {
	return &blockCache{res: map[string]publishedBlock{}, watches: map[uint64]blockWatch{}}
}

// publish moves to the next LSN, sets the blocks of set that differ from
// those published, at that LSN, deletes the blocks named in del, and
// answers the watches now out of date.
func (c *blockCache) publish(set map[string]*fugev1.ArcBlock, del []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lsn++
	version := strconv.FormatUint(c.lsn, 10)
	for name, m := range set {
		if old, ok := c.res[name]; ok && proto.Equal(old.msg, m) {
			continue
		}
		a, err := anypb.New(m)
		if err != nil {
			return err
		}
		c.res[name] = publishedBlock{msg: m, res: &discovery.Resource{Name: name, Version: version, Resource: a}}
	}
	for _, name := range del {
		delete(c.res, name)
	}
	for id, w := range c.watches {
		if w.answer(c, false) {
			delete(c.watches, id)
		}
	}
	return nil
}

func (c *blockCache) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, out chan cache.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() != ArcBlockTypeURL || !sub.IsWildcard() {
		return nil, fmt.Errorf("test server: only wildcard %s subscriptions, not %q", ArcBlockTypeURL, req.GetTypeUrl())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := blockWatch{req: req, sub: sub, out: out}
	if w.answer(c, req.GetResponseNonce() == "") {
		return nil, nil
	}
	c.nextID++
	id := c.nextID
	c.watches[id] = w
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watches, id)
	}, nil
}

func (c *blockCache) CreateWatch(*cache.Request, cache.Subscription, chan cache.Response) (func(), error) {
	return nil, errors.New("test server: no state-of-the-world")
}

func (c *blockCache) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("test server: no fetch")
}

// answer sends the blocks the subscription lacks or holds at another
// version and the names of those it holds that are gone, if there are any
// or force is set, and reports whether it did. Called with c.mu held; the
// server's channel has room (one watch per type at a time).
func (w blockWatch) answer(c *blockCache, force bool) bool {
	known := w.sub.ReturnedResources()
	var changed, removed []string
	for name, p := range c.res {
		if v, ok := known[name]; !ok || v != p.res.Version {
			changed = append(changed, name)
		}
	}
	for name := range known {
		if _, ok := c.res[name]; !ok {
			removed = append(removed, name)
		}
	}
	if !force && len(changed) == 0 && len(removed) == 0 {
		return false
	}
	slices.Sort(changed)
	slices.Sort(removed)
	out := &blockResponse{
		req: w.req,
		resp: &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: strconv.FormatUint(c.lsn, 10),
			TypeUrl:           ArcBlockTypeURL,
			RemovedResources:  removed,
		},
		returned: maps.Clone(known),
	}
	if out.returned == nil {
		out.returned = map[string]string{}
	}
	for _, name := range changed {
		r := c.res[name].res
		out.resp.Resources = append(out.resp.Resources, r)
		out.returned[name] = r.Version
	}
	for _, name := range removed {
		delete(out.returned, name)
	}
	w.out <- out
	return true
}

// blockResponse is a delta response built by a blockCache for one watch.
type blockResponse struct {
	req      *cache.DeltaRequest
	resp     *discovery.DeltaDiscoveryResponse
	returned map[string]string
}

var _ cache.DeltaResponse = (*blockResponse)(nil)

func (r *blockResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return r.resp, nil
}
func (r *blockResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }
func (r *blockResponse) GetSystemVersion() (string, error)                 { return r.resp.SystemVersionInfo, nil }
func (r *blockResponse) GetResponseVersion() string                        { return r.resp.SystemVersionInfo }
func (r *blockResponse) GetNextVersionMap() map[string]string              { return r.returned }
func (r *blockResponse) GetReturnedResources() map[string]string           { return r.returned }
func (r *blockResponse) GetContext() context.Context                       { return context.Background() }
