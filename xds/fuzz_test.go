package xds

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzRoute decodes a DiscoveryRequest as a client sends it and routes it
// as a watch is routed (mux.Fetch: namespaceOf, then the namespace's cache
// of the type asked for). The lease table serves namespace "ns" (a view
// and a ring) and has deleted "gone". It checks that
//   - namespaceOf takes fuge.namespace when it is there (refusing a value
//     that is not a nonempty string) and else node.cluster;
//   - a refusal is a gRPC status, InvalidArgument or NotFound, whose
//     message starts with the package's error for it; only "ns" with a
//     served type is answered;
//   - an answer is of the type asked for and holds only the resources the
//     request names (for a wildcard, all but those sent only by name),
//     each once.
func FuzzRoute(f *testing.F) {
	node := func(ns, cluster string) *core.Node {
		n := &core.Node{Id: "n1", Cluster: cluster}
		if ns != "" {
			n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{NamespaceMetadataKey: structpb.NewStringValue(ns)}}
		}
		return n
	}
	for _, r := range []*discovery.DiscoveryRequest{
		{Node: node("ns", ""), TypeUrl: ArcBlockTypeURL},
		{Node: node("ns", ""), TypeUrl: ArcBlockTypeURL, ResourceNames: []string{"ns/0", "ns/63", "ns/64", "other/1"}},
		{Node: node("", "ns"), TypeUrl: HeartbeatTypeURL, VersionInfo: "1"},
		{Node: node("ns", "x"), TypeUrl: ListenerTypeURL, ResourceNames: []string{"*", "ns"}},
		{Node: node("ns", ""), TypeUrl: ListenerTypeURL, ResourceNames: []string{"ns"}},
		{Node: node("ns", ""), TypeUrl: EndpointTypeURL, VersionInfo: "7"},
		{Node: node("gone", ""), TypeUrl: ArcBlockTypeURL},
		{Node: node("", ""), TypeUrl: ArcBlockTypeURL},
		{Node: node("ns", ""), TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listene"},
		{Node: &core.Node{Cluster: "ns", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			NamespaceMetadataKey: structpb.NewNumberValue(1)}}}, TypeUrl: ClusterTypeURL},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	lt := newLeaseTable(LeaseTableConfig{}, newFakeClock())
	lt.NamespaceView("ns", fourArcs(), 1)
	lt.NamespaceRing("ns", apportioned(f, 16, "a", "b"), 7)
	lt.NamespaceView("gone", fourArcs(), 1)
	lt.NamespaceDeleted("gone")
	served := []string{ArcBlockTypeURL, HeartbeatTypeURL, ListenerTypeURL, RouteTypeURL, ClusterTypeURL, EndpointTypeURL}
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, data []byte) {
		var req discovery.DiscoveryRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		ns, nsErr := namespaceOf(req.GetNode())
		v, named := req.GetNode().GetMetadata().GetFields()[NamespaceMetadataKey]
		switch {
		case named && v.GetStringValue() != "":
			if nsErr != nil || ns != v.GetStringValue() {
				t.Fatalf("metadata names %q: namespaceOf = %q, %v", v.GetStringValue(), ns, nsErr)
			}
		case !named && req.GetNode().GetCluster() != "":
			if nsErr != nil || ns != req.GetNode().GetCluster() {
				t.Fatalf("cluster %q: namespaceOf = %q, %v", req.GetNode().GetCluster(), ns, nsErr)
			}
		default:
			wantStatus(t, nsErr, codes.InvalidArgument, ErrNoNamespace)
		}

		resp, err := mux{lt}.Fetch(ctx, &req)
		switch {
		case nsErr != nil:
			wantStatus(t, err, codes.InvalidArgument, ErrNoNamespace)
			return
		case ns != "ns":
			wantStatus(t, err, codes.NotFound, ErrUnknownNamespace)
			return
		case !slices.Contains(served, req.GetTypeUrl()):
			wantStatus(t, err, codes.InvalidArgument, ErrUnknownType)
			return
		case errors.As(err, &types.SkipFetchError{}):
			if req.GetVersionInfo() == "" || req.GetVersionInfo() != cacheVersion(lt, ns, req.GetTypeUrl()) {
				t.Fatalf("Fetch skipped a request at version %q, the cache being at %q", req.GetVersionInfo(), cacheVersion(lt, ns, req.GetTypeUrl()))
			}
			return
		case err != nil:
			t.Fatalf("Fetch of %q in %q: %v", req.GetTypeUrl(), ns, err)
		}
		dr, err := resp.GetDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		if dr.GetTypeUrl() != req.GetTypeUrl() {
			t.Fatalf("asked for %q, answered with %q", req.GetTypeUrl(), dr.GetTypeUrl())
		}
		names := req.GetResourceNames()
		wildcard := len(names) == 0 || slices.Contains(names, "*")
		returned := resp.GetReturnedResources()
		if len(returned) != len(dr.GetResources()) {
			t.Fatalf("%d resources sent, %d recorded as returned", len(dr.GetResources()), len(returned))
		}
		for name := range returned {
			switch byName := slices.Contains(names, name); {
			case !wildcard && !byName:
				t.Fatalf("asked for %q, sent %q", names, name)
			case !byName && explicit(lt, ns, req.GetTypeUrl(), name):
				t.Fatalf("a wildcard request (%q) was sent %q, which goes only to those that name it", names, name)
			}
		}
	})
}

// explicit reports whether a namespace's resource goes only to requests
// that name it.
func explicit(lt *LeaseTable, ns, typeURL, name string) bool {
	lt.mu.RLock()
	defer lt.mu.RUnlock()
	c := lt.spaces[ns].caches[typeURL]
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.res[name]
	return r != nil && r.explicit
}

// wantStatus fails t unless err is a gRPC status with code whose message
// starts with sentinel's.
func wantStatus(t *testing.T, err error, code codes.Code, sentinel error) {
	t.Helper()
	s, ok := status.FromError(err)
	if err == nil || !ok || s.Code() != code || !strings.HasPrefix(s.Message(), sentinel.Error()) {
		t.Fatalf("error %v, want a %v status starting %q", err, code, sentinel)
	}
}
