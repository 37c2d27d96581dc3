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
// accepted first. The backoff's window doubles with each such re-send until
// a response is accepted (binary exponential backoff, up to half the renew
// interval): the manager re-sends after a racing request too, and when
// messages take longer than a fixed window both sides' re-sends keep
// crossing. A response addressed to another incarnation is dropped.
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
// what it holds under the same generations. Close leaves cleanly: once the
// checks have stopped answering it sends a last request with Held empty and
// Leaving set (Core.Leave), so the manager regrants every arc at once
// instead of after T·65/60, then half-closes the stream, so the manager can
// tell the end of an incarnation (io.EOF) from a lost connection.
//
// # Migration
//
// With OwnerConfig.Migration the Owner moves a range's state with the range
// on clean handoffs (core_migrate.go has the protocol, migrate.go the
// transfer). The Core marks a range granted as an import Importing: held,
// listed and renewed, but refused by the checks until the application's
// Migrator.Import has read its state, fetched by the library straight from
// the previous owner's MigrationService (gRPC, mutual TLS with the owners'
// certificates). A range recalled as a migration is dropped at once, like
// any recall; only then is it offered to the owner the manager named, which
// alone may fetch it, once, before ExportTimeout; the ownership upcall
// hears it revoked after the export, so the application still has the
// state to export. The new owner fetches rather than the old one pushing
// because it alone knows when it has been granted the range and under
// which generation, and so the exporter keeps no buffer: Export writes into
// the stream as the importer reads it. The transfer goes owner to owner,
// not through the manager, so that state never crosses the leader, whose
// work stays O(arcs moved) whatever the state's size. A failed, refused or
// late import gives the range back (a plain handoff with a loss
// notification); an offer nobody fetched expires.
//
// # Middleware
//
// Guard applies PRS Fig. 4 to one key per request, around a net/http
// handler (Guard.HTTP), a fasthttp handler (Guard.FastHTTP) or a gRPC
// service (Guard.UnaryServerInterceptor, Guard.StreamServerInterceptor).
// It asks a Checker, which an *Owner is.
//
// Before the handler. The key is the value of the routing header
// (GuardConfig.Header; by default the namespace's, which the manager names
// in every lease response, Owner.RoutingHeader: X-Fuge-Key unless the
// namespace was created with another; gRPC metadata in lower case; until
// the Owner has heard it, every request is refused as not held, 421),
// or what the transport's key function returns, hashed as every router
// hashes it (ring.HashString, XXH64 with seed 0). A request with no key, an
// empty key or the header repeated (the proxy refuses repeats too, since
// Envoy and gRPC combine them differently) gets 400 (gRPC:
// InvalidArgument); so does a Fuge-Generation that is not one decimal
// number. A key not held here gets 421 Misdirected Request (gRPC: see
// below) with a one-line text body naming this server; so
// does a request whose Fuge-Generation is newer than the generation held,
// because its router has heard of a grant this server has not. The handler
// has not run, so a router may retry either elsewhere, or after the next
// table change, whatever the method.
//
// The handler finds the handle in its context (HandleFromContext; also
// HandleFromFastHTTP and HandleFromResponseWriter) and stores it with any
// state it creates, to check it before that state is trusted again. Every
// answer carries Fuge-Owner (GuardConfig.Name); every answer the handler
// made carries Fuge-Generation, the handle's generation, a fencing token
// for clients and storage.
//
// After the handler the guard calls CheckContinuousOwnership. If the lease
// was lost, the answer may rest on state that is no longer this server's,
// and the guard replaces what it still can:
//
//   - net/http buffers the status and body (in pooled buffers) until the
//     handler returns; on a loss it drops them, with the headers the
//     handler set (not those set before the guard ran), and answers 503
//     with Retry-After. What cannot be held back, a body beyond
//     MaxBufferedBody, a Flush or a Hijack, is committed at that point
//     after a check, and from then on every Write is checked first. A loss
//     after the commit makes Write return ErrOwnershipLost, and when the
//     handler returns the guard panics with http.ErrAbortHandler: net/http
//     resets the HTTP/2 stream, or closes the HTTP/1.1 connection before
//     the body is complete, so the client sees a broken response, never a
//     complete stale one. (Not so for an HTTP/1.0 body delimited by the
//     close; and bytes that had left before the loss were checked when
//     written.) A recovering middleware outside the guard must re-panic
//     http.ErrAbortHandler. A hijacked connection belongs to the handler:
//     the guard checks before handing it over, never after.
//   - fasthttp writes the response only after the handler returns, so the
//     guard always replaces it with 503 and Retry-After: a body stream is
//     closed unread, and a hijack the handler asked for is cancelled. But
//     a body stream, and a hijack handler when the lease holds, run after
//     the check: a handler that streams should check the handle itself as
//     it writes (HandleFromFastHTTP holds until the response is written).
//   - gRPC unary: the reply, or the handler's error, which may be just as stale
//     (a NotFound from lost state), becomes codes.Unavailable "fuge: lease
//     lost during the request". Header metadata (fuge-generation,
//     fuge-owner) is set before the handler runs, so it comes with that
//     status too, which makes the response not trailers-only: grpc-go's
//     retry policy (and an xDS route's) does not retry it, as it should
//     not, since the handler ran.
//   - gRPC streams: a message sent cannot be recalled, so every SendMsg is
//     checked first, and every message that left was computed under the
//     lease. After a loss SendMsg returns that Unavailable status, and the
//     stream ends with it whatever the handler returns.
//
// gRPC refusals of a misdirected RPC are codes.Unavailable with a message
// starting "fuge: misdirected" and the trailer "fuge-misdirected: 1".
// Every refusal is trailers-only (fuge-owner and fuge-generation go in the
// trailer), because grpc-go retries only trailers-only responses.
// Unavailable, not FailedPrecondition, because it is the code that gRPC's
// retry policy (retryableStatusCodes) and xDS routes (retry_on
// "unavailable") are configured to retry, and a ring_hash client retries
// where its ring points by then. Unavailable also covers a lost lease,
// after the handler ran: IsMisdirected tells the two apart, for clients
// that must not repeat a non-idempotent RPC.
//
// Costs. BenchmarkMiddleware runs each guard beside the bare handler it
// wraps, so a guard's cost is the difference between the two; its "check"
// is the Owner's share, the two checks alone. Each check reads the
// monotonic clock (the default clock is read directly, with no interface
// call and no time.Time), and those two reads are most of the check and a
// large part of the whole guard; they are never cached or coarsened, since a
// check on an old reading could admit a request after the lease ran out.
// The rest is the transport's: finding the routing header and
// Fuge-Generation, hashing the key, handing the handle over and stamping
// the two response headers (fasthttp copies and scans each value it is
// given; net/http hashes each name into the header map).
//
// In the steady state the fasthttp guard allocates nothing (pooled handle
// boxes; header values formatted once per generation), save once on a
// request that declares trailers, or whose cookies a handler ahead of the
// guard has already parsed. It finds both request headers in one walk over
// the headers, except on a request with a Cookie header, where fasthttp's
// walk would parse the cookies: there it looks the two names up, which
// costs more than the walk but far less than the parse.
//
// The net/http guard's zero-allocation mode is GuardConfig.HTTPNoContext,
// with handlers reading the handle with HandleFromResponseWriter; its
// response writers and buffers are pooled. Without HTTPNoContext, putting
// the handle in the request's context costs one allocation, the copy of
// the request that http.Request.WithContext makes, which carries the
// context node; with the garbage it leaves, that costs more than the rest
// of the guard together.
//
// The gRPC interceptors allocate the handler's context node and grpc-go's
// copy of each metadata value they read (grpc-go offers no way to read
// incoming metadata without copying), and grpc-go allocates again to merge
// the header metadata into the stream's.
package ownerguard
