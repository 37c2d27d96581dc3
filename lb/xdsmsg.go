package lb

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

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

// heldBlock is a block the Lookup holds: its arcs, in ring order, the bit
// count of the blocks it is among, and the version the server gave it
// (opaque to the Lookup; sent back in initial_resource_versions). A block
// the server removed is held empty and without a version, so it is not
// sent back.
type heldBlock struct {
	entries []lease.Entry
	bits    uint32
	version string
}

// blockUpdate is a decoded ArcBlock response: blocks to set, by name, and
// the names of the blocks removed.
type blockUpdate struct {
	set     map[string]heldBlock
	removed []string
	arena   []lease.Entry // every block's arcs in set, in block order
	bits    uint32        // the bit count of every block in set; 0 if none
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

// decodeBlocks decodes an ArcBlock response for namespace ns. Every
// resource must be a well-formed fuge.v1.ArcBlock of ns (see
// wire.EntriesFromBlock) named BlockName(ns, its block), whose arcs follow
// each other in ring order; one bad resource fails the whole response.
// Removed names that are not block names of ns are ignored.
//
// The arcs of every block are decoded into one array, in block order, each
// block's arcs a slice of it (u.arena): when the response is the whole
// table, as when a Lookup connects, that array is the table (tableOf), with
// no copy and one allocation.
func decodeBlocks(ns string, resp *discovery.DeltaDiscoveryResponse) (blockUpdate, error) {
	res := resp.GetResources()
	u := blockUpdate{set: make(map[string]heldBlock, len(res))}
	intern := newInterner()
	arcs := 0
	for _, r := range res {
		arcs += countArcs(r.GetResource().GetValue())
	}
	arena := make([]lease.Entry, 0, arcs)
	for _, i := range blockOrder(ns, res) {
		r := res[i]
		body := r.GetResource()
		if body == nil {
			return blockUpdate{}, fmt.Errorf("%w: %q has no body", ErrBadResource, r.GetName())
		}
		if body.GetTypeUrl() != ArcBlockTypeURL {
			return blockUpdate{}, fmt.Errorf("%w: %q is a %q, want %q", ErrBadResource, r.GetName(), body.GetTypeUrl(), ArcBlockTypeURL)
		}
		start := len(arena)
		block, bits, grown, err := decodeArcBlockTo(arena, ns, body.GetValue(), intern)
		if err != nil {
			return blockUpdate{}, fmt.Errorf("%w: block %q: %w", ErrBadResource, r.GetName(), err)
		}
		if u.bits != 0 && bits != u.bits {
			return blockUpdate{}, fmt.Errorf("%w: block %q is one of %d, another one of %d", ErrBadResource, r.GetName(), 1<<bits, 1<<u.bits)
		}
		u.bits = bits
		arena = grown
		es := arena[start:len(arena):len(arena)]
		if want := wire.BlockName(ns, block); r.GetName() != want {
			return blockUpdate{}, fmt.Errorf("%w: block %q holds block %d (name %q)", ErrBadResource, r.GetName(), block, want)
		}
		for i := 1; i < len(es); i++ {
			if prev, r2 := es[i-1].Range, es[i].Range; r2.Start != prev.End || r2.End <= prev.End {
				return blockUpdate{}, fmt.Errorf("%w: block %q: arc %v does not follow %v", ErrBadResource, r.GetName(), r2, prev)
			}
		}
		if _, dup := u.set[r.GetName()]; dup {
			return blockUpdate{}, fmt.Errorf("%w: block %q sent twice", ErrBadResource, r.GetName())
		}
		u.set[r.GetName()] = heldBlock{entries: es, bits: bits, version: r.GetVersion()}
	}
	for _, name := range resp.GetRemovedResources() {
		if isBlockName(ns, name) {
			u.removed = append(u.removed, name)
		}
	}
	u.arena = arena
	return u, nil
}

// blockOrder is the order in which to decode res: by the block number in
// each resource's name (a name that is not a block name of ns sorts last;
// decodeBlocks refuses it).
func blockOrder(ns string, res []*discovery.Resource) []int {
	keys := make([]uint64, len(res))
	order := make([]int, len(res))
	prefix := ns + "/block/"
	for i, r := range res {
		order[i] = i
		keys[i] = math.MaxUint64
		if rest, ok := strings.CutPrefix(r.GetName(), prefix); ok {
			if b, err := strconv.ParseUint(rest, 10, 32); err == nil {
				keys[i] = b
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	return order
}

// isBlockName reports whether name is BlockName(ns, b) for a block b of
// some bit count.
func isBlockName(ns, name string) bool {
	_, ok := blockIndex(ns, name)
	return ok
}

// blockIndex is the number b of the block named name (BlockName(ns, b), b
// below 2^MaxBlockBits); false if name is no block name of ns.
func blockIndex(ns, name string) (uint32, bool) {
	rest, ok := strings.CutPrefix(name, ns+"/block/")
	b, err := strconv.ParseUint(rest, 10, 32)
	if !ok || err != nil || b >= 1<<wire.MaxBlockBits || wire.BlockName(ns, uint32(b)) != name {
		return 0, false
	}
	return uint32(b), true
}

// blockNames lists the names of the 2^bits blocks of namespace ns, by
// number.
func blockNames(ns string, bits uint32) []string {
	names := make([]string, 1<<bits)
	for b := range names {
		names[b] = wire.BlockName(ns, uint32(b))
	}
	return names
}

// tableOf returns the arcs of the blocks held, in ring order, when the
// table is complete: every block named in names (in block order) is held
// and their arcs partition the circle.
//
// When the blocks' arcs lie one after the other in arena, in order (every
// block was set by the response decoded into arena), arena is returned,
// not a copy: neither is ever modified.
func tableOf(names []string, held map[string]heldBlock, arena []lease.Entry) ([]lease.Entry, error) {
	n, missing := 0, 0
	inArena := true
	for _, name := range names {
		h, ok := held[name]
		if !ok {
			missing++
		}
		if len(h.entries) > 0 && (n+len(h.entries) > len(arena) || &h.entries[0] != &arena[n]) {
			inArena = false
		}
		n += len(h.entries)
	}
	switch {
	case missing > 0:
		return nil, fmt.Errorf("%d of %d blocks missing", missing, len(names))
	case n == 0:
		return nil, errors.New("no arcs")
	}
	var es []lease.Entry
	if inArena && n == len(arena) {
		es = arena[:n:n]
	} else {
		es = make([]lease.Entry, 0, n)
		for _, name := range names {
			es = append(es, held[name].entries...)
		}
	}
	// Arcs ascend by End within a block (decodeBlocks) and blocks by the
	// top bits of End, so es ascends strictly by End: it partitions the
	// circle when each arc starts where the one before it ends (one arc:
	// the full circle).
	for i, e := range es {
		if prev := es[(i+n-1)%n].Range.End; e.Range.Start != prev {
			return nil, fmt.Errorf("arc %v does not start where the arc before it ends (%x)", e.Range, prev)
		}
	}
	return es, nil
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
