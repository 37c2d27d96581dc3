package lb

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	deltasrv "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// defaultTestTimeout bounds every wait in these tests.
const defaultTestTimeout = 10 * time.Second

// xdsServer is a stand-in for the manager's xds package: delta ADS from
// go-control-plane over one LinearCache per type URL, resources named as
// the xds package names them, and a gate that makes it a standby.
type xdsServer struct {
	t     *testing.T
	ns    string
	arcs  *cache.LinearCache
	hbs   *cache.LinearCache
	hbSeq uint64

	mu      sync.Mutex
	gen     int64 // incarnation: stream ids restart with each
	addr    string
	gs      *grpc.Server
	cancel  context.CancelFunc
	leader  *string // non-nil: refuse streams, naming *leader
	hang    bool    // accept streams and never answer
	opens   int
	log     []record
	changed chan struct{}
}

// record is a request received or a response sent on a stream, identified
// across restarts as gen<<32 | id.
type record struct {
	stream int64
	req    *discovery.DeltaDiscoveryRequest
	resp   *discovery.DeltaDiscoveryResponse
}

var _ deltasrv.Callbacks = (*xdsServer)(nil)

// newXDSServer starts a server on 127.0.0.1 holding es and a heartbeat.
func newXDSServer(t *testing.T, ns string, es ...lease.Entry) *xdsServer {
	s := &xdsServer{
		t: t, ns: ns,
		arcs:    cache.NewLinearCache(ArcTypeURL),
		hbs:     cache.NewLinearCache(HeartbeatTypeURL),
		addr:    "127.0.0.1:0",
		changed: make(chan struct{}),
	}
	s.setArcs(es...)
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
		Caches:        map[string]cache.Cache{ArcTypeURL: s.arcs, HeartbeatTypeURL: s.hbs},
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

// arcResources converts entries to named Arc resources.
func (s *xdsServer) arcResources(es []lease.Entry) map[string]types.Resource {
	m := make(map[string]types.Resource, len(es))
	for _, e := range es {
		m[wire.ArcName(s.ns, e.Range)] = wire.Arc(s.ns, e)
	}
	return m
}

// setArcs replaces the lease table.
func (s *xdsServer) setArcs(es ...lease.Entry) { s.arcs.SetResources(s.arcResources(es)) }

// update sets arcs and deletes the arcs of the ranges in del, in one push.
func (s *xdsServer) update(set []lease.Entry, del ...ring.Range) {
	names := make([]string, len(del))
	for i, r := range del {
		names[i] = wire.ArcName(s.ns, r)
	}
	if err := s.arcs.UpdateResources(s.arcResources(set), names); err != nil {
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

// hangStreams makes the server accept streams and never answer them.
func (s *xdsServer) hangStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = true
}

func (s *xdsServer) OnDeltaStreamOpen(ctx context.Context, _ int64, _ string) error {
	s.mu.Lock()
	s.opens++
	leader, hang := s.leader, s.hang
	s.signalLocked()
	switch {
	case hang:
		<-ctx.Done()
		return ctx.Err()
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
// the latest stream and each was answered (ACK or NACK). The Lookup answers
// a response once it has dealt with it, so its effects are then visible.
func (s *xdsServer) waitAcked(typeURL string, n int) {
	s.t.Helper()
	s.wait(fmt.Sprintf("%d %s responses answered", n, typeURL), func(log []record, _ int) bool {
		sent, answered := map[string]bool{}, map[string]bool{}
		for _, r := range lastStream(log) {
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
