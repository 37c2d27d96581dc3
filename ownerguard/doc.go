// Package ownerguard is Fuge's Owner library: the backend side of the lease
// protocol (Centrifuge §2.3, PRS §2.2 and §4.3), and the checks a backend
// makes before it serves a key.
//
// # The core
//
// Core is a pure state machine. It does no I/O, starts no goroutine and reads
// no clock; every call takes the current time, and returns an Output: at most
// one request to send, and the ownership upcall (ranges granted and revoked).
// A thin shell owns the stream to the manager and a timer: it sends what
// Start returns, feeds each response to Step, calls Tick at NextDeadline, and
// after each call publishes View for the request handlers.
//
// The owner never asks for a key. It sends a lease.LeaseRequest every
// RenewInterval (T/4), and at once whenever a response changed what it holds,
// listing every lease it holds. The manager answers with the leases it renews
// and, separately, the leases it grants. The owner keeps a renewed lease only
// if it holds that very range under that very generation; it takes every
// grant; it drops at once (recall) whatever it held and the response neither
// renews nor grants; and it refuses the renewal of anything it does not hold,
// listing the refusal in its next request and, more to the point, leaving the
// lease out of Held, which frees it at the manager. A restarted owner is a new
// Core with a new Incarnation: it holds nothing, so it refuses every renewal
// of its previous life, and the manager must grant those ranges anew.
//
// Clocks (Centrifuge §2.3.1): leases in an accepted response are held until T
// after the moment the acknowledged request was sent, by the owner's clock;
// the manager keeps them from others until T·65/60 after it received that
// request. The owner's belief therefore ends first while clock rates differ
// by less than 65/60. Times are compared as Unix nanoseconds, so a shell must
// pass times that do not jump: derive them from a monotonic clock.
//
// Races (Centrifuge §2.3.2): a response whose sequence number is not newer
// than the last one heard from the same manager nonce is dropped as stale. A
// response that does not acknowledge the owner's latest request is dropped as
// racing, because it was written before the manager saw what the owner now
// holds; its sequence number is still recorded, and a fresh request, which
// acknowledges it, is sent after a random backoff unless a response is
// accepted first. A response addressed to another incarnation is dropped.
// Accepting only responses to the latest request is also what makes "T after
// the latest send" a safe start for the lease clock.
//
// # Ownership checks
//
// GetOwnershipHandle and CheckContinuousOwnership (Centrifuge's CheckLeaseNow
// and CheckLeaseContinuous) are local and allocate nothing. A handle carries
// the generation the key was held under, and continuity is checked by
// generation alone: the key is held now under the handle's generation. This
// is sound because a key that is lost, by recall, expiry or restart, can
// never again be held under the generation it was lost under. Generations at
// a point only grow and are never reused, so no later grant carries it; and a
// renewal of a lease that is not held at that instant is refused, never
// taken, so a renewal cannot revive it either. Hence "held now under gen g"
// means "held under g ever since g was first taken", which includes the
// moment the handle was made.
//
// A Core is not safe for concurrent use. Its View is: it is an immutable
// snapshot, replaced (never modified) whenever the held set changes.
//
// # The Owner
//
// Owner is the shell: the network client a backend runs. One session
// goroutine owns the Core. It multiplexes the current stream's responses
// (read by a reader goroutine), one timer (the Core's NextDeadline, the
// reconnect time, the response timeout; times from OwnerConfig.Clock) and
// the context. After every Start, Step and Tick it hands the request to the
// stream's writer, publishes the Core's View through an atomic pointer for
// the checks, queues the ownership upcall (made in order by its own
// goroutine) and wakes Updated waiters.
//
// The Owner opens OwnerService.Lease on a manager from OwnerConfig.Managers.
// A standby refuses with FAILED_PRECONDITION and names the leader in the
// "fuge-leader" trailer, which the Owner follows at once; any other failure
// (an empty trailer while the managers elect, a dropped connection, a
// refusal, no response for ResponseTimeout) makes it back off and try the
// next address. NOT_FOUND, ALREADY_EXISTS and INVALID_ARGUMENT are reported
// by Err, and retried all the same. The same Core, with the same incarnation
// and the same leases, which go on expiring by their own clock, continues
// across streams: on every new stream the Owner sends a fresh request at
// once (Core.Resend), so the session reopens there and a new leader renews
// what it holds under the same generations. Close half-closes the stream
// after the checks have stopped answering, so the manager can tell the end
// of an incarnation (io.EOF) from a lost connection.
package ownerguard
