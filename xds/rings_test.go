package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// cacheVersion is the version_info of a namespace's cache of one type.
func cacheVersion(lt *LeaseTable, ns, typeURL string) string {
	lt.mu.RLock()
	defer lt.mu.RUnlock()
	c := lt.spaces[ns].caches[typeURL]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// envoyState is what an Envoy-like client holds: each type's resources by
// name, with their versions.
type envoyState struct {
	res      map[string]map[string]proto.Message
	versions map[string]map[string]string
}

func newEnvoyState() *envoyState {
	return &envoyState{res: map[string]map[string]proto.Message{}, versions: map[string]map[string]string{}}
}

func unpack(t *testing.T, typeURL string, a *anypb.Any) (string, proto.Message) {
	t.Helper()
	var m interface {
		proto.Message
		GetName() string
	}
	switch typeURL {
	case ListenerTypeURL:
		m = &listener.Listener{}
	case RouteTypeURL:
		m = &route.RouteConfiguration{}
	case ClusterTypeURL:
		m = &cluster.Cluster{}
	case EndpointTypeURL:
		var cla endpoint.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		return cla.ClusterName, &cla
	default:
		t.Fatalf("unexpected type %s", typeURL)
	}
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
	return m.GetName(), m
}

// sotw applies a SotW response: for every type, the response replaces the
// type's resources (for Routes and Endpoints this is what the client asked
// for, which is all there is here).
func (s *envoyState) sotw(t *testing.T, resp *discovery.DiscoveryResponse) {
	t.Helper()
	s.res[resp.TypeUrl] = map[string]proto.Message{}
	s.versions[resp.TypeUrl] = map[string]string{}
	for _, a := range resp.Resources {
		name, m := unpack(t, resp.TypeUrl, a)
		s.res[resp.TypeUrl][name] = m
		s.versions[resp.TypeUrl][name] = resp.VersionInfo
	}
}

func (s *envoyState) delta(t *testing.T, resp *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	if s.res[resp.TypeUrl] == nil {
		s.res[resp.TypeUrl] = map[string]proto.Message{}
		s.versions[resp.TypeUrl] = map[string]string{}
	}
	for _, r := range resp.Resources {
		name, m := unpack(t, resp.TypeUrl, r.Resource)
		if name != r.Name {
			t.Errorf("resource %s holds %s", r.Name, name)
		}
		s.res[resp.TypeUrl][name] = m
		s.versions[resp.TypeUrl][name] = r.Version
	}
	for _, name := range resp.RemovedResources {
		delete(s.res[resp.TypeUrl], name)
		delete(s.versions[resp.TypeUrl], name)
	}
}

// names lists a type's resources, sorted.
func (s *envoyState) names(typeURL string) []string {
	var out []string
	for name := range s.res[typeURL] {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// check compares what the client holds with the resources built for v,
// each at its version, and the ring it builds with the desired ring.
func (s *envoyState) check(t *testing.T, ns string, v lease.RingView, versions map[string]string, listeners ...string) {
	t.Helper()
	want, err := BuildEnvoyResources(ns, v, DefaultEnvoyListener)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]proto.Message{want.Listener.Name: want.Listener, want.APIListener.Name: want.APIListener}
	if got := s.names(ListenerTypeURL); !slices.Equal(got, listeners) {
		t.Errorf("listeners %v, want %v", got, listeners)
	}
	for _, name := range listeners {
		if !proto.Equal(s.res[ListenerTypeURL][name], byName[name]) {
			t.Errorf("listener %s differs", name)
		}
	}
	for typeURL, m := range map[string]proto.Message{RouteTypeURL: want.Route, ClusterTypeURL: want.Cluster, EndpointTypeURL: want.Endpoints} {
		if got := s.names(typeURL); !slices.Equal(got, []string{ns}) {
			t.Errorf("%s: resources %v, want [%s]", typeURL, got, ns)
		} else if !proto.Equal(s.res[typeURL][ns], m) {
			t.Errorf("%s: got %v\nwant %v", typeURL, s.res[typeURL][ns], m)
		}
	}
	for typeURL, ver := range versions {
		for name, got := range s.versions[typeURL] {
			if got != ver {
				t.Errorf("%s %s at version %s, want %s", typeURL, name, got, ver)
			}
		}
	}
	owners := make([]ring.Owner, len(v.Owners))
	for i, o := range v.Owners {
		owners[i] = ring.Owner{Name: o.Name, VNodes: o.VNodes}
	}
	desired, err := ring.New(owners)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.res[ClusterTypeURL][ns].(*cluster.Cluster)
	cla, _ := s.res[EndpointTypeURL][ns].(*endpoint.ClusterLoadAssignment)
	if err := sameRing(envoyRing(t, c, cla), desired); err != nil {
		t.Errorf("client's ring: %v", err)
	}
}

// namedSotw is a state-of-the-world client that keeps, per type, the names
// it subscribes to, and repeats them in every request, acknowledgements
// included, as xDS requires.
type namedSotw struct {
	*sotwClient
	names map[string][]string
}

func openNamedSotw(ctx context.Context, t *testing.T, conn *grpc.ClientConn) *namedSotw {
	t.Helper()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &namedSotw{&sotwClient{t: t, s: s}, map[string][]string{}}
}

// subscribe asks for the named resources of a type (none: wildcard); the
// first request of the stream carries the node.
func (c *namedSotw) subscribe(node *core.Node, typeURL string, names ...string) {
	c.t.Helper()
	c.names[typeURL] = names
	c.send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names})
}

func (c *namedSotw) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp := c.recvRaw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce,
		ResourceNames: c.names[resp.TypeUrl]})
	return resp
}

// recvAt receives the next response, which must be of typeURL at version
// (after what happened: when), and applies it to st.
func (c *namedSotw) recvAt(st *envoyState, typeURL, version, when string) {
	c.t.Helper()
	resp := c.recv()
	if resp.TypeUrl != typeURL || resp.VersionInfo != version {
		c.t.Fatalf("after %s: %s at %q, want %s at %s", when, resp.TypeUrl, resp.VersionInfo, typeURL, version)
	}
	st.sotw(c.t, resp)
}

// TestEnvoySotw follows an Envoy-like state-of-the-world ADS client:
// wildcard Listeners, then the Route the Listener names, wildcard
// Clusters, then the Endpoints the Cluster names; an owner joins and only
// the Endpoints are sent again.
func TestEnvoySotw(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	lt.NamespaceView("ns", fourArcs(), 1)
	v1 := apportioned(t, 16, "a", "b")
	lt.NamespaceRing("ns", v1, 7)

	c := openNamedSotw(ctx, t, conn)
	c.subscribe(testNode("ns"), ListenerTypeURL)
	st := newEnvoyState()
	lds := c.recv()
	st.sotw(t, lds)
	if len(lds.Resources) != 1 || lds.VersionInfo != "7" {
		t.Fatalf("LDS: %d listeners at %q, want 1 at 7", len(lds.Resources), lds.VersionInfo)
	}
	rdsName := hcmOf(t, st.res[ListenerTypeURL]["ns/envoy"].(*listener.Listener)).GetRds().GetRouteConfigName()
	c.subscribe(nil, RouteTypeURL, rdsName)
	st.sotw(t, c.recv())
	c.subscribe(nil, ClusterTypeURL)
	st.sotw(t, c.recv())
	edsName := st.res[ClusterTypeURL]["ns"].(*cluster.Cluster).GetEdsClusterConfig().GetServiceName()
	c.subscribe(nil, EndpointTypeURL, edsName)
	st.sotw(t, c.recv())
	st.check(t, "ns", v1, map[string]string{ListenerTypeURL: "7", RouteTypeURL: "7", ClusterTypeURL: "7", EndpointTypeURL: "7"}, "ns/envoy")

	// c joins at raft index 9: new endpoints, nothing else.
	fc.Advance(FlushInterval)
	v2 := apportioned(t, 16, "a", "b", "c")
	lt.NamespaceRing("ns", v2, 9)
	c.recvAt(st, EndpointTypeURL, "9", "the join")
	st.check(t, "ns", v2, map[string]string{ListenerTypeURL: "7", RouteTypeURL: "7", ClusterTypeURL: "7", EndpointTypeURL: "9"}, "ns/envoy")
	for _, typeURL := range []string{ListenerTypeURL, RouteTypeURL, ClusterTypeURL} {
		if v := cacheVersion(lt, "ns", typeURL); v != "7" {
			t.Errorf("%s republished at %s", typeURL, v)
		}
	}

	// The same view again changes nothing; a new header changes the route.
	fc.Advance(FlushInterval)
	lt.NamespaceRing("ns", v2, 10)
	fc.Advance(FlushInterval)
	v3 := v2
	v3.Header = "X-User"
	lt.NamespaceRing("ns", v3, 11)
	c.recvAt(st, RouteTypeURL, "11", "the header change")
	st.check(t, "ns", v3, map[string]string{RouteTypeURL: "11", EndpointTypeURL: "9"}, "ns/envoy")
	if s := lt.Stats(); s.Rings != 4 || s.RingPushes != 4 || s.BadRings != 0 || s.NACKs != 0 {
		t.Errorf("stats %+v, want 4 rings, 4 pushes", s)
	}
}

// TestGRPCSotw follows a gRPC-like client, which names every resource: it
// receives the API listener, never the Envoy one, and a request made
// before the namespace's ring is published waits for it.
func TestGRPCSotw(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	lt.NamespaceView("ns", fourArcs(), 1)

	c := openNamedSotw(ctx, t, conn)
	c.subscribe(testNode("ns"), ListenerTypeURL, "ns")
	v1 := apportioned(t, 64, "a", "b", "c")
	lt.NamespaceRing("ns", v1, 3)
	st := newEnvoyState()
	lds := c.recv()
	st.sotw(t, lds)
	if lds.VersionInfo != "3" || len(lds.Resources) != 1 {
		t.Fatalf("LDS %v", lds)
	}
	l := st.res[ListenerTypeURL]["ns"].(*listener.Listener)
	if l.ApiListener == nil {
		t.Fatalf("listener ns is not an API listener: %v", l)
	}
	for _, typeURL := range []string{RouteTypeURL, ClusterTypeURL, EndpointTypeURL} {
		c.subscribe(nil, typeURL, "ns")
		st.sotw(t, c.recv())
	}
	st.check(t, "ns", v1, map[string]string{ListenerTypeURL: "3", RouteTypeURL: "3", ClusterTypeURL: "3", EndpointTypeURL: "3"}, "ns")

	// A drain: the drained owner leaves the endpoints.
	fc.Advance(FlushInterval)
	v2 := apportioned(t, 64, "a", "c")
	lt.NamespaceRing("ns", v2, 5)
	c.recvAt(st, EndpointTypeURL, "5", "the drain")
	st.check(t, "ns", v2, map[string]string{EndpointTypeURL: "5"}, "ns")

	// A listener that does not exist is answered at once, with no
	// resource: Listeners are full-state, so the client learns it is not
	// there.
	c2 := openNamedSotw(ctx, t, conn)
	c2.subscribe(testNode("ns"), ListenerTypeURL, "nope")
	if resp := c2.recv(); resp.TypeUrl != ListenerTypeURL || len(resp.Resources) != 0 || resp.VersionInfo != "3" {
		t.Errorf("listener nope: %v, want an empty LDS response at 3", resp)
	}
}

// TestEnvoyDelta is TestEnvoySotw over delta ADS, with a reconnection and
// the namespace's deletion.
func TestEnvoyDelta(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	lt.NamespaceView("ns", fourArcs(), 1)
	v1 := apportioned(t, 4096, "a", "b", "c", "d", "e")
	lt.NamespaceRing("ns", v1, 12)

	c := openDelta(ctx, t, conn, testNode("ns"), ListenerTypeURL, nil)
	st := newEnvoyState()
	st.delta(t, c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteTypeURL, ResourceNamesSubscribe: []string{"ns"}})
	st.delta(t, c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterTypeURL})
	st.delta(t, c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointTypeURL, ResourceNamesSubscribe: []string{"ns"}})
	st.delta(t, c.recv())
	all12 := map[string]string{ListenerTypeURL: "12", RouteTypeURL: "12", ClusterTypeURL: "12", EndpointTypeURL: "12"}
	st.check(t, "ns", v1, all12, "ns/envoy")

	fc.Advance(FlushInterval)
	v2 := apportioned(t, 4096, "a", "b", "c", "d", "e", "f")
	lt.NamespaceRing("ns", v2, 15)
	resp := c.recv()
	if resp.TypeUrl != EndpointTypeURL || len(resp.Resources) != 1 || resp.Resources[0].Version != "15" {
		t.Fatalf("after the join: %v, want endpoints at 15", resp)
	}
	st.delta(t, resp)
	st.check(t, "ns", v2, map[string]string{ListenerTypeURL: "12", EndpointTypeURL: "15"}, "ns/envoy")

	// Reconnecting with the versions it holds, a client is sent nothing
	// new for the wildcard types (an empty first response) and only what
	// changed for the named ones.
	c2 := openDelta(ctx, t, conn, testNode("ns"), ListenerTypeURL, map[string]string{"ns/envoy": "12"})
	if resp := c2.recv(); len(resp.Resources) != 0 || len(resp.RemovedResources) != 0 {
		t.Errorf("reconnected LDS: %v, want an empty response", resp)
	}
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointTypeURL, ResourceNamesSubscribe: []string{"ns"},
		InitialResourceVersions: map[string]string{"ns": "12"}})
	if resp := c2.recv(); len(resp.Resources) != 1 || resp.Resources[0].Version != "15" {
		t.Errorf("reconnected EDS: %v, want endpoints at 15", resp)
	}

	// Deleted, the namespace's resources are removed (not acknowledged
	// here: the acknowledgement of a removal ends the stream).
	lt.NamespaceDeleted("ns")
	removed := map[string][]string{}
	for range 4 {
		resp := c.recvRaw()
		removed[resp.TypeUrl] = resp.RemovedResources
	}
	for typeURL, want := range map[string]string{ListenerTypeURL: "ns/envoy", RouteTypeURL: "ns", ClusterTypeURL: "ns", EndpointTypeURL: "ns"} {
		if !slices.Equal(removed[typeURL], []string{want}) {
			t.Errorf("%s: removed %v, want [%s]", typeURL, removed[typeURL], want)
		}
	}
}

// TestRingCoalescing: ring views are coalesced with the namespace's
// views, the first one published at once, the latest one winning; a
// heartbeat publishes what is kept; a bad one is counted and skipped.
func TestRingCoalescing(t *testing.T) {
	fc := newFakeClock()
	lt, _ := newTestServerClock(t, LeaseTableConfig{}, fc)
	lt.NamespaceView("ns", fourArcs(), 1)
	// As if an Envoy client had asked: rings are published as they come
	// (TestRingDeferredUntilWanted is the table before one has).
	mux{lt}.want(testNode("ns"), ClusterTypeURL)
	lt.NamespaceRing("ns", apportioned(t, 16, "a"), 2)
	if v := cacheVersion(lt, "ns", EndpointTypeURL); v != "2" {
		t.Fatalf("first ring published at %q, want at once at 2", v)
	}
	lt.NamespaceRing("ns", apportioned(t, 16, "a", "b"), 3)
	lt.NamespaceRing("ns", apportioned(t, 16, "a", "b", "c"), 4)
	if s := lt.Stats(); s.Rings != 3 || s.RingPushes != 1 || fc.Armed() != 1 || cacheVersion(lt, "ns", EndpointTypeURL) != "2" {
		t.Fatalf("within the interval: stats %+v, %d timers, endpoints at %s", s, fc.Armed(), cacheVersion(lt, "ns", EndpointTypeURL))
	}
	fc.Advance(FlushInterval - time.Nanosecond)
	if cacheVersion(lt, "ns", EndpointTypeURL) != "2" {
		t.Fatal("published before the interval")
	}
	fc.Advance(time.Nanosecond)
	if s := lt.Stats(); s.RingPushes != 2 || fc.Armed() != 0 || cacheVersion(lt, "ns", EndpointTypeURL) != "4" {
		t.Fatalf("after the interval: stats %+v, %d timers, endpoints at %s; want ring 4", s, fc.Armed(), cacheVersion(lt, "ns", EndpointTypeURL))
	}

	// A view and a ring kept together; the heartbeat publishes both.
	lt.NamespaceView("ns", withOwner(fourArcs(), 2, "z", 9), 5)
	lt.NamespaceRing("ns", apportioned(t, 16, "a", "c"), 6)
	if published(lt, "ns") != "1" || cacheVersion(lt, "ns", EndpointTypeURL) != "4" {
		t.Fatal("published within the interval")
	}
	lt.Heartbeat("ns")
	if published(lt, "ns") != "5" || cacheVersion(lt, "ns", EndpointTypeURL) != "6" || fc.Armed() != 0 {
		t.Fatalf("after the heartbeat: blocks at %s, endpoints at %s, %d timers; want 5, 6, none",
			published(lt, "ns"), cacheVersion(lt, "ns", EndpointTypeURL), fc.Armed())
	}

	// A bad ring is skipped; the last good one stays.
	fc.Advance(FlushInterval)
	bad := apportioned(t, 16, "a", "b")
	bad.Owners[0].VNodes++
	lt.NamespaceRing("ns", bad, 7)
	if s := lt.Stats(); s.BadRings != 1 || cacheVersion(lt, "ns", EndpointTypeURL) != "6" {
		t.Errorf("bad ring: stats %+v, endpoints at %s", s, cacheVersion(lt, "ns", EndpointTypeURL))
	}

	// A ring that arrives before the namespace's first view is published
	// at once (kept at once, if nobody has asked for it yet); the
	// namespace is served when its view arrives.
	lt.NamespaceRing("new", apportioned(t, 16, "a"), 3)
	if v := cacheVersion(lt, "new", ClusterTypeURL); v != "0" {
		t.Errorf("ring of a namespace nobody asked for published at %q", v)
	}
	mux{lt}.want(testNode("new"), ClusterTypeURL)
	if v := cacheVersion(lt, "new", ClusterTypeURL); v != "3" {
		t.Errorf("ring of a namespace without a view published at %q", v)
	}
	if s := lt.Stats(); s.Namespaces != 1 {
		t.Errorf("stats %+v, want only ns served", s)
	}
}

// TestRingDeferredUntilWanted: a namespace's rings are checked and kept,
// not built, until an Envoy or gRPC client asks for one of its Envoy
// types; that client then receives the latest good ring, and later rings
// are published as they come. A bad ring is refused when it arrives, as
// when rings are published; a Lookup, or a request naming another
// namespace, leaves the rings kept.
func TestRingDeferredUntilWanted(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	lt.NamespaceView("ns", fourArcs(), 1)
	lt.NamespaceRing("ns", apportioned(t, 16, "a"), 2)
	fc.Advance(FlushInterval)
	v3 := apportioned(t, 16, "a", "b")
	lt.NamespaceRing("ns", v3, 3)
	fc.Advance(FlushInterval)
	bad := apportioned(t, 16, "a", "b", "c")
	bad.Owners[1].Addr = "no port"
	lt.NamespaceRing("ns", bad, 4)
	fc.Advance(FlushInterval)
	badHeader := apportioned(t, 16, "a", "b", "c")
	badHeader.Header = "bad\nheader"
	lt.NamespaceRing("ns", badHeader, 5)
	fc.Advance(FlushInterval)
	unknown := func() {
		t.Helper()
		for _, typeURL := range []string{ListenerTypeURL, RouteTypeURL, ClusterTypeURL, EndpointTypeURL} {
			if v := cacheVersion(lt, "ns", typeURL); v != "0" {
				t.Fatalf("%s published at %q before anyone asked", typeURL, v)
			}
		}
	}
	unknown()
	if s := lt.Stats(); s.Rings != 4 || s.RingPushes != 0 || s.BadRings != 2 {
		t.Fatalf("stats %+v, want 4 rings, none pushed, 2 bad", s)
	}
	// Neither a Lookup's type nor another namespace's request publishes.
	mux{lt}.want(testNode("ns"), ArcBlockTypeURL)
	mux{lt}.want(testNode("other"), EndpointTypeURL)
	mux{lt}.want(&core.Node{Id: "no namespace"}, EndpointTypeURL)
	unknown()

	// A gRPC client asking for the endpoints first, then the rest,
	// receives ring 3, the last good one.
	c := openNamedSotw(ctx, t, conn)
	c.subscribe(testNode("ns"), EndpointTypeURL, "ns")
	st := newEnvoyState()
	st.sotw(t, c.recv())
	for _, typeURL := range []string{ListenerTypeURL, RouteTypeURL, ClusterTypeURL} {
		c.subscribe(nil, typeURL, "ns")
		st.sotw(t, c.recv())
	}
	st.check(t, "ns", v3, map[string]string{ListenerTypeURL: "3", RouteTypeURL: "3", ClusterTypeURL: "3", EndpointTypeURL: "3"}, "ns")
	if s := lt.Stats(); s.RingPushes != 1 || s.BadRings != 2 {
		t.Fatalf("stats %+v, want 1 ring pushed", s)
	}
	// From now on a ring is published as it comes.
	v6 := apportioned(t, 16, "a", "b", "c")
	lt.NamespaceRing("ns", v6, 6)
	c.recvAt(st, EndpointTypeURL, "6", "a join")
	st.check(t, "ns", v6, map[string]string{ListenerTypeURL: "3", EndpointTypeURL: "6"}, "ns")
	if s := lt.Stats(); s.RingPushes != 2 {
		t.Errorf("stats %+v, want 2 rings pushed", s)
	}
}
