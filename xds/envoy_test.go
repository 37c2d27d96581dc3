package xds

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// sampleRing is a ring of 16 over three owners and one, d, that gets no
// virtual node.
func sampleRing() lease.RingView {
	return lease.RingView{RingSize: 16, Header: "X-Fuge-Key", Owners: []lease.RingOwner{
		{Name: "a", Addr: "10.0.0.1:8080", VNodes: 6},
		{Name: "b", Addr: "10.0.0.2:8080", VNodes: 5},
		{Name: "c", Addr: "[::1]:9000", VNodes: 5},
		{Name: "d", Addr: "10.0.0.4:8080", VNodes: 0},
	}}
}

// apportioned is the ring view the manager derives for owners named
// names, each at "<name>.example:<i>".
func apportioned(t testing.TB, size int, names ...string) lease.RingView {
	t.Helper()
	owners, err := ring.Apportion(names, size)
	if err != nil {
		t.Fatal(err)
	}
	v := lease.RingView{RingSize: size, Header: "X-Fuge-Key"}
	for i, o := range owners {
		v.Owners = append(v.Owners, lease.RingOwner{Name: o.Name, Addr: fmt.Sprintf("127.0.0.%d:%d", i%250+1, 9000+i), VNodes: o.VNodes})
	}
	return v
}

// hcmOf unpacks a Listener's HttpConnectionManager, from its API listener
// or its only filter.
func hcmOf(t *testing.T, l *listener.Listener) *hcm.HttpConnectionManager {
	t.Helper()
	a := l.GetApiListener().GetApiListener()
	if a == nil {
		if n := len(l.GetFilterChains()); n != 1 || len(l.FilterChains[0].Filters) != 1 {
			t.Fatalf("listener %s: want one filter chain with one filter, got %v", l.Name, l.FilterChains)
		}
		f := l.FilterChains[0].Filters[0]
		if f.Name != "envoy.filters.network.http_connection_manager" {
			t.Errorf("listener %s: filter %q", l.Name, f.Name)
		}
		a = f.GetTypedConfig()
	}
	var m hcm.HttpConnectionManager
	if err := a.UnmarshalTo(&m); err != nil {
		t.Fatalf("listener %s: %v", l.Name, err)
	}
	return &m
}

// checkHCM checks an HttpConnectionManager: router filter, RDS over ADS for
// route ns.
func checkHCM(t *testing.T, m *hcm.HttpConnectionManager, ns string) {
	t.Helper()
	rds := m.GetRds()
	if rds.GetRouteConfigName() != ns || rds.GetConfigSource().GetAds() == nil ||
		rds.GetConfigSource().GetResourceApiVersion() != core.ApiVersion_V3 {
		t.Errorf("RDS = %v, want route %q over ADS, V3", rds, ns)
	}
	fs := m.GetHttpFilters()
	if len(fs) != 1 || fs[0].Name != "envoy.filters.http.router" {
		t.Fatalf("http filters %v, want the router alone", fs)
	}
	if err := fs[0].GetTypedConfig().UnmarshalTo(&router.Router{}); err != nil {
		t.Errorf("router filter config: %v", err)
	}
}

// envoyRing builds the ring Envoy (and gRPC) build from a cluster and its
// load assignment.
func envoyRing(t testing.TB, c *cluster.Cluster, cla *endpoint.ClusterLoadAssignment) *ring.Ring {
	t.Helper()
	var hosts []ring.EnvoyHost
	for _, loc := range cla.GetEndpoints() {
		for _, ep := range loc.GetLbEndpoints() {
			key := ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue()
			hosts = append(hosts, ring.EnvoyHost{Key: key, Weight: ep.GetLoadBalancingWeight().GetValue()})
		}
	}
	rh := c.GetRingHashLbConfig()
	r, err := ring.BuildEnvoy(hosts, rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameRing reports the first difference between two rings, entry for
// entry: position, owner name and index.
func sameRing(got, want *ring.Ring) error {
	if got.Len() != want.Len() {
		return fmt.Errorf("%d entries, want %d", got.Len(), want.Len())
	}
	for p := range got.Len() {
		g, w := got.Entry(p), want.Entry(p)
		if g.Hash != w.Hash || g.Index != w.Index || got.OwnerName(p) != want.OwnerName(p) {
			return fmt.Errorf("entry %d is %016x %s#%d, want %016x %s#%d",
				p, g.Hash, got.OwnerName(p), g.Index, w.Hash, want.OwnerName(p), w.Index)
		}
	}
	return nil
}

func TestBuildEnvoyResources(t *testing.T) {
	v := sampleRing()
	r, err := BuildEnvoyResources("orders", v, "0.0.0.0:10001")
	if err != nil {
		t.Fatal(err)
	}

	// The Listener for Envoy, on the configured address.
	if r.Listener.Name != "orders/envoy" || r.Listener.Name != EnvoyListenerName("orders") {
		t.Errorf("Envoy listener named %q", r.Listener.Name)
	}
	sa := r.Listener.GetAddress().GetSocketAddress()
	if sa.GetAddress() != "0.0.0.0" || sa.GetPortValue() != 10001 || sa.GetProtocol() != core.SocketAddress_TCP {
		t.Errorf("Envoy listener address %v", sa)
	}
	if r.Listener.ApiListener != nil {
		t.Error("the Envoy listener is an API listener")
	}
	checkHCM(t, hcmOf(t, r.Listener), "orders")

	// The API listener for gRPC, named after the namespace.
	if r.APIListener.Name != "orders" || r.APIListener.Address != nil || len(r.APIListener.FilterChains) != 0 {
		t.Errorf("API listener %v", r.APIListener)
	}
	checkHCM(t, hcmOf(t, r.APIListener), "orders")

	// The route.
	rc := r.Route
	if rc.Name != "orders" || len(rc.VirtualHosts) != 1 {
		t.Fatalf("route %v", rc)
	}
	vh := rc.VirtualHosts[0]
	if !slices.Equal(vh.Domains, []string{"*"}) || len(vh.Routes) != 1 {
		t.Fatalf("virtual host %v", vh)
	}
	rt := vh.Routes[0]
	if rt.GetMatch().GetPrefix() != "/" {
		t.Errorf("route match %v, want prefix /", rt.GetMatch())
	}
	act := rt.GetRoute()
	if act.GetCluster() != "orders" {
		t.Errorf("route to %q", act.GetCluster())
	}
	hp := act.GetHashPolicy()
	if len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-fuge-key" || !hp[0].Terminal || hp[0].GetHeader().GetRegexRewrite() != nil {
		t.Errorf("hash policy %v, want header x-fuge-key, terminal", hp)
	}
	wantRetry := &routeRetry{
		on: "retriable-status-codes,unavailable", codes: []uint32{421}, n: wrapperspb.UInt32(5),
		base: durationpb.New(RetryBaseInterval), max: durationpb.New(RetryMaxInterval),
	}
	rp := act.GetRetryPolicy()
	if rp.GetRetryOn() != wantRetry.on || !slices.Equal(rp.GetRetriableStatusCodes(), wantRetry.codes) ||
		!proto.Equal(rp.GetNumRetries(), wantRetry.n) || !proto.Equal(rp.GetRetryBackOff().GetBaseInterval(), wantRetry.base) ||
		!proto.Equal(rp.GetRetryBackOff().GetMaxInterval(), wantRetry.max) {
		t.Errorf("retry policy %v", rp)
	}
	if RetryBaseInterval.Milliseconds() != 25 || RetryMaxInterval.Milliseconds() != 250 {
		t.Errorf("back-off %v..%v, want 25ms..250ms", RetryBaseInterval, RetryMaxInterval)
	}

	// The cluster.
	c := r.Cluster
	if c.Name != "orders" || c.GetType() != cluster.Cluster_EDS || c.GetLbPolicy() != cluster.Cluster_RING_HASH {
		t.Errorf("cluster %q type %v policy %v", c.Name, c.GetType(), c.GetLbPolicy())
	}
	if eds := c.GetEdsClusterConfig(); eds.GetEdsConfig().GetAds() == nil || eds.GetServiceName() != "orders" ||
		eds.GetEdsConfig().GetResourceApiVersion() != core.ApiVersion_V3 {
		t.Errorf("EDS config %v", eds)
	}
	rh := c.GetRingHashLbConfig()
	if rh.GetHashFunction() != cluster.Cluster_RingHashLbConfig_XX_HASH ||
		rh.GetMinimumRingSize().GetValue() != 16 || rh.GetMaximumRingSize().GetValue() != 16 {
		t.Errorf("ring hash config %v, want XX_HASH, 16..16", rh)
	}
	if len(c.HealthChecks) != 0 || c.OutlierDetection != nil || c.CommonLbConfig != nil {
		t.Errorf("cluster has health checks, outlier detection or common LB config: %v", c)
	}

	// The endpoints: one locality, a, b, c with their weights, d left out.
	cla := r.Endpoints
	if cla.ClusterName != "orders" || len(cla.Endpoints) != 1 {
		t.Fatalf("load assignment %v", cla)
	}
	loc := cla.Endpoints[0]
	if loc.GetLoadBalancingWeight().GetValue() != 1 || loc.Locality == nil || loc.Priority != 0 {
		t.Errorf("locality %v, want weight 1, priority 0", loc)
	}
	type ep struct {
		key, host string
		port      uint32
		weight    uint32
	}
	var got []ep
	for _, e := range loc.LbEndpoints {
		sa := e.GetEndpoint().GetAddress().GetSocketAddress()
		got = append(got, ep{
			key:  e.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue(),
			host: sa.GetAddress(), port: sa.GetPortValue(), weight: e.GetLoadBalancingWeight().GetValue(),
		})
		if e.HealthStatus != core.HealthStatus_UNKNOWN {
			t.Errorf("endpoint %v has a health status", e)
		}
	}
	want := []ep{{"a", "10.0.0.1", 8080, 6}, {"b", "10.0.0.2", 8080, 5}, {"c", "::1", 9000, 5}}
	if !slices.Equal(got, want) {
		t.Errorf("endpoints %v, want %v", got, want)
	}

	for _, m := range []interface{ ValidateAll() error }{r.Listener, r.APIListener, r.Route, r.Cluster, r.Endpoints, hcmOf(t, r.Listener)} {
		if err := m.ValidateAll(); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
}

type routeRetry struct {
	on        string
	codes     []uint32
	n         *wrapperspb.UInt32Value
	base, max *durationpb.Duration
}

func TestBuildEnvoyResourcesNoOwners(t *testing.T) {
	r, err := BuildEnvoyResources("ns", lease.RingView{RingSize: 4096, Header: "X-Fuge-Key"}, DefaultEnvoyListener)
	if err != nil {
		t.Fatal(err)
	}
	if r.Endpoints.ClusterName != "ns" || len(r.Endpoints.Endpoints) != 0 {
		t.Errorf("load assignment %v, want no endpoints", r.Endpoints)
	}
	if sa := r.Listener.GetAddress().GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 10000 {
		t.Errorf("listener address %v, want the default", sa)
	}
}

// The ring Envoy and gRPC build from the published cluster and endpoints is
// the manager's desired ring, entry for entry, whatever the order of the
// endpoints.
func TestEnvoyRingIsDesiredRing(t *testing.T) {
	for _, tc := range []struct {
		size  int
		names []string
	}{
		{16, []string{"a"}},
		{16, []string{"a", "b", "c"}},
		{256, []string{"owner-1", "owner-2", "owner-3", "owner-4", "owner-5"}},
		{4096, []string{"x", "y", "z", "w", "v", "u", "t"}},
		{65536, []string{"p", "q", "r"}},
		{8, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}}, // two owners get no entry
	} {
		t.Run(fmt.Sprintf("R=%d/n=%d", tc.size, len(tc.names)), func(t *testing.T) {
			v := apportioned(t, tc.size, tc.names...)
			r, err := BuildEnvoyResources("ns", v, DefaultEnvoyListener)
			if err != nil {
				t.Fatal(err)
			}
			owners := make([]ring.Owner, len(v.Owners))
			for i, o := range v.Owners {
				owners[i] = ring.Owner{Name: o.Name, VNodes: o.VNodes}
			}
			desired, err := ring.New(owners)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRing(envoyRing(t, r.Cluster, r.Endpoints), desired); err != nil {
				t.Error(err)
			}
			eps := r.Endpoints.Endpoints[0].LbEndpoints
			slices.Reverse(eps)
			if err := sameRing(envoyRing(t, r.Cluster, r.Endpoints), desired); err != nil {
				t.Errorf("endpoints reversed: %v", err)
			}
		})
	}
}

func TestBuildEnvoyResourcesRefuses(t *testing.T) {
	good := sampleRing
	for _, tc := range []struct {
		name     string
		ns       string
		mut      func(*lease.RingView)
		listener string
		want     string
	}{
		{"no namespace", "", nil, DefaultEnvoyListener, "namespace name"},
		{"ring size", "ns", func(v *lease.RingView) { v.RingSize = 12 }, DefaultEnvoyListener, "ring size 12"},
		{"sum", "ns", func(v *lease.RingView) { v.Owners[0].VNodes++ }, DefaultEnvoyListener, "sum to 17"},
		{"twice", "ns", func(v *lease.RingView) { v.Owners[1].Name = "a" }, DefaultEnvoyListener, `"a" listed twice`},
		{"empty name", "ns", func(v *lease.RingView) { v.Owners[1].Name = "" }, DefaultEnvoyListener, "owner name"},
		{"negative", "ns", func(v *lease.RingView) { v.Owners[0].VNodes, v.Owners[3].VNodes = 7, -1 }, DefaultEnvoyListener, "-1 virtual nodes"},
		{"no header", "ns", func(v *lease.RingView) { v.Header = "" }, DefaultEnvoyListener, "no routing header"},
		{"owner address", "ns", func(v *lease.RingView) { v.Owners[2].Addr = "10.0.0.3" }, DefaultEnvoyListener, `owner "c"`},
		{"owner port", "ns", func(v *lease.RingView) { v.Owners[2].Addr = "10.0.0.3:70000" }, DefaultEnvoyListener, `owner "c"`},
		{"listener", "ns", nil, "localhost", "Envoy listener"},
		{"header Envoy refuses", "ns", func(v *lease.RingView) { v.Header = "x\nkey" }, DefaultEnvoyListener, "RouteConfiguration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := good()
			if tc.mut != nil {
				tc.mut(&v)
			}
			_, err := BuildEnvoyResources(tc.ns, v, tc.listener)
			if !errors.Is(err, ErrInvalidRing) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %v mentioning %q", err, ErrInvalidRing, tc.want)
			}
			// A ring kept unbuilt (deferRingLocked) is refused alike.
			if cerr := checkRing(tc.ns, v, tc.listener); cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("checkRing: %v, want %v", cerr, err)
			}
		})
	}
}

// TestCheckRingAccepts: what BuildEnvoyResources builds, checkRing passes,
// an owner without virtual nodes included whatever its address (both
// leave it out).
func TestCheckRingAccepts(t *testing.T) {
	v := sampleRing()
	if _, err := BuildEnvoyResources("ns", v, DefaultEnvoyListener); err != nil {
		t.Fatal(err)
	}
	if err := checkRing("ns", v, DefaultEnvoyListener); err != nil {
		t.Errorf("checkRing: %v", err)
	}
	v.Owners = append(v.Owners, lease.RingOwner{Name: "idle", Addr: "no port", VNodes: 0})
	if _, err := BuildEnvoyResources("ns", v, DefaultEnvoyListener); err != nil {
		t.Fatal(err)
	}
	if err := checkRing("ns", v, DefaultEnvoyListener); err != nil {
		t.Errorf("checkRing with an owner without entries: %v", err)
	}
}
