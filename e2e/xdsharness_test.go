package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcxds "google.golang.org/grpc/xds" // registers the xds:/// resolver and ring_hash
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// This file holds the pieces of the xDS conformance test: a gRPC test
// service behind the ownerguard interceptor, an observer that records every
// (owner, generation) the manager ever assigned to each test key, and a
// grpc-go client that dials xds:///<ns> with a bootstrap naming the manager.

// whoMethod is the test service's one method: it answers with the server's
// name and the generation the guard admitted the key under.
const whoMethod = "/fuge.e2e.Who/Ask"

var whoDesc = grpc.ServiceDesc{
	ServiceName: "fuge.e2e.Who",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Ask", Handler: whoAskHandler}},
}

func whoAskHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, req any) (any, error) { return srv.(*whoServer).ask(ctx) }
	if icpt == nil {
		return h(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: whoMethod}, h)
}

// whoServer is one owner: a real gRPC server on 127.0.0.1 whose only
// service is guarded by an ownerguard interceptor over its Owner.
type whoServer struct {
	name    string
	owner   *ownerguard.Owner
	srv     *grpc.Server
	refused atomic.Uint64 // RPCs the guard refused as misdirected
	served  atomic.Uint64
}

func (s *whoServer) ask(ctx context.Context) (any, error) {
	h, ok := ownerguard.HandleFromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("no ownership handle in the handler's context")
	}
	s.served.Add(1)
	return wrapperspb.String(s.name + " " + strconv.FormatUint(uint64(h.Gen), 10)), nil
}

// count is the outermost interceptor: it counts the guard's refusals.
func (s *whoServer) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	if err != nil && ownerguard.IsMisdirected(err) {
		s.refused.Add(1)
	}
	return resp, err
}

// startWho starts an owner named name: it listens first, so that the Owner
// can tell the manager its address, then serves once the Owner is ready.
func startWho(t *testing.T, m *fugetest.Manager, name string) *whoServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &whoServer{name: name}
	s.owner = m.Owner(t, name, lis.Addr().String(), nil)
	g, err := ownerguard.NewGuard(s.owner, ownerguard.GuardConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(s.count, g.UnaryServerInterceptor()))
	s.srv.RegisterService(&whoDesc, s)
	go s.srv.Serve(lis)
	t.Cleanup(s.srv.Stop)
	return s
}

// stop ends the owner's incarnation (its leases are released) and then its
// server, as an orderly shutdown would.
func (s *whoServer) stop() {
	s.owner.Close()
	s.srv.Stop()
}

// xdsClient dials xds:///<ns> with grpc-go's own xDS resolver and a
// bootstrap that names the manager as the only xDS server and the
// namespace in the node metadata.
func xdsClient(t *testing.T, m *fugetest.Manager, node string) *grpc.ClientConn {
	t.Helper()
	b, err := grpcxds.NewXDSResolverWithConfigForTesting(xdsBootstrap(m.GRPCAddr, m.NS, node))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+m.NS, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// xdsBootstrap is a grpc-go xDS bootstrap (gRFC A27) for one manager.
func xdsBootstrap(managerAddr, ns, node string) []byte {
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      managerAddr,
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{
			"id":       node,
			"cluster":  ns,
			"metadata": map[string]any{xds.NamespaceMetadataKey: ns},
		},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// answer is who served an RPC, and under which generation.
type answer struct {
	owner string
	gen   lease.Gen
}

// ask sends one RPC for key, with key as the routing metadata.
func ask(ctx context.Context, cc *grpc.ClientConn, key string) (answer, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-fuge-key", key)
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, whoMethod, wrapperspb.String(key), out); err != nil {
		return answer{}, err
	}
	name, g, ok := strings.Cut(out.GetValue(), " ")
	gen, err := strconv.ParseUint(g, 10, 64)
	if !ok || err != nil {
		return answer{}, fmt.Errorf("malformed answer %q", out.GetValue())
	}
	return answer{name, lease.Gen(gen)}, nil
}

// ringObserver is the optional half of the manager's observer that hears
// the desired ring (the xDS lease table implements it).
type ringObserver interface {
	NamespaceRing(ns string, v lease.RingView, version uint64)
}

// grantLog stands in front of the manager's xDS lease table and records,
// for each test key, every (owner, generation) the lease table ever named
// for it, and the latest view and desired ring. Every call is forwarded.
type grantLog struct {
	inner  *xds.LeaseTable
	hashes []uint64 // the test keys' hashes
	byHash []int    // indices of hashes, by hash

	mu      sync.Mutex
	granted []map[answer]bool // per key
	view    []lease.Entry     // the latest lease table, in ring order; nil until asked for lv's
	lv      lease.View        // the latest lease table as the manager handed it over
	desired *ring.Ring        // the latest desired ring
	seq     uint64            // counts views and rings
	changed chan struct{}     // closed and replaced at every view or ring
}

var _ manager.ViewObserver = (*grantLog)(nil)

func newGrantLog(hashes []uint64) *grantLog {
	g := &grantLog{hashes: hashes, granted: make([]map[answer]bool, len(hashes)), changed: make(chan struct{})}
	for i := range g.granted {
		g.granted[i] = map[answer]bool{}
	}
	g.byHash = make([]int, len(hashes))
	for i := range g.byHash {
		g.byHash[i] = i
	}
	slices.SortFunc(g.byHash, func(a, b int) int { return cmp.Compare(hashes[a], hashes[b]) })
	return g
}

// NamespaceViewChanged records the view as the manager's FSM hands it to
// the lease table in production (manager.ViewObserver): by the ranges a
// commit changed, without listing the whole table. Taking the whole list
// instead (NamespaceView) made every commit at R = 65536 copy and walk
// 65,536 entries inside raft's apply, seconds under the race detector,
// and the owners' renewals then raced their own resends for minutes.
func (g *grantLog) NamespaceViewChanged(ns string, lv lease.View, changed []ring.Range, v uint64) {
	g.mu.Lock()
	note := func(i int) {
		if e, ok := lv.Lookup(g.hashes[i]); ok && e.Owner != "" {
			g.granted[i][answer{e.Owner, e.Gen}] = true
		}
	}
	if changed == nil {
		for i := range g.hashes {
			note(i)
		}
	}
	for _, r := range changed {
		g.eachIn(r, note)
	}
	g.lv, g.view = lv, nil
	g.bumpLocked()
	g.mu.Unlock()
	g.inner.NamespaceViewChanged(ns, lv, changed, v)
}

// eachIn calls fn with the index of every test key whose hash r contains.
func (g *grantLog) eachIn(r ring.Range, fn func(i int)) {
	if r.IsFull() {
		for i := range g.hashes {
			fn(i)
		}
		return
	}
	// (Start, End], or (Start, max] and [0, End] when it wraps past zero.
	span := func(lo, hi uint64, loOpen bool) {
		k, _ := slices.BinarySearchFunc(g.byHash, lo, func(i int, h uint64) int { return cmp.Compare(g.hashes[i], h) })
		for ; k < len(g.byHash) && g.hashes[g.byHash[k]] <= hi; k++ {
			if h := g.hashes[g.byHash[k]]; !loOpen || h != lo {
				fn(g.byHash[k])
			}
		}
	}
	if r.Start < r.End {
		span(r.Start, r.End, true)
		return
	}
	span(r.Start, ^uint64(0), true)
	span(0, r.End, false)
}

func (g *grantLog) NamespaceView(ns string, es []lease.Entry, v uint64) {
	g.mu.Lock()
	for i, h := range g.hashes {
		if e := entryAt(es, h); e.Owner != "" {
			g.granted[i][answer{e.Owner, e.Gen}] = true
		}
	}
	g.view, g.lv = slices.Clone(es), lease.View{}
	g.bumpLocked()
	g.mu.Unlock()
	g.inner.NamespaceView(ns, es, v)
}

func (g *grantLog) NamespaceDeleted(ns string) { g.inner.NamespaceDeleted(ns) }

func (g *grantLog) NamespaceRing(ns string, v lease.RingView, version uint64) {
	owners := make([]ring.Owner, len(v.Owners))
	for i, o := range v.Owners {
		owners[i] = ring.Owner{Name: o.Name, VNodes: o.VNodes}
	}
	var r *ring.Ring
	if len(owners) > 0 {
		var err error
		if r, err = ring.New(owners); err != nil {
			panic(err) // the manager validated it
		}
	}
	g.mu.Lock()
	g.desired = r
	g.bumpLocked()
	g.mu.Unlock()
	if ro, ok := any(g.inner).(ringObserver); ok {
		ro.NamespaceRing(ns, v, version)
	}
}

func (g *grantLog) bumpLocked() {
	g.seq++
	close(g.changed)
	g.changed = make(chan struct{})
}

// wasGranted reports whether the lease table ever named a for key i.
func (g *grantLog) wasGranted(i int, a answer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.granted[i][a]
}

// snapshot returns the latest view, desired ring, their sequence number
// and a channel closed at the next change.
func (g *grantLog) snapshot() ([]lease.Entry, *ring.Ring, uint64, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.view == nil && g.lv.Len() > 0 {
		g.view = g.lv.Entries() // once per change, outside the manager's apply
	}
	return g.view, g.desired, g.seq, g.changed
}

// entryAt returns the entry of a lease table (a partition of the circle in
// ring order: by End, the arc that wraps past zero first) that holds h.
func entryAt(es []lease.Entry, h uint64) lease.Entry {
	lo, hi := 0, len(es)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if es[m].Range.End < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(es) {
		lo = 0
	}
	if len(es) == 0 || !es[lo].Range.Contains(h) {
		panic(fmt.Sprintf("lease table not in ring order: no arc for %#x at %d", h, lo))
	}
	return es[lo]
}

// matchesDesired reports whether every arc of the view is held and by the
// owner the desired ring gives it, and which owners hold arcs. A view arc
// without a desired entry inside lies in the desired arc that ends at the
// next entry (LookupOwner of its end); a view arc with entries inside must
// have each entry's owner.
func matchesDesired(view []lease.Entry, d *ring.Ring) (bool, map[string]bool) {
	if d == nil || len(view) == 0 {
		return false, nil
	}
	owners := map[string]bool{}
	for _, e := range view {
		if e.Owner == "" || d.LookupOwner(e.Range.End) != e.Owner {
			return false, nil
		}
		owners[e.Owner] = true
	}
	names := d.Owners()
	for _, de := range d.Entries() {
		if entryAt(view, de.Hash).Owner != names[de.Owner].Name {
			return false, nil
		}
	}
	return true, owners
}
