package xds

import (
	"context"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// mux routes each watch to the cache of the namespace its node names and
// of the type it asks for. go-control-plane's MuxCache reads a plain map,
// and namespaces come and go at runtime, so the routing table is the lease
// table's, read under its lock. Watches are created with the read lock
// held, so none is created on a namespace's caches while NamespaceDeleted
// empties them.
type mux struct{ t *LeaseTable }

var _ cache.Cache = mux{}

// namespaceOf returns the namespace a node names: the string in its
// metadata under NamespaceMetadataKey, or else its cluster.
func namespaceOf(node *core.Node) (string, error) {
	if v, ok := node.GetMetadata().GetFields()[NamespaceMetadataKey]; ok {
		s, isString := v.GetKind().(*structpb.Value_StringValue)
		if !isString || s.StringValue == "" {
			return "", status.Errorf(codes.InvalidArgument, "%v: metadata %q is not a namespace name", ErrNoNamespace, NamespaceMetadataKey)
		}
		return s.StringValue, nil
	}
	if c := node.GetCluster(); c != "" {
		return c, nil
	}
	return "", status.Errorf(codes.InvalidArgument, "%v: set node metadata %q or node cluster", ErrNoNamespace, NamespaceMetadataKey)
}

// route finds the cache for a watch. The caller holds t.mu for reading.
//
// A namespace without a view is refused with NOT_FOUND rather than waited
// for: a lookup retries with backoff, and one that names a namespace that
// never exists hears so at once. A client that still holds resources of a
// deleted namespace is routed to its emptied caches, so it receives their
// removal first, whatever the order of the deletion and its last
// acknowledgement; its next request is refused. (A namespace this node has
// not heard of yet, as on a lagging node, is not treated as deleted: the
// lookup keeps its table and retries.)
func (m mux) route(node *core.Node, typeURL string, sub cache.Subscription) (*typeCache, error) {
	return m.routeHeld(node, typeURL, func(*typeCache) bool { return len(sub.ReturnedResources()) > 0 })
}

// routeHeld is route, with held reporting whether the client holds
// resources of the type: given the namespace's cache of it, nil if none,
// and asked only of a namespace without a view. A Lookup stream's versions
// change under the cache's lock (a response is computed as it is sent), so
// it reads them there.
func (m mux) routeHeld(node *core.Node, typeURL string, held func(*typeCache) bool) (*typeCache, error) {
	ns, err := namespaceOf(node)
	if err != nil {
		return nil, err
	}
	sp := m.t.spaces[ns]
	if sp == nil || !sp.live && !held(sp.caches[typeURL]) {
		return nil, status.Errorf(codes.NotFound, "%v: %q", ErrUnknownNamespace, ns)
	}
	c := sp.caches[typeURL]
	if c == nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v: %q", ErrUnknownType, typeURL)
	}
	return c, nil
}

func (m mux) CreateWatch(req *cache.Request, sub cache.Subscription, out chan cache.Response) (func(), error) {
	m.want(req.GetNode(), req.GetTypeUrl())
	m.t.mu.RLock()
	defer m.t.mu.RUnlock()
	c, err := m.route(req.GetNode(), req.GetTypeUrl(), sub)
	if err != nil {
		return nil, err
	}
	return c.CreateWatch(req, sub, out)
}

func (m mux) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, out chan cache.DeltaResponse) (func(), error) {
	m.want(req.GetNode(), req.GetTypeUrl())
	m.t.mu.RLock()
	defer m.t.mu.RUnlock()
	c, err := m.route(req.GetNode(), req.GetTypeUrl(), sub)
	if err != nil {
		return nil, err
	}
	return c.CreateDeltaWatch(req, sub, out)
}

func (m mux) Fetch(ctx context.Context, req *cache.Request) (cache.Response, error) {
	m.want(req.GetNode(), req.GetTypeUrl())
	m.t.mu.RLock()
	defer m.t.mu.RUnlock()
	c, err := m.route(req.GetNode(), req.GetTypeUrl(), stream.NewSotwSubscription(nil, true))
	if err != nil {
		return nil, err
	}
	return c.Fetch(ctx, req)
}
