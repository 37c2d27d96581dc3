// Package xds serves the manager's lease table to lookups over xDS, the
// wire protocol of Envoy and gRPC, as custom resource types (PRS §4.2's
// snapshot-and-changes rule, with xDS as the protocol).
//
// # Resources
//
// A LeaseTable hears every namespace's lookup view from the manager (it
// satisfies manager.Observer) and publishes, per namespace:
//
//   - 64 type.googleapis.com/fuge.v1.ArcBlock resources, the blocks of the
//     circle, named wire.BlockName(ns, b) ("<ns>/block/<b>", b from 0 to 63
//     in decimal). Block b holds wire.ArcBlock(ns, b, arcs): every arc of
//     the view whose end lies in it (wire.BlockOf, the end's top 6 bits), in
//     ring order. Every namespace always has all 64, an empty block having
//     no arcs, so a lookup knows it holds the whole table once it holds 64
//     blocks;
//   - one type.googleapis.com/fuge.v1.Heartbeat, named "<ns>/heartbeat",
//     that the leader rewrites every heartbeat interval (Heartbeat), so a
//     lookup that hears nothing else still knows the manager is there.
//
// # Why blocks
//
// The table is not served as one resource per arc because go-control-plane
// keeps, per stream and per type, a map of the resources the client holds
// and their versions: with one resource per arc that is 4,096 entries per
// lookup stream at the default ring size, a map that every response
// replaces, and every commit was pushed at once to every stream. With 500
// owners and 2,000 lookups at ring size 4096 that took the manager to
// 3.7 GB and it never converged (hence also the coalescing below). Blocks bound that state
// to 64 entries per stream whatever the ring size, and a change still
// resends only the blocks it touches (a move of one arc, one block; a join,
// the few blocks its arcs fall in), where one resource for the whole table
// would resend all of it on every change.
//
// A block's version is the LSN (the version NamespaceView is given), in
// decimal, of the published view in which its content last changed. Each
// view is validated as it arrives (the ranges partition the circle, each
// entry is a valid arc); one that fails is logged, counted and skipped.
// A view that is published is cut into its 64 blocks, and each block is
// compared with the one last published, arc by arc (range, owner, address,
// generation); the blocks that differ are set at the view's LSN, all in one
// cache update, and the others keep their version. A view that changes no
// block sends nothing.
//
// # Coalescing
//
// During a join storm the manager commits, and calls NamespaceView,
// hundreds of times a second, and pushing each view to every stream would
// not converge. A namespace's caches are therefore updated at most once
// per FlushInterval (10 ms). A view that arrives at least 10 ms after the
// last update is published at once, so a lone change is not delayed, and
// so is the first view of a namespace; one that arrives sooner is kept,
// replacing any view kept before it, and published by a timer when the
// 10 ms have passed, so no view waits longer than that. What is published
// is always the latest view, so the views in between are skipped, never
// pushed: a lookup sees the table jump from one published view to a later
// one. Stats counts the views received and those published. Heartbeat
// publishes a kept view before it bumps the heartbeat, so hearing from the
// manager means having been sent its latest view (on a stream that has
// acknowledged the blocks it was last sent: until then the next blocks
// wait for the acknowledgement, as xDS requires, and may follow the
// heartbeat). NamespaceDeleted forgets a kept view.
//
// # Memory
//
// Each block version is marshaled once, into one Any shared read-only by
// every response, SotW and delta, of every stream; a stream holds pointers
// to it only until its response is sent. What remains per stream is
// go-control-plane's: its watch, and per type the map of the versions the
// client holds (64 entries for the blocks, one for the heartbeat), which
// each response replaces. Per namespace, not per stream, the table keeps
// the published arcs once, to compare blocks, and the latest kept view.
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
// changed ones, except for Listeners and Clusters, so a SotW response
// would not be the whole table).
//
// # Delta and state of the world
//
// Both variants of ADS are served from the same caches by go-control-plane's
// stream handlers. Over delta xDS a client receives the blocks it lacks or
// knows at another version, and the names of any resources it holds that
// are not served (removed_resources). A reconnecting client sends
// initial_resource_versions, the block versions it holds, and receives
// only the blocks that changed meanwhile; the first response of a wildcard
// subscription is sent even when empty, so the client knows it is up to
// date. A received block replaces the client's arcs that end in it. Over
// state of the world, every response is the namespace's whole table, all
// 64 blocks, with the last published view's LSN as version_info. A NACK (a
// request with error_detail) is logged and counted and does not cause a
// resend.
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
