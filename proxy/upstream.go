package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The proxy's client side: a pool of keep-alive connections per owner, and
// HTTP/1.1 framing of its own (framing.go) instead of fasthttp's client.
//
// Why not fasthttp.HostClient: on the benchmark's layout (one proxy core,
// 64 connections, 64-byte answers) four fifths of the proxy's CPU is
// system calls, and fasthttp's client makes one more than it needs per
// request: having written the request it reads at once, which cannot
// succeed yet (the owner has not answered), so the read fails with EAGAIN
// and the goroutine parks. Here the request is written from inside
// RawConn.Read's wait loop, after the poller's readiness was reset, so the
// first read comes once the answer is there: a request costs one write and
// one read to the owner, as in HAProxy. The request head is serialized
// once from the client's parsed header, the answer's head is parsed once
// into the client's response, and the read deadline is only moved when it
// drifted by more than an eighth of UpstreamTimeout.

// upConn is one connection to an owner, carrying one request at a time.
type upConn struct {
	nc   net.Conn
	raw  syscall.RawConn // plain TCP; nil otherwise (TLS, in-memory)
	pool *connPool

	buf  []byte // bytes read from the owner, buf[r:w] not yet used
	r, w int
	head respHead

	// exchange's and fill's state, shared with exchangeFn and readFn.
	exchangeFn func(fd uintptr) bool
	readFn     func(fd uintptr) bool
	pending    []byte
	sent       bool
	readN      int
	ioErr      error

	deadline time.Time // the read deadline set on the socket
	want     time.Time // the attempt's read deadline
	idleAt   int64     // when it was last put back, ns since epoch

	// wrote and readTime are when the request was sent and when bytes of
	// its answer were last read (ns since epoch), for abandonWaiting.
	wrote, readTime atomic.Int64
	once            sync.Once
	lat             latencyCounts // this connection's share of the owner's histogram

	// Pipelining (connPool.acquire). pipeOK is send's pipe; pipeable is
	// set once the request that took c idle was written, if it may have
	// requests behind it; broken, once an answer failed or the owner
	// closes after it: the requests behind fail. The rest is the pool's,
	// under its lock: inflight counts the requests sent and not yet done
	// (the one reading included), turns holds the waiting ones' turns in
	// the order they were written, busyAt is c's index in pool.busy.
	pipeOK   bool
	pipeable atomic.Bool
	broken   atomic.Bool
	inflight int
	turns    []chan struct{}
	busyAt   int
	pw       []byte // pipeWrite's bytes left
	pwErr    syscall.Errno
	pwFn     func(fd uintptr) bool
}

// errPipelineBroken: an answer before a pipelined request's failed, or
// the owner closed the connection after it, so this request's answer
// will not come. The request was sent, and may have been executed.
var errPipelineBroken = errors.New("proxy: an earlier answer on the pipelined connection failed")

// errNoFreeConns: every connection to the owner stayed busy until the
// attempt's deadline.
var errNoFreeConns = errors.New("proxy: no free connection to owner")

// dialError marks a failure to connect to an owner: the request was not
// sent, so any request may be retried.
type dialError struct{ err error }

func (e *dialError) Error() string { return "proxy: dial owner: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// notSent reports whether err means that the request never left the proxy:
// the owner refused the connection (or could not be reached), or no
// connection to it was free.
func notSent(err error) bool {
	var de *dialError
	return errors.As(err, &de) || errors.Is(err, errNoFreeConns)
}

func newUpConn(nc net.Conn, pool *connPool) *upConn {
	c := &upConn{nc: nc, pool: pool, buf: make([]byte, 4<<10)}
	if tc, ok := nc.(*net.TCPConn); ok && rawIO {
		if raw, err := tc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	c.exchangeFn, c.readFn, c.pwFn = c.exchangeStep, c.readStep, c.pipeWriteStep
	c.busyAt = -1
	return c
}

// pipeWrite writes w, a whole request, behind the requests in flight on c,
// without waiting: the pool calls it under its lock, so that requests are
// written in the order of their turns. It reports false, having written
// nothing, when the socket's buffer is full. A write that the buffer
// takes only in part is finished by a blocking write until deadline. An
// error breaks c.
func (c *upConn) pipeWrite(w []byte, deadline time.Time) (sent bool) {
	c.pw, c.pwErr = w, 0
	if err := c.raw.Write(c.pwFn); err != nil {
		c.pwErr = syscall.EIO
	}
	switch {
	case c.pwErr == syscall.EAGAIN && len(c.pw) == len(w):
		return false
	case c.pwErr == syscall.EAGAIN:
		if c.nc.SetWriteDeadline(deadline) != nil {
			break
		}
		if _, err := c.nc.Write(c.pw); err == nil {
			c.pw = nil
			return true
		}
	case c.pwErr == 0:
		c.pw = nil
		return true
	}
	c.pw = nil
	c.broken.Store(true)
	c.nc.Close() // the reader fails; c.close comes when the last request is done
	return false
}

// pipeWriteStep is RawConn.Write's callback for pipeWrite: it never waits.
func (c *upConn) pipeWriteStep(fd uintptr) bool {
	for len(c.pw) > 0 {
		n, e := rawWrite(fd, c.pw)
		if e != 0 {
			c.pwErr = e
			return true
		}
		c.pw = c.pw[n:]
	}
	return true
}

// leftover reports whether c holds bytes read beyond the answers asked
// for: once no request is left on it, such a connection is not trusted
// with another (connPool.done).
func (c *upConn) leftover() bool { return c.r != c.w }

// send writes w, a whole request, on c, which carries nothing else, and
// reads the owner's answer into resp (answer). Once w is written, c takes
// pipelined requests behind it if pipe is set (connPool.acquire).
//
// The read deadline is moved lazily, as a client connection's
// (lazyDeadline): an earlier one at once, a later one when the one set fires.
func (c *upConn) send(w []byte, pipe bool, resp *fasthttp.Response, head bool, now time.Time, timeout time.Duration, deadline time.Time) (keep bool, err error) {
	c.wrote.Store(int64(now.Sub(epoch)))
	if err := c.setWant(now, timeout, deadline); err != nil {
		return false, err
	}
	c.pipeOK = pipe
	if err := c.exchange(w, c.want); err != nil {
		return false, err
	}
	return c.answer(resp, head)
}

// answerTurn reads the answer to a request that was pipelined on c, once
// every answer before it has been read (its turn came): the request was
// sent at now.
func (c *upConn) answerTurn(resp *fasthttp.Response, head bool, now time.Time, timeout time.Duration, deadline time.Time) (keep bool, err error) {
	if c.broken.Load() {
		return false, errPipelineBroken
	}
	if err := c.setWant(now, timeout, deadline); err != nil {
		return false, err
	}
	return c.answer(resp, head)
}

// setWant sets the attempt's read deadline, want: timeout after now, or
// deadline if that is earlier. The socket's is moved at once only if want
// is earlier (lazyDeadline).
func (c *upConn) setWant(now time.Time, timeout time.Duration, deadline time.Time) error {
	want := now.Add(timeout)
	if deadline.Before(want) {
		want = deadline
	}
	c.want = want
	if c.deadline.IsZero() || want.Before(c.deadline) {
		if err := c.nc.SetReadDeadline(want); err != nil {
			return err
		}
		c.deadline = want
	}
	return nil
}

// answer reads one answer into resp; head says the request was a HEAD.
// keep reports whether the owner keeps the connection open after it.
func (c *upConn) answer(resp *fasthttp.Response, head bool) (keep bool, err error) {
	interim := 0
	for {
		n, err := c.readHead()
		if err != nil {
			return false, err
		}
		if c.head.status >= 200 {
			copyHead(&resp.Header, &c.head)
			c.r += n
			break
		}
		// 1xx: the final answer follows (101 cannot: Upgrade is stripped).
		if c.head.status == fasthttp.StatusSwitchingProtocols || interim == maxInterimResponses {
			return false, malformed("status %d", c.head.status)
		}
		c.r += n
		interim++
	}
	h := &c.head
	keep = h.keepAlive
	switch {
	case !h.hasBody(head):
		if head && h.length >= 0 {
			resp.Header.SetContentLength(int(h.length))
		}
	case h.chunked:
		err = c.readChunked(resp)
	case h.length >= 0:
		err = c.readBody(resp, h.length)
	default: // delimited by the end of the connection
		keep = false
		err = c.readToEOF(resp)
	}
	if err != nil {
		return false, err
	}
	return keep, nil
}

// appendRequest serializes req's head and body as the client sent them,
// with the edits serve made.
func appendRequest(b []byte, req *fasthttp.Request) []byte {
	body := req.Body()
	if len(body) > 0 || !req.Header.IsGet() && !req.Header.IsHead() {
		req.Header.SetContentLength(len(body))
	}
	b = req.Header.AppendBytes(b)
	return append(b, body...)
}

// copyHead hands the owner's status and headers to the client's response,
// less the hop-by-hop ones.
func copyHead(dst *fasthttp.ResponseHeader, h *respHead) {
	dst.SetStatusCode(h.status)
	if len(h.reason) > 0 {
		dst.SetStatusMessage(h.reason)
	}
	eachField(h.fields, h.conn, dst.AddBytesKV)
}

// exchange writes w and reads the first bytes of the answer. On plain
// TCP it writes from inside RawConn.Read: Read resets the poller's read
// readiness before calling exchangeStep, so the answer's arrival after
// the write wakes the wait, and no read is tried before it.
func (c *upConn) exchange(w []byte, deadline time.Time) error {
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
	if c.raw == nil {
		if err := c.nc.SetWriteDeadline(deadline); err != nil {
			return err
		}
		if _, err := c.nc.Write(w); err != nil {
			return err
		}
		return c.fill()
	}
	c.pending, c.sent, c.readN, c.ioErr = w, false, 0, nil
	spin := c.pool.spin
	if spin != nil {
		spin.waiting.Add(1)
	}
	err := c.raw.Read(c.exchangeFn)
	for err != nil && c.rearm(err) {
		err = c.raw.Read(c.exchangeFn) // reads, or writes if it had not
	}
	if spin != nil {
		spin.waiting.Add(-1)
	}
	if err != nil {
		return err
	}
	if c.ioErr != nil {
		return c.ioErr
	}
	if !c.sent {
		// The socket's buffer is full (a large request): write the rest
		// the ordinary way, then read.
		if err := c.nc.SetWriteDeadline(deadline); err != nil {
			return err
		}
		if _, err := c.nc.Write(c.pending); err != nil {
			return err
		}
		c.pending = nil
		c.pipeable.Store(c.pipeOK)
		return c.fill()
	}
	return c.got(c.readN)
}

// exchangeStep is RawConn.Read's callback: the first call writes, and
// polls for the answer a while if the request is alone in flight
// (spinner); the others read. It returns false to wait for the socket to
// be readable.
func (c *upConn) exchangeStep(fd uintptr) bool {
	if c.sent {
		return c.readStep(fd)
	}
	for len(c.pending) > 0 {
		n, e := rawWrite(fd, c.pending)
		switch {
		case e == syscall.EAGAIN:
			return true // exchange finishes the write
		case e != 0:
			c.ioErr = e
			return true
		}
		c.pending = c.pending[n:]
	}
	c.sent = true
	c.pipeable.Store(c.pipeOK) // requests may follow it now (connPool.acquire)
	if c.pool.spinOK.Load() && c.pool.spin.await(fd) {
		return c.readStep(fd)
	}
	return false
}

// readStep is RawConn.Read's callback for one read into buf.
func (c *upConn) readStep(fd uintptr) bool {
	n, e := rawRead(fd, c.buf[c.w:])
	switch {
	case e == syscall.EAGAIN:
		return false
	case e != 0:
		c.ioErr = e
		n = 0
	}
	c.readN = n
	return true
}

// fill reads more of the answer into buf, making room first.
func (c *upConn) fill() error {
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
	if c.w == len(c.buf) {
		if c.r > 0 {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		} else {
			if len(c.buf) >= maxResponseHeadBytes+maxChunkLineBytes {
				return malformed("line over %d bytes", len(c.buf))
			}
			nb := make([]byte, 2*len(c.buf))
			copy(nb, c.buf[:c.w])
			c.buf = nb
		}
	}
	if c.raw != nil {
		c.readN, c.ioErr = 0, nil
		err := c.raw.Read(c.readFn)
		for err != nil && c.rearm(err) {
			err = c.raw.Read(c.readFn)
		}
		if err != nil {
			return err
		}
		if c.ioErr != nil {
			return c.ioErr
		}
		return c.got(c.readN)
	}
	n, err := c.nc.Read(c.buf[c.w:])
	for n == 0 && err != nil && c.rearm(err) {
		n, err = c.nc.Read(c.buf[c.w:])
	}
	if err != nil && n == 0 {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return c.got(n)
}

// rearm reports whether err is the socket's read deadline firing before
// the one the attempt asked for, moving it there: the read goes on.
func (c *upConn) rearm(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || !c.want.After(c.deadline) || !time.Now().Before(c.want) {
		return false
	}
	c.deadline = c.want
	return c.nc.SetReadDeadline(c.want) == nil
}

// got accounts for n bytes read into buf.
func (c *upConn) got(n int) error {
	if n == 0 {
		return io.ErrUnexpectedEOF
	}
	c.w += n
	c.readTime.Store(int64(time.Since(epoch)))
	return nil
}

// readHead reads until buf[r:] starts with a whole response head, parses
// it into c.head and returns its length.
func (c *upConn) readHead() (int, error) {
	for {
		n, err := parseHead(c.buf[c.r:c.w], &c.head, LostHeader)
		if err != nil || n > 0 {
			return n, err
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
}

// readBody appends n bytes of body to resp.
func (c *upConn) readBody(resp *fasthttp.Response, n int64) error {
	for n > 0 {
		if c.r == c.w {
			if err := c.fill(); err != nil {
				return err
			}
		}
		k := int(min(n, int64(c.w-c.r)))
		resp.AppendBody(c.buf[c.r : c.r+k])
		c.r += k
		n -= int64(k)
	}
	return nil
}

// readToEOF appends everything until the owner closes the connection.
func (c *upConn) readToEOF(resp *fasthttp.Response) error {
	total := 0
	for {
		resp.AppendBody(c.buf[c.r:c.w])
		total += c.w - c.r
		c.r = c.w
		if total > maxResponseBodyBytes {
			return malformed("body over %d bytes", maxResponseBodyBytes)
		}
		if err := c.fill(); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return err
		}
	}
}

// readChunked decodes a chunked body into resp, trailers discarded.
func (c *upConn) readChunked(resp *fasthttp.Response) error {
	var total int64
	for {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		n, err := parseChunkSize(line)
		if err != nil {
			return err
		}
		if total += n; total > maxResponseBodyBytes {
			return malformed("body over %d bytes", maxResponseBodyBytes)
		}
		if n == 0 {
			break
		}
		if err := c.readBody(resp, n); err != nil {
			return err
		}
		if line, err := c.readLine(); err != nil {
			return err
		} else if len(line) > 0 {
			return malformed("chunk data longer than its size")
		}
	}
	for trailers := 0; ; trailers += 1 {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if _, _, err := splitField(line); err != nil || trailers > 64 {
			return malformed("trailer %q", clip(line))
		}
	}
}

// readLine returns the next line of buf, reading as needed.
func (c *upConn) readLine() ([]byte, error) {
	for {
		line, rest, ok := nextLine(c.buf[c.r:c.w])
		if ok {
			c.r = c.w - len(rest)
			return line, nil
		}
		if c.w-c.r > maxChunkLineBytes {
			return nil, malformed("line over %d bytes", maxChunkLineBytes)
		}
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
}

// usable reports whether an idle connection can carry a request: on plain
// TCP, one non-blocking read must find nothing (neither the end of the
// connection nor bytes no request asked for). Elsewhere it cannot tell
// without reading, and says yes.
func (c *upConn) usable() bool {
	if c.raw == nil {
		return true
	}
	// The last attempt's deadline may have passed: clear it (setWant
	// sets the next one).
	if c.nc.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	c.deadline = time.Time{}
	ok := false
	err := c.raw.Read(func(fd uintptr) bool {
		_, e := rawRead(fd, c.buf[:1])
		ok = e == syscall.EAGAIN
		return true
	})
	return err == nil && ok
}

// waiting reports whether c sent a request at least grace ago and has read
// nothing since.
func (c *upConn) waiting(grace time.Duration) bool {
	w := c.wrote.Load()
	return w > c.readTime.Load() && time.Duration(int64(time.Since(epoch))-w) >= grace
}

// close closes the connection and takes it out of its pool's set, once.
func (c *upConn) close() {
	c.once.Do(func() {
		c.nc.Close()
		c.pool.forget(c)
	})
}

// epoch is the base of upConn's times.
var epoch = time.Now()
