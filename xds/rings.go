package xds

import (
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/lease"
)

// NamespaceRing publishes a namespace's ring view as Envoy and proxyless
// gRPC resources (BuildEnvoyResources): the two Listeners, the
// RouteConfiguration, the Cluster and the ClusterLoadAssignment. Version
// is the raft index of the change; it becomes the version of every
// resource the view changes, and the SotW version_info of their types.
// Resources the view leaves as they were keep their version and are not
// sent again.
//
// Ring views are coalesced with the namespace's lease-table views: the
// first ring view of a namespace is applied at once, later ones at most
// once per FlushInterval, the latest one winning. A view whose resources
// fail to build or validate is logged, counted (Stats.BadRings) and
// skipped. Until an Envoy or gRPC client asks for the namespace, a view is
// only checked and kept (deferRingLocked, mux.want). The owners slice must
// not be modified afterwards. It satisfies
// manager.RingObserver.
func (t *LeaseTable) NamespaceRing(ns string, v lease.RingView, version uint64) {
	t.rings.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaceLocked(ns)
	sp.pendingRing = &ringNote{view: v, version: version}
	// The ring size sizes the lease table's blocks: the manager tells it
	// before a namespace's first view. A namespace published in blocks of
	// another size before (no ring size heard yet) is cut anew at its next
	// view (publishViewLocked), under that view's LSN.
	if v.RingSize > 0 {
		sp.ringSize = v.RingSize
	}
	t.scheduleLocked(ns, sp, !sp.ringLive)
}

// publishRingLocked builds a ring view's resources, compares each with the
// one last published and updates the changed ones, at the view's version.
// The caller holds t.mu.
func (t *LeaseTable) publishRingLocked(ns string, sp *space, r *ringNote) {
	res, err := BuildEnvoyResources(ns, r.view, t.listener)
	if err != nil {
		t.refuseRing(ns, r, err)
		return
	}
	version := strconv.FormatUint(r.version, 10)
	type item struct {
		typeURL, name string
		m             proto.Message
		explicit      bool
	}
	items := []item{
		{ListenerTypeURL, res.Listener.GetName(), res.Listener, false},
		{ListenerTypeURL, res.APIListener.GetName(), res.APIListener, true},
		{RouteTypeURL, res.Route.GetName(), res.Route, false},
		{ClusterTypeURL, res.Cluster.GetName(), res.Cluster, false},
		{EndpointTypeURL, res.Endpoints.GetClusterName(), res.Endpoints, false},
	}
	sets := map[string]map[string]*resource{}
	for _, it := range items {
		if old := sp.envoy[it.typeURL][it.name]; old != nil && proto.Equal(old, it.m) {
			continue
		}
		rs, err := newResource(it.name, version, it.m)
		if err != nil {
			t.refuseRing(ns, r, err)
			return
		}
		rs.explicit = it.explicit
		if sets[it.typeURL] == nil {
			sets[it.typeURL] = map[string]*resource{}
		}
		sets[it.typeURL][it.name] = rs
	}
	t.ringPushes.Add(1)
	sp.deferredRing = nil
	t.ringLiveLocked(ns, sp, r)
	for _, it := range items {
		if rs := sets[it.typeURL][it.name]; rs != nil {
			if sp.envoy[it.typeURL] == nil {
				sp.envoy[it.typeURL] = map[string]proto.Message{}
			}
			sp.envoy[it.typeURL][it.name] = it.m
		}
	}
	// Endpoints before Clusters and Routes before Listeners: a client that
	// follows a new reference finds what it refers to (make before break;
	// the names never change today, so this only matters to a future
	// rename).
	for _, typeURL := range []string{EndpointTypeURL, ClusterTypeURL, RouteTypeURL, ListenerTypeURL} {
		if set := sets[typeURL]; len(set) > 0 {
			sp.caches[typeURL].update(version, set, nil)
		}
	}
}

// ringLiveLocked marks a namespace's ring as served, the first time with a
// log line. The caller holds t.mu.
func (t *LeaseTable) ringLiveLocked(ns string, sp *space, r *ringNote) {
	if !sp.ringLive {
		sp.ringLive = true
		t.log.Info("serving namespace to Envoy and gRPC", "ns", ns, "owners", len(r.view.Owners), "version", r.version)
	}
}

// deferRingLocked keeps a ring view of a namespace no Envoy or gRPC client
// has asked for yet (space.envoyWanted), to be published when one does
// (want). It is checked now, as publishing it would: a bad one is logged,
// counted (Stats.BadRings) and skipped, and the last good one stays kept.
// The check is what BuildEnvoyResources refuses, without building: the
// ring's rules, the owners' and the listener's addresses, and the route
// and cluster a ring's header and size make. The caller holds t.mu.
func (t *LeaseTable) deferRingLocked(ns string, sp *space, r *ringNote) {
	if err := checkRing(ns, r.view, t.listener); err != nil {
		t.refuseRing(ns, r, err)
		return
	}
	sp.deferredRing = r
	t.ringLiveLocked(ns, sp, r)
}

// want publishes the ring kept for the namespace that node names before a
// watch on typeURL is made, if typeURL is one of the Envoy types, and has
// the namespace's later rings published as they come. A request that
// names no namespace, or one this node does not know, changes nothing
// (route refuses it).
func (m mux) want(node *core.Node, typeURL string) {
	switch typeURL {
	case ListenerTypeURL, RouteTypeURL, ClusterTypeURL, EndpointTypeURL:
	default:
		return
	}
	ns, err := namespaceOf(node)
	if err != nil {
		return
	}
	t := m.t
	t.mu.RLock()
	sp := t.spaces[ns]
	wanted := sp == nil || sp.envoyWanted
	t.mu.RUnlock()
	if wanted {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if sp = t.spaces[ns]; sp == nil || sp.envoyWanted {
		return
	}
	sp.envoyWanted = true
	if r := sp.deferredRing; r != nil {
		t.publishRingLocked(ns, sp, r)
	}
}

// refuseRing logs and counts (Stats.BadRings) a ring view that failed to
// build or check.
func (t *LeaseTable) refuseRing(ns string, r *ringNote, err error) {
	t.badRings.Add(1)
	t.log.Error("refusing namespace ring", "ns", ns, "version", r.version, "err", err)
}
