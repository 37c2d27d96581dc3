// Package lb holds Fuge's Lookup library: a local copy of the manager's lease
// table that answers Lookup(key) without a round trip, and signals loss of
// state when a range's lease generation changes (PRS §2.1, §4.2; Centrifuge
// §2.2).
//
// # The core
//
// Core is a pure state machine, like the manager's lease core and the Owner
// core: it owns no goroutine, socket or clock. Time arrives as an argument.
// The caller, a thin shell, does the I/O:
//
//   - Start(now) once, and send the request it returns.
//   - Step(resp, now) for every LookupResponse that arrives, answered or
//     pushed.
//   - Tick(now) whenever NextDeadline passes.
//
// Each call returns an Output: at most one LookupRequest to send, and the
// loss-notification upcall. Deliver Loss to the application before routing
// more requests to the ranges it names: state kept for those ranges under an
// older generation may be gone (PRS §2.1). The table is already updated when
// the call returns.
//
// A Core is not safe for concurrent use. A shell that serves Lookup from many
// goroutines publishes an immutable copy (see Entries) or guards the Core.
//
// # Synchronization (PRS §4.2)
//
// The manager keeps a change log under an incarnation nonce. The core asks
// with the nonce and LSN it has; the manager answers with the changes after
// that LSN, or with a snapshot. It also pushes changes as they commit. The
// core applies a response only when it follows on from the table it has:
//
//   - a snapshot, from any manager incarnation (a same-incarnation snapshot
//     older than our LSN is dropped);
//   - changes from our manager incarnation that continue exactly from our LSN
//     (FromLSN == LSN); an answer with no changes counts, and is how a quiet
//     manager tells us we are current.
//
// Anything else is dropped. A gap (an earlier push was lost) and changes from
// another incarnation make the core ask again at once; an old or duplicated
// push is dropped silently. The core also asks every SyncInterval.
//
// # Loss notification
//
// Applying a change signals loss on exactly the sub-ranges whose generation
// it changes, unless the change is Clean or its entry's MigratedFrom is the
// generation it replaces (the state was migrated). Applying a snapshot
// signals loss on every range whose generation differs from the table it
// replaces, save where the new entry is MigratedFrom the old generation; the first table signals nothing, since nothing was known
// to be lost. Loss ranges are merged and returned in ring order (ascending
// End). An owner change without a generation change signals nothing.
//
// If no up-to-date response was applied for StalenessBound (by the lookup's
// clock, counted from Start or from the last applied response), Tick signals
// loss on every range once (LossAll). The table stays as a hint; the next
// applied response diffs against it and may signal some ranges again. This
// is conservative by design: PRS allows extra notifications, never missed
// ones.
//
// # The bound B
//
// Let ρ ≤ 1 be the slowest rate of the lookup's clock relative to true time
// and D the longest delay of any message (any copy of it). Assume the manager
// answers and pushes up to date: a response sent at time s carries every
// change committed before s (a snapshot as of s, or changes up to s). Then a
// loss committed at manager time t reaches this lookup by
//
//	B = t + StalenessBound/ρ + D
//
// Proof sketch: a response that arrives after t + D was sent after t, so
// applying it applies the loss (or the loss already was). So if the loss has
// not arrived, the last applied response arrived by t + D, and the staleness
// clock, which runs at least at rate ρ, reaches StalenessBound by
// t + D + StalenessBound/ρ: Tick signals LossAll. The bound assumes the shell
// calls Tick by NextDeadline; add its timer slack to B. With the defaults
// (StalenessBound 30 s, SyncInterval 10 s) a lookup that can reach the
// manager learns of a loss within one push delay, or at worst within a
// SyncInterval plus a round trip if a push was lost.
//
// # The network Lookup
//
// Lookup is the shell that fuge-proxy uses. It follows a manager node over
// delta ADS (AggregatedDiscoveryService.DeltaAggregatedResources), with two
// wildcard subscriptions: ArcBlockTypeURL and HeartbeatTypeURL. The lease
// table comes as 2^bits fuge.v1.ArcBlock resources, bits following the
// ring size (api/wire.BlockBits: 64 blocks up to R = 256, 1,024 at 4096,
// 16,384 at 65536, about 4 arcs a block) and carried in every block
// (block_bits): the circle is cut by the top bits of a position, and block
// b, named api/wire.BlockName(namespace, b), holds the arcs whose end lies
// in it, in ring order (none for an empty block), versioned by the LSN of
// its last change. A block whose bit count or number is out of bounds, or
// an arc outside its block, NACKs the response; blocks of a new bit count
// replace every block held (a table cut anew). The heartbeat is one fuge.v1.Heartbeat the node rewrites every
// heartbeat interval. The node names the namespace in node.cluster and
// node.metadata["fuge.namespace"]. The Lookup starts at a manager at
// random (LookupConfig.InOrder: the first), so Lookups spread over the
// cluster: every standby in contact with the leader serves them, a
// standby heartbeating only while in contact. A standby out of contact
// refuses the stream with FAILED_PRECONDITION and the leader's address in
// the "fuge-leader" trailer; the leader, while a standby is in contact,
// refuses it with UNAVAILABLE and a standby's address in the
// "fuge-standby" trailer (it serves Lookups only with no standby in
// contact, unless configured to). The Lookup goes to the node named next,
// at once (a few times in a row at most), and otherwise tries the managers
// in turn with a grpc-go style backoff. When the standby the leader named
// does not serve it, the Lookup's streams carry "fuge-leader-fallback"
// until it holds a table again, and the leader serves them. Every node
// publishes the same views at the same LSNs; LookupStats.ServedLSN is the
// LSN of the node's last ArcBlock response, and a node behind the blocks
// a Lookup holds waits until it has caught up before answering, so moving
// between nodes never takes a Lookup back in time.
//
// The Lookup keeps the blocks it holds with their versions, which are
// opaque to it, and sends them as initial_resource_versions on every new
// stream, so a manager sends only the blocks that changed. A block sent
// replaces the arcs the Lookup held for it; a block removed is held empty
// (and, having no version, is not sent back). Each ArcBlock response is
// applied whole or not at all: a malformed block (one that does not
// decode, is named for another block, holds an arc that is invalid or does
// not end in it, or whose arcs do not follow each other in ring order) is
// NACKed, nothing of its response is applied, and the stream is restarted
// so that the manager learns again what the Lookup holds. When all the
// blocks are held and their arcs partition the circle, the table is
// complete and fed to the Core as a snapshot (constant ManagerNonce, local
// LSN); the Core diffs it against its table and returns exactly the ranges
// whose generation changed, so a change to one arc, arriving as the one
// block holding it, signals loss on that arc alone. Otherwise (a table
// still arriving in pieces) the response is acknowledged and the table
// waits. Once a table is applied, a response that touches at most a
// quarter of the blocks is applied as changes instead: the arcs of the
// blocks it touched replace theirs in the last table, the arcs around them
// are checked to follow each other, and the Core takes those arcs as
// changes and signals the same loss, at a cost that grows with the change
// rather than with R (a whole table was rebuilt, sorted and diffed on every
// push: tens of milliseconds at R = 65536). A response whose blocks do not
// fit the table is judged whole, as a snapshot.
//
// A heartbeat on a stream whose last ArcBlock response was applied tells
// the Core the manager was heard (an empty change response from our LSN).
// Heartbeats thus replace the Core's polling. The manager coalesces
// pushes (at most one per 10 ms per namespace) and sends a heartbeat only
// after the changes pending before it are flushed, so the bound B above
// holds with D including that coalescing delay and one acknowledgement
// round trip: a change committed just before a heartbeat may wait for the
// Lookup's ACK of the previous ArcBlock response. The Lookup calls the Core's Tick at NextDeadline, connected or
// not, so after StalenessBound without word from a manager it signals
// loss on every range; the next table after reconnecting diffs against the
// old one and signals what changed.
//
// Over xDS a lookup sees tables, not changes: an arc carries MigratedFrom
// (fuge.v1.Arc field 6), the generation whose state its own continues after
// a clean migration. An arc whose generation changed signals no loss when
// MigratedFrom is the very generation this lookup knew; when it is another
// (the lookup missed a generation, which may have been a loss) it signals,
// an extra notification that PRS allows.
//
// A Lookup dials a connection of its own for each stream. Lookups in one
// process (a router following several namespaces, a load generator) can
// share connections instead (LookupConfig.Conns, a ConnPool): each keeps its
// own stream and table, and the manager and the process save grpc-go's
// three goroutines and buffers per connection. A whole table arriving on
// a connection is decoded into one array, in block order, which becomes
// the published table without a copy.
//
// # Balancers
//
// Balancer is what fuge-proxy routes by: Pick(keyHash) returns the backend
// (address, range, generation) and Updated signals a change. Two
// implementations: LeaseBalancer, the lease ring (a Lookup), and RoundRobin,
// the baseline the benchmark compares against (an atomic counter over an
// immutable snapshot of the pool, static or following a Lookup's owners),
// which ignores the key. Pick takes no lock and does not allocate.
package lb
