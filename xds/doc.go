// Package xds serves the manager's lease table to lookups over xDS, the
// wire protocol of Envoy and gRPC, as custom resource types (PRS §4.2's
// snapshot-and-changes rule, with xDS as the protocol).
//
// # Resources
//
// A LeaseTable hears every namespace's lookup view from the manager (it
// satisfies manager.Observer) and publishes, per namespace:
//
//   - one type.googleapis.com/fuge.v1.Arc per arc of the view, named
//     wire.ArcName(ns, range) ("<ns>/<start>-<end>" in hex), holding
//     wire.Arc(ns, entry), versioned by the arc's generation in decimal;
//   - one type.googleapis.com/fuge.v1.Heartbeat, named "<ns>/heartbeat",
//     that the leader rewrites every heartbeat interval (Heartbeat), so a
//     lookup that hears nothing else still knows the manager is there.
//
// Each view is validated (the ranges partition the circle, each entry is a
// valid arc) and diffed against the namespace's previous arcs: new and
// changed arcs are set, arcs that are gone (merged or split) are deleted,
// all in one update. A view that fails validation is logged and skipped.
//
// # Caches and routing
//
// Each namespace has one cache per resource type. A lookup puts its
// namespace in node.metadata["fuge.namespace"] (node.cluster is the
// fallback) and subscribes by wildcard; a mux routes each watch by
// (namespace, type URL) to its cache. Namespaces come and go at runtime, so
// the routing table is read under the lease table's lock. A namespace
// without a view is refused with NOT_FOUND instead of waited for: a lookup
// retries with backoff, so one that starts before the manager has applied
// the namespace is served on its next attempt, and one that names a
// namespace that never exists is told so at once. A namespace's deletion
// deletes its resources, so subscribed clients see the removals, and the
// stream then ends with NOT_FOUND when the client acknowledges.
//
// The caches are go-control-plane caches in all but two points, which is
// why this package does not use its LinearCache: a resource's version is
// the one its publisher chose (LinearCache versions delta resources by a
// hash of their bytes), and a state-of-the-world response always carries
// every resource in the subscription's scope (LinearCache sends only the
// changed ones, except for Listeners and Clusters, so a SotW client would
// never see an arc removed).
//
// # Delta and state of the world
//
// Both variants of ADS are served from the same caches by go-control-plane's
// stream handlers. Over delta xDS a client receives the arcs it lacks or
// knows at another version and the names of those that are gone. A
// reconnecting client sends initial_resource_versions, the generations it
// holds, and receives only what changed meanwhile; the first response of a
// wildcard subscription is sent even when empty, so the client knows it is
// up to date. Over state of the world, every response is the namespace's
// whole table, with the view's LSN as version_info; a client treats it as a
// snapshot, and an arc it no longer contains is gone. A NACK (a request
// with error_detail) is logged and counted and does not cause a resend.
//
// # Leadership
//
// LeaseTableConfig.Gate is called as each stream opens; the manager passes
// its CheckLeader, so a standby refuses lookups with FAILED_PRECONDITION
// and the leader's address in the "fuge-leader" trailer. Every node keeps
// its table current, since the manager calls the observer on every node
// as raft applies changes, but only the leader sends heartbeats.
//
// Issue 5 adds Envoy's Listener, RouteConfiguration, Cluster and
// ClusterLoadAssignment per namespace as further caches of the same
// namespace, served by the same streams.
package xds
