// Package xds serves the manager's lease table to lookups over xDS, the
// wire protocol of Envoy and gRPC, as custom resource types (PRS §4.2's
// snapshot-and-changes rule, with xDS as the protocol), and each
// namespace's ring to Envoy and proxyless gRPC clients as Listeners,
// Routes, Clusters and Endpoints, so that they send every request for a key
// to its owner with no Fuge code of their own.
//
// # Resources
//
// A LeaseTable hears every namespace's lookup view from the manager (it
// satisfies manager.Observer) and publishes, per namespace:
//
//   - 2^bits type.googleapis.com/fuge.v1.ArcBlock resources, the blocks of
//     the circle, bits = wire.BlockBits(R) (log2(R) - 2, from 6 to 14: 64
//     blocks up to R = 256, 1,024 at the default 4096, 16,384 at 65536,
//     about 4 arcs a block), named wire.BlockName(ns, b) ("<ns>/block/<b>", b in
//     decimal). Block b holds wire.ArcBlock(ns, bits, b, arcs): every arc of
//     the view whose end lies in it (wire.BlockOf, the end's top bits), in
//     ring order, and its bit count. Every namespace always has all of
//     them, an empty block having no arcs, so a lookup knows it holds the
//     whole table once it holds 2^bits blocks of one bit count;
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
// to at most 16,384 entries per stream (and a Lookup stream keeps none of
// its own: see Memory), and a change still resends only the blocks it
// touches (a move of one arc, one block; a join, the few blocks its arcs
// fall in), where one resource for the whole table would resend all of it
// on every change.
//
// Why the block count follows R: with 64 fixed blocks, one owner of 500
// leaving at R = 65536 touched 52 of the 64 blocks with its 131 arcs, so
// every lookup received and decoded about 3 MB of a 3.6 MB table for 131
// changed arcs, and a change took seconds to reach 2,000 lookups. At 16
// arcs a block the same leave sent its 131 blocks, about 115 KB; at 4,
// about 34 KB (TestBlocksSizedByRing), and a whole table of 4.3 MB where
// it was 3.7 MB: the more blocks, the more envelopes, so 4 arcs a block
// and not 1. R reaches the table with the namespace's ring
// view, which the manager gives before the namespace's first view; a
// table that published a view before hearing R (an observer that passed
// no ring) sizes the blocks by that view's length, and cuts them anew at
// the first view with a new LSN after R is heard: every block is sent
// again at that LSN and those past the new count are removed, so no
// client takes a block of one size for one of another at one version.
//
// Every push to a Lookup stream is computed from what changed: each
// ArcBlock cache remembers the names its last 64 updates set or deleted,
// and a Lookup stream that holds the cache's versions as of one of them
// compares only those names (typeCache.lookupChanges), not 16,384 blocks
// per stream per push; and the streams that hold the same versions share
// one answer (typeCache.lookupAnswerFor, see Memory).
//
// A block's version is the LSN (the version NamespaceView is given), in
// decimal, of the published view in which its content last changed. Each
// view is validated as it arrives (the ranges partition the circle, each
// entry is a valid arc); one that fails is logged, counted and skipped.
// A view that is published is cut into its blocks, and each block is
// compared with the one last published, arc by arc (range, owner, address,
// generation); the blocks that differ are set at the view's LSN, all in one
// cache update, and the others keep their version. A view that changes no
// block sends nothing.
//
// The manager hands its views by change (NamespaceViewChanged, its
// ViewObserver): its replicated view as an immutable lease.View, with the
// ranges the commit set. Then only the blocks those ranges reach (on to the
// end of the entry after each, whose start a change may move) are cut,
// validated and compared; views coalesced meanwhile keep the union of
// their ranges. The first view, a new block size, a view of one range and
// more than 4,096 ranges between two flushes take the whole-view path. At
// R = 65536 the whole view was 65,536 entries to validate and 4,096 blocks
// to compare at every flush; a leave of one of 500 owners reaches about
// 132 blocks.
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
// to it only until its response is sent. The server must use Codec
// (LeaseTable.ServerOptions) for that to hold on the wire too: gRPC's proto
// codec copies each response into a buffer of its own, which the transport
// keeps until the client's flow-control window lets it out, so 2,000
// lookups starting at once held 2,000 copies of a 250 KB table, 1 GB of the
// manager's 1.7 GB RSS (heap profile, in the responses' encode). Codec
// writes a response's own fields and each resource's envelope fresh (about
// 11 KB for 64 blocks, four times that for the 256 blocks of R = 4096) and sends each block's bytes from the shared Any
// itself; the manager's RSS under 500 owners and 2,000 lookups went from
// 1.7 GB to about 220 MB. Every resource is marshaled once more cheaply
// still: behind its whole delta envelope, in one array whose tail is the
// Any's value, so a response of 64 blocks is its head and 64 shared slices.
// And since every Lookup stream that holds one epoch's versions (or none)
// needs the same answer, the cache lists that answer once per update and
// encodes each of its parts once, the resources' frames one after the
// other (frameIndex.addBody): a push to 2,000 streams is then 2,000 heads
// and one shared slice, where listing, sorting and framing 131 blocks per
// stream took the cache half a second at R = 65536, holding its lock, and
// 2,000 Lookups starting at once had 16,384 envelopes each written.
//
// A Lookup's stream (gRPC metadata wire.ClientKindKey = wire.ClientLookup)
// is served by serveLookup rather than go-control-plane's delta handler:
// one goroutine per stream, blocked in Recv, its responses sent by a pool
// of eight workers (by a goroutine of its own only while its client has a
// response unacknowledged, so that a slow client delays nobody), where
// go-control-plane keeps two goroutines per stream; and the versions a wildcard subscription holds once answered
// are the cache's own map of its current versions, shared by every Lookup
// stream, where go-control-plane keeps a 64-entry copy per stream, replaced
// on every push. Since Go's GC goal counts goroutine stacks, each idle
// stream's stacks cost about twice their size in RSS. Other streams
// (Envoy, gRPC) keep go-control-plane's handler: its watch, and per type
// the map of the versions the client holds. Per namespace, not per
// stream, the table keeps the published arcs once, to compare blocks, and
// the latest kept view.
//
// A push is computed as it is sent, not as it falls due: a stream that
// holds an epoch's versions is queued a lateAnswer, which its sender turns
// into responses when it reaches it, from the versions the stream holds
// then to the cache's then. A node's pool reaches its 10,000th stream a
// few hundred milliseconds after its first, and a change's second commit,
// arriving meanwhile, was otherwise sent separately, after the client had
// acknowledged the first: two pushes. A stream queues at most one such
// answer per type that its sender has not begun, so a client sending
// request after request without reading makes the node queue no more.
// And table changes go before
// heartbeats: the pool takes the streams with a change queued first, and a
// stream's sender sends its ArcBlock responses before its Heartbeats (each
// type in order), so a change that falls due as a node heartbeats all its
// streams does not wait behind that.
//
// Whole tables (a response of 512 blocks or more: a Lookup's first, or
// one that reconnects far behind) go out to at most 64 streams at once,
// each stream keeping its slot until its client has acknowledged, its
// stream ends, or 1 s passes (wholeGate); a stream waits for a slot 2 s at
// most, then is sent its table without one (Stats.WholeWaits and
// WholeBypasses count both; a manager's /metrics shows them as
// fuge_xds_whole_table_waits_total and _bypasses_total: bypasses mean
// clients that hold slots without acknowledging, or a start-up longer than
// the wait). Sent all at once, 2,000 tables shared the
// link frame by frame and all arrived at the end; 64 at a time they arrive
// in turn, and the first routers route while the others wait.
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
// its blocks, with the last published view's LSN as version_info. A NACK (a
// request with error_detail) is logged and counted and does not cause a
// resend.
//
// # Leadership and standbys
//
// LeaseTableConfig.Gate is called as each Lookup stream opens (one whose
// gRPC metadata carries wire.ClientKindKey = wire.ClientLookup, as
// lb.Lookup sends). The manager passes its CheckLookup: every standby
// serves Lookups while it has heard from the leader within raft's
// heartbeat timeout, and the leader, which carries every owner's stream
// and every commit, sends them to its standbys while one is in contact
// (UNAVAILABLE, naming one in the "fuge-standby" trailer, in turn) and
// serves them itself only when none is, or when configured to
// (manager.ServerConfig.LeaderServesLookups). A 3-node cluster spreads its
// routers over its two standbys, or over all three nodes with that option. Every node keeps its tables current, since the manager
// calls the observer on every node as raft applies changes, at the same
// LSNs. A standby out of contact refuses Lookup streams with
// FAILED_PRECONDITION and the leader's address in the "fuge-leader"
// trailer, and stops its heartbeats.
//
// Heartbeats are what a Lookup's staleness bound counts: the leader sends
// them every heartbeat interval, and a standby sends its own
// (manager.Server.RunStandbyHeartbeats) only while in contact with the
// leader, so a heartbeat from a standby says its table trails the leader's
// by at most raft's heartbeat timeout and the time to apply what was
// committed. A Lookup served by a standby that loses contact hears nothing
// more, abandons the stream after its StreamTimeout and reconnects to
// another node, within its staleness bound. A standby's heartbeat that
// falls due while a table change may still be going out to its Lookups
// (LeaseTable.ChangedWithin: a view published within the last tenth of the
// interval) waits, by at most a quarter of the interval and a second: a
// heartbeat to every stream costs the node and its Lookups about as much
// as the change does.
//
// A Lookup learns the LSN a node serves at from each ArcBlock response's
// system_version_info (the LSN of the last view the node published). When
// it moves from one node to another it sends the block versions it holds
// (LSNs); a node that has not yet published a view as new as the newest of
// them holds its first response until it has (or for at most MaxCatchUp),
// so the Lookup never goes back in time: it misses no generation change,
// and sees none undone and redone, which it would report as loss.
//
// Streams without the Lookup mark (Envoy, proxyless gRPC) are not gated:
// any node serves them from its replicated state, leader or not, and an
// Envoy or a grpc-go client keeps its configuration current through any
// manager it reaches (grpc-go changes servers only while it lacks
// resources).
//
// # Envoy and proxyless gRPC
//
// The lease table also satisfies manager.RingObserver: the manager tells it
// each namespace's ring view (lease.RingView: R, the routing header, and the
// owners of the desired ring with their V_h, derived from the replicated
// owner records) on every node, after every change, versioned by the raft
// index. BuildEnvoyResources turns a view into, all named after the
// namespace ns:
//
//   - Listener "<ns>/envoy" (EnvoyListenerName) on
//     LeaseTableConfig.EnvoyListener (default 127.0.0.1:10000), for Envoy;
//     and Listener "<ns>", an API listener, for gRPC clients dialing
//     xds:///<ns>. Both hold an HttpConnectionManager with the router filter
//     and RDS over ADS. The API listener is sent only to subscriptions that
//     name it: Envoy subscribes to every Listener, and refuses API
//     listeners that arrive over LDS; gRPC names the one it wants.
//   - RouteConfiguration "<ns>": one virtual host for every domain, prefix
//     "/" to cluster ns, hash_policy on the routing header (lower-cased),
//     terminal, and a retry policy: retry_on
//     "retriable-status-codes,unavailable", status 421, 5 retries, back-off
//     from 25 ms to 250 ms.
//   - Cluster "<ns>": EDS over ADS, RING_HASH with XX_HASH and
//     minimum_ring_size = maximum_ring_size = R, no health checks, no
//     outlier detection.
//   - ClusterLoadAssignment "<ns>": one locality of weight 1 with an
//     endpoint per owner of the desired ring, load_balancing_weight V_h and
//     filter_metadata["envoy.lb"]["hash_key"] its name. Since Σ V_h = R and
//     the ring size is pinned to R, Envoy and gRPC build the manager's ring
//     entry for entry (package ring, "The ring").
//
// Every resource, and the messages packed in it, passes its generated
// ValidateAll before it is published; a view whose resources do not is
// logged and counted (Stats.BadRings) and the last good resources stay.
// Ring views share the namespace's coalescing (at most one publication per
// FlushInterval, the first at once, the latest winning). Until a client
// asks for one of a namespace's Envoy types, its ring views are only
// checked as a publication would check them and the latest good one kept;
// the first such request publishes it before its watch is made, and later
// views are published as they come. Building the resources costs in
// proportion to the owners (21 ms and 7 MB of allocation at 5,000), on
// every node and for every change, which a pool served only to Lookups
// and fuge-proxies would pay for nothing. A publication
// compares each resource with the one last published and updates only
// those that changed, at the view's version: a join or a drain sends new
// Endpoints and nothing else. Versions are raft indexes, the same on every
// node and growing with every change; the namespace's LSN would not do,
// because a change of owners that moves no arc yet (a join, whose arcs are
// first recalled) commits no lookup-view change and leaves the LSN as it
// was.
//
// Both ADS variants serve these types from further caches of the
// namespace, on the same streams as the lease table. Listeners and
// Clusters are full-state types: Envoy subscribes to them by wildcard and
// every response holds all of them; Routes and Endpoints are subscribed by
// name. A state-of-the-world subscription by name is answered when a named
// resource exists, or at once for Listeners and Clusters once the namespace
// has a ring, so that a client asking for a listener that does not exist
// learns so. NACKs of these types are logged with their error detail and
// counted like any other (Stats.NACKs, fuge_xds_nacks_total in /metrics).
//
// # Endpoints during a handoff
//
// The Endpoints list the owners of the desired ring, not the holders of
// the leases at that moment. The desired ring is (name, V_h) pairs summing
// to R, which is exactly what Envoy and gRPC can be told; the granted
// table in the middle of a handoff is not: an arc being recalled is held by
// its old owner while the ring's entry for it already names the new one,
// and no set of weighted endpoints makes Envoy's ring split that way. So
// when an owner joins or drains, clients switch to the new ring as soon as
// it is committed, up to one round trip (the recall, then the grant) before
// the new owner holds what it is now sent. A request in that gap reaches an
// owner that does not hold its key, which ownerguard refuses (421 over
// HTTP, UNAVAILABLE over gRPC) and the route retries after 25 ms, 50 ms, ...
// until the grant has landed: no request is served by a server without the
// lease, and the handoff costs a retry, not an error. A client that has not
// yet received the new Endpoints sends requests to the old owner, which
// still holds its arcs until it releases them, or refuses them once it has.
package xds
