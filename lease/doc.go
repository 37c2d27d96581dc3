// Package lease holds the messages that Fuge's three pure cores exchange: the
// manager's lease core (package manager), the Owner core (package ownerguard)
// and the Lookup core (package lb). It imports only ring; the protobuf types of
// the wire API convert to and from these at the edge.
//
// # Owner–manager protocol (Centrifuge §2.3, PRS §4.3)
//
// An owner opens a session by sending a LeaseRequest with Seq 1 under a fresh
// incarnation nonce. It then sends a LeaseRequest every T/4, and also at once
// after a response changed what it holds. Each request carries the complete
// set of leases it holds and wants renewed. The manager answers every accepted
// request, and also writes on its own when it recalls or grants, with a
// LeaseResponse carrying the complete set it renews and, separately, the
// leases it newly grants. A lease held by the owner and absent from both lists
// is recalled: the owner drops it at once. A renewal of a lease the owner does
// not hold (it restarted, or the lease expired locally) is refused: the owner
// does not take it, and its next request omits it, so the manager frees the
// range and grants it anew under a new generation.
//
// A clean leave: an owner that closes first stops believing it holds
// anything (from that instant its checks fail), then sends a last request
// with Held empty and Leaving set. A manager that accepts it takes the owner
// out of the ring and, since Held is empty, releases all its leases and
// grants them to the others in the same step, rather than T·65/60 later. The
// order is the safety argument: the owner's belief has ended before any
// other owner can be granted what it held. A leaving request that races a
// message to the owner (it does not acknowledge it) is still taken as a
// leave, and as nothing more: the race filter guards against a Held list
// written without a grant the owner would go on to believe, and a leaving
// owner believes nothing, whatever reaches it later. Its Migrated ranges
// then count as plain releases.
//
// State migration (manager/migrate.go, ownerguard/core_migrate.go): an
// owner that serves MigrationService names it (MigrationAddr). A recall
// caused by a change of the desired ring while both owners are alive is
// sent as a migration (LeaseResponse.MigrateOut, naming the new owner); the
// old owner stops serving the range, releases it listing it as Migrated,
// and offers its state to the new owner, which is granted the range as an
// import (MigrateIn, naming the old owner) and serves it only once it has
// fetched the state, or gives it back when that fails or its deadline
// passes. The lookups' view marks the new generation MigratedFrom the old
// one. Anything else is a plain handoff. Handover asks for a drain with
// migration, which Owner.Close sends before leaving.
//
// Owner names and incarnations: an owner's name is its place in the ring
// (its hash_key), not an identity. Each process that runs under a name is
// an incarnation with a fresh random nonce, and the manager assumes nothing
// about how many processes use a name at once: a restarted pod under a
// stable name may start while its predecessor still runs, cut off from the
// manager, believing its leases until they run out. So when a request
// opens a new incarnation of a name, the manager retires the previous one
// (its later requests are refused, and it can renew nothing), and the arcs
// it held become orphans: nobody may renew or release them, and they are
// granted again, to the new incarnation or anyone else, only when they
// expire, T·65/60 after the manager last heard from the old incarnation.
// Until then the new incarnation waits and is granted nothing, so every
// arc held under a name belongs to a single incarnation; the replicated
// owner record says which (a waiting incarnation's name holds only
// orphans), so a new leader restores the same rule. The price is that a
// restart under the same name waits out the hold like a crash does; a
// clean leave (Owner.Close) releases everything at once and avoids it.
//
// Clocks (Centrifuge §2.3.1): every message from the manager acknowledges one
// request (AckSeq). The owner holds everything in an accepted response until
// T after the moment it sent that request, by its own clock; the manager keeps
// those leases unavailable to others until T·65/60 after it received that
// request, by its clock. If clock rates differ by less than 65/60, the owner's
// belief ends before the manager's hold does.
//
// Races (Centrifuge §2.3.2): every message carries the sender's incarnation
// nonce and sequence number and the last nonce and sequence number it heard
// from the peer. A receiver drops a message whose sequence number is not newer
// than the last it heard (a duplicate or a late message), and drops as racing a
// message that does not acknowledge the receiver's own latest message; it still
// records the racing message's sequence number, and re-sends a fresh message of
// its own after a random backoff. A message addressed to another incarnation
// is dropped.
//
// # Lookup–manager protocol (Centrifuge §2.2.1, PRS §4.2)
//
// The manager keeps a change log of the lookups' view of the lease table:
// each change sets a range to (owner, address, generation) and has a log
// sequence number (LSN). A lookup asks with the manager nonce and LSN it has;
// the manager answers with the changes after that LSN, or with a snapshot of
// the whole table when the log was truncated past it, when the nonce differs,
// or when the snapshot is smaller than the changes. Generations per range only
// grow; a lookup signals loss on every range whose generation changed, except
// when the change is marked as a clean migration: its entry is MigratedFrom
// the very generation the lookup knew.
package lease
