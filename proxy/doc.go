// Package proxy is fuge-proxy: a fasthttp reverse proxy in front of a pool
// of owners that sends each request to the owner holding its key, and
// retries briefly while a range changes hands (DESIGN.md, "Who uses it").
//
// # Routing
//
// The key is the one value of the routing header (X-Fuge-Key by default),
// hashed with XXH64 (ring.Hash) exactly as the manager, Envoy and grpc-go
// hash it. A request that repeats the header is refused with 400, since
// Envoy and gRPC combine repeats differently; a request without it (or with
// an empty one) gets 400 too, or, under MissingKeyRoundRobin, goes to the
// owners in turn. An lb.Balancer picks the owner: by default the lease ring
// of an lb.Lookup that follows the namespace's lease table from the
// managers (BalanceLease), or the round-robin baseline over the same
// owners (BalanceRoundRobin), everything else equal, so that a benchmark
// compares balancing and nothing else.
//
// The request goes to the owner over a pool of keep-alive connections of
// its own (MaxConnsPerOwner at most), created on first use and dropped when
// the owner leaves the table. A request that finds no idle connection takes
// whichever comes first, one put back by another request or one the pool
// dials for it (at most 4 dials at once per owner), so that it never waits
// for a dial, a TLS handshake above all, when a connection frees up sooner;
// a failed dial fails the requests waiting as refused. The proxy writes the request and reads the
// answer with HTTP/1.1 framing of its own (see "The owner side"). Under
// the lease ring the proxy stamps Fuge-Generation with the generation it
// routed under, so that an owner that has not yet heard of its grant
// refuses the request (ownerguard) instead of serving it; a Fuge-Generation
// sent by the client is dropped, and so is Expect (the proxy has read the
// body before it forwards). Hop-by-hop headers
// (Connection and those it names, Keep-Alive, Proxy-Connection,
// Proxy-Authenticate, Proxy-Authorization, TE, Trailer, Transfer-Encoding,
// Upgrade) are removed both ways, keeping the order of the others; the
// client's address is appended to X-Forwarded-For. Upgrades (WebSocket)
// are therefore not proxied. A Connection header naming the routing header
// or Fuge-Generation removes neither: the owner reads the key the proxy
// hashed and the generation it stamped.
//
// Under load the proxy pipelines (HTTP/1.1, RFC 9112 §9.3.2) to owners it
// reaches over plain TCP: once PipelineConns (4) connections to an owner
// carry requests, an idempotent request is written at once behind the
// others on the busy connection with the fewest in flight, up to
// PipelineDepth (8), never behind a non-idempotent one. The owner then
// reads several requests in one read (and fasthttp's server, which
// flushes only when no request is left buffered, answers them in one
// write), and the proxy reads several answers at once. Each request
// reads its own answer in turn: the one before it hands it the connection
// (connPool.done), and an answer that fails fails every request behind it
// (errPipelineBroken: sent, so 502 or retried as any idempotent request).
// A request behind others waits for their answers; so that a slow owner
// keeps its requests in parallel, the pool pipelines only while the
// fastest of the owner's last 256 answers took at most 200 µs (the
// fastest, not the mean: queueing in the owner falls out). On make
// bench's layout (wrk -c64, three fasthttp owners on the client's core)
// pipelining raised fuge-proxy's requests per second by a fifth against
// the same proxy without it (--pipeline-depth 1).
//
// At low load the proxy spends CPU for latency instead (spin.go): a
// request that is the only one in flight, once written to its owner,
// polls the owner's socket for up to SpinWait (50 µs) before sleeping,
// because a CPU that sleeps while the owner works wakes up late (on a
// virtual machine, by about ten microseconds). It yields to anything
// runnable and stops as soon as another request waits for an owner or a
// client socket has something, so under load it never runs.
//
// # Retries
//
// An owner that answers 421 Misdirected Request does not hold the key (the
// proxy's table is stale, or the owner's is); a connection that is refused
// or cannot be made means nothing was sent. In both cases the proxy waits
// for the balancer's next update or a backoff (5 ms, doubling), whichever
// comes first, picks again and retries; if the table already moved the key
// it retries at once. When the retry budget (10 s from the request's
// arrival) runs out it answers 503 with Retry-After: 1. Writing a request
// and reading its answer take UpstreamTimeout each at most, and no attempt,
// waiting for a free connection to its owner included, ends later than
// UpstreamTimeout after the budget: a request is answered within
// RetryBudget + UpstreamTimeout of its arrival. An owner that accepts
// connections and never answers (a black hole) so holds its own pool
// (MaxConnsPerOwner) and nothing else, each connection for UpstreamTimeout
// at most, and requests for other owners do not wait on it. Any other failure
// (a timeout, a reset or a malformed response after the request was sent)
// may mean the owner executed the request: an idempotent request (GET,
// HEAD, PUT, DELETE, OPTIONS, TRACE) is retried in the same way and gets
// 502 when the budget runs out; any other (POST, PATCH, ...) gets 502 at
// once, never a second copy. A non-idempotent request sent on a pooled
// connection that the owner had just closed falls in that last case too.
//
// When the table no longer names an owner at all (its leases expired: it
// crashed, is paused or is cut off from the managers), the proxy closes
// each connection to it on which a request has waited AbandonGrace (250
// ms) for an answer, so requests waiting on it do not wait out
// UpstreamTimeout: an idempotent one is retried at once on the key's new
// owner, any other gets 502. An owner that is answering is left to finish. With the default lease (T = 8 s, held T·65/60)
// and retry budget (10 s), a request that reached a crashed or paused owner
// is served by the key's next owner within the budget. An owner that only
// lost some ranges stays: it is alive and answers 421 for the keys it lost.
//
// # The owner side
//
// fasthttp serves the clients; the owners are reached without fasthttp's
// client, for the sake of the system calls. On the benchmark's layout (one
// core for the proxy, 64 client connections, 64-byte answers) four fifths
// of the proxy's CPU is spent in the kernel, and HAProxy makes two writes
// and two reads per request. fasthttp's client made a third read: having
// written the request, it reads at once, which can only fail with EAGAIN
// since the owner has not answered yet, and then parks. Here the request
// is written from inside syscall.RawConn's read loop, after the poller's
// readiness was reset, so the first read waits for the answer's arrival
// (upConn.exchange). Reads and writes on every TCP socket, the clients' too,
// are raw system calls: marked ones (entersyscall) let the sysmon thread,
// which shares the proxy's core, hand the P to a second thread whenever it
// catches one twice, and the two threads then traded the core about 2,000
// times a second. Deadlines are moved lazily, each move being a change to
// a runtime timer: a client connection's deadline asked for later than the
// one set is set only when that one fires, and the read or write goes on
// (fasthttp asks three times per request); an owner connection's read
// deadline the same way.
//
// The request head is the client's as fasthttp parsed it, with the edits
// above, written in one system call with its body. The answer's head is
// parsed once (parseHead) and copied to the client's response without its
// hop-by-hop headers; its body, by Content-Length, chunks (trailers
// dropped) or the end of the connection, is read whole, as fasthttp's
// client did. An answer the proxy cannot read one way only is a failed
// attempt (502, or a retry if idempotent) and its connection is closed: a
// status line other than HTTP/1.0 or 1.1 and three digits, both
// Content-Length and Transfer-Encoding, Content-Lengths that differ, a
// transfer coding other than chunked, folded or malformed header lines,
// control characters in a value, a head over 64 KiB, a body over 1 GiB, a
// chunk line over 4 KiB, 101 Switching Protocols (the proxy strips
// Upgrade) or more than eight 1xx answers before the final one. A
// connection is reused only after a complete answer that left no byte
// unread and did not say Connection: close; one idle for 10 s is closed
// when the pool next hands one out, and one idle for a second is first
// checked with a non-blocking read, so that a request (a POST, which is not
// retried) is not sent on a connection the owner closed meanwhile.
//
// # Limits and operations
//
// ReadTimeout bounds reading a whole request from its first byte, so a
// client sending it slowly (slowloris) is cut off, and connections beyond
// MaxConns are refused with 503; neither blocks other clients. One client
// address may hold MaxConnsPerIP connections (256), idle ones included, and
// its connections beyond that get 429, so that one client cannot take all of
// MaxConns; IPv6 addresses count one by one, so a client with a whole prefix
// is bounded by MaxConns only. A header over MaxHeaderBytes gets 431, a
// body over MaxBodyBytes 413. A request with both Content-Length and
// Transfer-Encoding gets 400 and its connection is closed (RFC 9112 §6.3:
// a front end that framed it by Content-Length would take the rest of the
// body for a request of its own), and one without Host (HTTP/1.0 allows it)
// gets 400. The admin
// listener, apart from the proxied one so that no proxied path is
// shadowed, serves GET /metrics (Prometheus: requests by status class,
// attempts, retries, misroutes, refusals, upstream errors, give-ups, and
// upstream latency by owner) and GET /healthz (200 once the balancer has a
// table). The counters a request touches are sharded by client connection,
// each shard on cache lines of its own, and each owner connection keeps
// its own latency histogram, written only by the request it carries: no
// two cores write one line per request. /metrics sums them. Shutdown stops accepting, closes idle connections, and lets
// requests in flight finish, retries included.
//
// # TLS
//
// The proxy speaks plain HTTP to owners unless BackendTLS is set (fuge-proxy
// --backend-tls); then it dials every owner with TLS, presenting its own
// certificate and accepting only one that its CA issued for the owner role
// (fugetls), so that a process that takes an owner's address without its
// certificate gets no request. The handshake belongs to the dial: it must
// finish within DialTimeout, and a failed one is a refused connection, so
// the request, a POST too, was never sent and is retried until the budget,
// then answered 503. Connections are kept alive, so a handshake is paid
// once per connection and a request pays record encryption:
// BenchmarkProxy/tls-backend took 13.5 µs against 11.5 µs for /plain
// (medians of six runs on a shared two-core machine), about 2 µs a
// request with the owner's side of TLS included. The Lookup reaches the
// managers with mutual TLS under ManagerTLS (fuge-proxy's default).
//
// # Cost
//
// A proxied request in the steady state allocates nothing: the key is
// hashed in place, the balancer reads an immutable table through an atomic
// pointer, the owner's pool comes from an immutable map, one pass over the
// raw request header (scanRequest) decides which edits it needs, header
// edits use pooled buffers, each owner connection keeps its buffers, and
// fasthttp reuses the request and response. The BenchmarkProxy family
// proves it (0 allocs/op; over TLS to the owner, crypto/tls allocates 24
// bytes per record it reads, on each side); BenchmarkProxyTCP is the plain
// case over loopback TCP with the process's CPU time per request.
//
// Where the CPU goes (perf and pprof of fuge-proxy on the bench's layout,
// GOMAXPROCS=1 pinned, wrk -c64; go run ./bench/proxybench -hold keeps it
// up): three quarters is the kernel's, most of it in the two writes (a
// loopback write runs the receiver's TCP input and wakes it), then the
// reads; the scheduler's two parks per request take about 5%, fasthttp's
// parse and serialization about 6%, this package's code about 6%. A
// request costs a read and a write on each side. fasthttp's server reads
// for the next request as soon as it has answered; through net that read
// came before the request could and found nothing (0.44 to 1 system call
// per request, where HAProxy, reading only when epoll says so, made none).
// So the client listener (evconn_linux.go) keeps the clients' sockets in
// an epoll instance of its own, edge-triggered, whose events mark each
// connection readable: a read waits for the mark instead of trying first.
// TestNoReadBeforeData counts the reads that find nothing: 0 in 300
// requests, 218 with a read before each wait. Under wrk -c64 with strace
// (go run ./bench/proxybench -hold) the proxy made 2.02 reads, 2.01 writes
// and 0.06 epoll_pwait per request; HAProxy 2.02 recvfrom, 2.01 sendto,
// 0.03 epoll_wait and 0.07 clock_gettime. The Host
// check reads the header instead of parsing the whole URI (hasHost), the
// client's address is formatted once per connection, and the first
// attempt starts at fasthttp's own clock read.
//
// Tail latency: a runtime trace under wrk -c1 (5 s, about 19,000
// requests) shows the request's goroutine running within 0.6 µs of
// becoming runnable at p99, and every other goroutine (the Lookup's
// stream, gRPC, the GC's worker) running 6 ms in all, 304 µs at the
// longest; the heap stays near 4 MB (one collection in 100 s of load).
// So the p99 that one connection sees is made outside the proxy's
// process: wake-ups, and the CPU it shares with the client and owners.
package proxy
