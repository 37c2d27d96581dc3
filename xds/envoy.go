package xds

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	cpresource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Type URLs of the Envoy resources, served to Envoy and to proxyless gRPC.
const (
	ListenerTypeURL = cpresource.ListenerType
	RouteTypeURL    = cpresource.RouteType
	ClusterTypeURL  = cpresource.ClusterType
	EndpointTypeURL = cpresource.EndpointType
)

// DefaultEnvoyListener is the address of the Listener that Envoy nodes are
// given when LeaseTableConfig.EnvoyListener is empty.
const DefaultEnvoyListener = "127.0.0.1:10000"

// The route's retry policy. Ownerguard refuses a misdirected HTTP request
// with 421 and a misdirected gRPC call with UNAVAILABLE; either is retried
// after a back-off that doubles from RetryBaseInterval to RetryMaxInterval
// (with Envoy's and gRPC's jitter), by when the new endpoints have usually
// arrived and the request hashes to the new owner.
const (
	RetryOn           = "retriable-status-codes,unavailable"
	RetryStatusCode   = 421
	RetryNumRetries   = 5
	RetryBaseInterval = 25 * time.Millisecond
	RetryMaxInterval  = 250 * time.Millisecond
)

// Names of the filters in the Listeners.
const (
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	routerFilterName = "envoy.filters.http.router"
	hashKeyFilter    = "envoy.lb"
	hashKeyField     = "hash_key"
)

// ErrInvalidRing is wrapped by the errors of BuildEnvoyResources.
var ErrInvalidRing = errors.New("xds: invalid namespace ring")

// EnvoyListenerName is the name of the Listener of namespace ns that Envoy
// nodes receive: "<ns>/envoy". The API listener for gRPC is named ns.
func EnvoyListenerName(ns string) string { return ns + "/envoy" }

// EnvoyResources are one namespace's resources for Envoy and proxyless
// gRPC. Route, Cluster and Endpoints are shared by both; each client gets
// its own Listener. See the package documentation.
type EnvoyResources struct {
	// Listener is the one Envoy nodes receive, named EnvoyListenerName(ns),
	// bound to the configured address: HttpConnectionManager with the
	// router filter and RDS over ADS for Route.
	Listener *listener.Listener
	// APIListener, named ns, is what a gRPC client dialing xds:///ns asks
	// for: the same HttpConnectionManager as an API listener. It is sent
	// only to clients that name it (gRPC does; Envoy subscribes to every
	// Listener and would refuse an API listener).
	APIListener *listener.Listener
	// Route, named ns: one virtual host for every domain, prefix "/" to the
	// cluster, hashing the routing header (terminal), with the retry policy
	// above.
	Route *route.RouteConfiguration
	// Cluster, named ns: EDS over ADS, RING_HASH with XX_HASH and
	// minimum_ring_size = maximum_ring_size = R, no health checks, no
	// outlier detection.
	Cluster *cluster.Cluster
	// Endpoints, for cluster ns: one locality of weight 1 holding an
	// endpoint per owner of the desired ring that has virtual nodes, with
	// load_balancing_weight V_h and filter_metadata["envoy.lb"]["hash_key"]
	// its name, sorted by name.
	Endpoints *endpoint.ClusterLoadAssignment
}

// BuildEnvoyResources builds a namespace's resources from its ring view;
// listenerAddr is the Envoy Listener's host:port. Every resource, and each
// message packed inside one, has passed its ValidateAll. An owner with no
// virtual nodes is left out (Envoy and gRPC refuse a weight of 0, and it
// has no ring entry to lose). The view's ring size must be a valid ring
// size, its owners' names distinct and their counts sum to it, and every
// owner's address a host:port.
func BuildEnvoyResources(ns string, v lease.RingView, listenerAddr string) (*EnvoyResources, error) {
	if err := validateRing(ns, v); err != nil {
		return nil, err
	}
	lisAddr, err := socketAddress(listenerAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: Envoy listener: %w", ErrInvalidRing, err)
	}
	manager := &hcm.HttpConnectionManager{
		StatPrefix: "fuge",
		CodecType:  hcm.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: ns,
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       routerFilterName,
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})},
		}},
	}
	if err := manager.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%w: HttpConnectionManager: %w", ErrInvalidRing, err)
	}
	packed, err := anypb.New(manager)
	if err != nil {
		return nil, fmt.Errorf("xds: packing HttpConnectionManager: %w", err)
	}
	r := &EnvoyResources{
		Listener: &listener.Listener{
			Name:    EnvoyListenerName(ns),
			Address: lisAddr,
			FilterChains: []*listener.FilterChain{{
				Filters: []*listener.Filter{{
					Name:       hcmFilterName,
					ConfigType: &listener.Filter_TypedConfig{TypedConfig: packed},
				}},
			}},
		},
		APIListener: &listener.Listener{
			Name:        ns,
			ApiListener: &listener.ApiListener{ApiListener: packed},
		},
		Route:     routeConfig(ns, v.Header),
		Cluster:   ringCluster(ns, v.RingSize),
		Endpoints: &endpoint.ClusterLoadAssignment{ClusterName: ns},
	}
	var eps []*endpoint.LbEndpoint
	for _, o := range v.Owners {
		if o.VNodes == 0 {
			continue
		}
		addr, err := socketAddress(o.Addr)
		if err != nil {
			return nil, fmt.Errorf("%w: owner %q: %w", ErrInvalidRing, o.Name, err)
		}
		eps = append(eps, &endpoint.LbEndpoint{
			HostIdentifier:      &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: addr}},
			LoadBalancingWeight: wrapperspb.UInt32(uint32(o.VNodes)),
			Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
				hashKeyFilter: {Fields: map[string]*structpb.Value{hashKeyField: structpb.NewStringValue(o.Name)}},
			}},
		})
	}
	if len(eps) > 0 {
		r.Endpoints.Endpoints = []*endpoint.LocalityLbEndpoints{{
			// gRPC refuses a locality without an ID; an empty one is the
			// same for Envoy as none.
			Locality:            &core.Locality{},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints:         eps,
		}}
	}
	for _, m := range []interface {
		proto.Message
		ValidateAll() error
	}{r.Listener, r.APIListener, r.Route, r.Cluster, r.Endpoints} {
		if err := m.ValidateAll(); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRing, m.ProtoReflect().Descriptor().Name(), err)
		}
	}
	return r, nil
}

// validateRing checks a ring view against the rules that make Envoy's and
// gRPC's rings equal to the manager's: R a valid ring size, distinct
// nonempty names, counts that sum to R.
func validateRing(ns string, v lease.RingView) error {
	if ns == "" || !utf8.ValidString(ns) {
		return fmt.Errorf("%w: namespace name %q", ErrInvalidRing, ns)
	}
	if !ring.ValidRingSize(v.RingSize) {
		return fmt.Errorf("%w: ring size %d", ErrInvalidRing, v.RingSize)
	}
	if v.Header == "" {
		return fmt.Errorf("%w: no routing header", ErrInvalidRing)
	}
	sum := 0
	seen := make(map[string]bool, len(v.Owners))
	for _, o := range v.Owners {
		switch {
		case o.Name == "" || !utf8.ValidString(o.Name):
			return fmt.Errorf("%w: owner name %q", ErrInvalidRing, o.Name)
		case seen[o.Name]:
			return fmt.Errorf("%w: owner %q listed twice", ErrInvalidRing, o.Name)
		case o.VNodes < 0:
			return fmt.Errorf("%w: owner %q has %d virtual nodes", ErrInvalidRing, o.Name, o.VNodes)
		}
		seen[o.Name] = true
		sum += o.VNodes
	}
	if len(v.Owners) > 0 && sum != v.RingSize {
		return fmt.Errorf("%w: virtual nodes sum to %d, ring size is %d", ErrInvalidRing, sum, v.RingSize)
	}
	return nil
}

func routeConfig(ns, header string) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name: ns,
		VirtualHosts: []*route.VirtualHost{{
			Name:    ns,
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: ns},
					HashPolicy: []*route.RouteAction_HashPolicy{{
						// Header names are case-insensitive; HTTP/2 and
						// gRPC metadata carry them in lower case.
						PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{
							HeaderName: strings.ToLower(header),
						}},
						Terminal: true,
					}},
					RetryPolicy: &route.RetryPolicy{
						RetryOn:              RetryOn,
						RetriableStatusCodes: []uint32{RetryStatusCode},
						NumRetries:           wrapperspb.UInt32(RetryNumRetries),
						RetryBackOff: &route.RetryPolicy_RetryBackOff{
							BaseInterval: durationpb.New(RetryBaseInterval),
							MaxInterval:  durationpb.New(RetryMaxInterval),
						},
					},
				}},
			}},
		}},
	}
}

func ringCluster(ns string, size int) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 ns,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: ns},
		LbPolicy:             cluster.Cluster_RING_HASH,
		LbConfig: &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(uint64(size)),
			MaximumRingSize: wrapperspb.UInt64(uint64(size)),
			HashFunction:    cluster.Cluster_RingHashLbConfig_XX_HASH,
		}},
		// No HealthChecks and no OutlierDetection: either would take hosts
		// out of the ring, and Envoy would build a different one.
	}
}

// adsSource is a config source of ADS, API version 3.
func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

// socketAddress parses host:port into a TCP socket address.
func socketAddress(hostPort string) (*core.Address, error) {
	host, port, err := splitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Protocol:      core.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}, nil
}

// splitHostPort is host:port's host, which must not be empty, and port.
func splitHostPort(hostPort string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", hostPort, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || host == "" {
		return "", 0, fmt.Errorf("address %q: want HOST:PORT with a port in [0, 65535]", hostPort)
	}
	return host, uint32(p), nil
}

// checkRing returns the error BuildEnvoyResources would, without building
// the endpoints: the view's rules (validateRing), every resource but the
// endpoints built and validated as for a view without owners (they depend
// on the namespace, the header, the ring size and the listener only), and
// each owner's address parsed, which is all an endpoint's validation can
// refuse (an owner without virtual nodes is left out, as there).
func checkRing(ns string, v lease.RingView, listenerAddr string) error {
	if err := validateRing(ns, v); err != nil {
		return err
	}
	if _, err := BuildEnvoyResources(ns, lease.RingView{RingSize: v.RingSize, Header: v.Header}, listenerAddr); err != nil {
		return err
	}
	for _, o := range v.Owners {
		if o.VNodes == 0 {
			continue
		}
		if _, _, err := splitHostPort(o.Addr); err != nil {
			return fmt.Errorf("%w: owner %q: %w", ErrInvalidRing, o.Name, err)
		}
	}
	return nil
}

// mustAny packs a message whose type is linked in; it cannot fail.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("xds: " + err.Error())
	}
	return a
}
