package lb

import (
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// ErrBadResource marks an xDS resource the Lookup cannot use; the response
// that carried it is NACKed.
var ErrBadResource = errors.New("lb: bad xDS resource")

// heldArc is an arc resource the Lookup holds, with the version the server
// gave it (opaque to the Lookup; sent back in initial_resource_versions).
type heldArc struct {
	entry   lease.Entry
	version string
}

// arcUpdate is a decoded Arc response: resources to set and names removed.
type arcUpdate struct {
	set     map[string]heldArc
	removed []string
}

// node identifies the Lookup to the manager: id Name, cluster and
// metadata["fuge.namespace"] the namespace.
func node(ns, name string) *corev3.Node {
	return &corev3.Node{
		Id:            name,
		Cluster:       ns,
		UserAgentName: "fuge-lb",
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			NamespaceMetadataKey: structpb.NewStringValue(ns),
		}},
	}
}

// subscribe is the first request of a type on a stream: a wildcard
// subscription naming the node, with the versions held.
func subscribe(typeURL string, n *corev3.Node, versions map[string]string) *discovery.DeltaDiscoveryRequest {
	return &discovery.DeltaDiscoveryRequest{
		Node:                    n,
		TypeUrl:                 typeURL,
		ResourceNamesSubscribe:  []string{"*"},
		InitialResourceVersions: versions,
	}
}

// ack acknowledges resp; with err it is a NACK carrying err as error_detail.
func ack(resp *discovery.DeltaDiscoveryResponse, err error) *discovery.DeltaDiscoveryRequest {
	r := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	if err != nil {
		r.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	}
	return r
}

// decodeArcs decodes an Arc response for namespace ns. Every resource must
// be a fuge.v1.Arc of ns named ArcName(ns, its range); one bad resource
// fails the whole response.
func decodeArcs(ns string, resp *discovery.DeltaDiscoveryResponse) (arcUpdate, error) {
	u := arcUpdate{set: make(map[string]heldArc, len(resp.GetResources())), removed: resp.GetRemovedResources()}
	for _, r := range resp.GetResources() {
		var arc fugev1.Arc
		if err := unpack(r, ArcTypeURL, &arc); err != nil {
			return arcUpdate{}, err
		}
		if arc.Namespace != ns {
			return arcUpdate{}, fmt.Errorf("%w: arc %q of namespace %q", ErrBadResource, r.GetName(), arc.Namespace)
		}
		e, err := wire.EntryFrom(&arc)
		if err != nil {
			return arcUpdate{}, fmt.Errorf("%w: arc %q: %w", ErrBadResource, r.GetName(), err)
		}
		if want := wire.ArcName(ns, e.Range); r.GetName() != want {
			return arcUpdate{}, fmt.Errorf("%w: arc %q holds range %v (name %q)", ErrBadResource, r.GetName(), e.Range, want)
		}
		if _, dup := u.set[r.GetName()]; dup {
			return arcUpdate{}, fmt.Errorf("%w: arc %q sent twice", ErrBadResource, r.GetName())
		}
		u.set[r.GetName()] = heldArc{entry: e, version: r.GetVersion()}
	}
	return u, nil
}

// checkHeartbeats checks a Heartbeat response for namespace ns.
func checkHeartbeats(ns string, resp *discovery.DeltaDiscoveryResponse) error {
	for _, r := range resp.GetResources() {
		var hb fugev1.Heartbeat
		if err := unpack(r, HeartbeatTypeURL, &hb); err != nil {
			return err
		}
		if r.GetName() != HeartbeatName(ns) || hb.Namespace != ns {
			return fmt.Errorf("%w: heartbeat %q of namespace %q", ErrBadResource, r.GetName(), hb.Namespace)
		}
	}
	return nil
}

// unpack decodes the body of r, which must be of typeURL, into m.
func unpack(r *discovery.Resource, typeURL string, m proto.Message) error {
	body := r.GetResource()
	if body == nil {
		return fmt.Errorf("%w: %q has no body", ErrBadResource, r.GetName())
	}
	if body.GetTypeUrl() != typeURL {
		return fmt.Errorf("%w: %q is a %q, want %q", ErrBadResource, r.GetName(), body.GetTypeUrl(), typeURL)
	}
	if err := proto.Unmarshal(body.GetValue(), m); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrBadResource, r.GetName(), err)
	}
	return nil
}
