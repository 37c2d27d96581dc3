package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// perIPListener limits the connections open from each client address, so
// that one client cannot hold all of the server's MaxConns (fasthttp counts
// an idle keep-alive connection against its Concurrency as long as it is
// open). It counts every IPv4 and IPv6 address apart; fasthttp's own
// MaxConnsPerIP leaves IPv6 clients unlimited. Connections whose address is
// not TCP (in-memory listeners) are not limited.
type perIPListener struct {
	net.Listener
	max     int
	refused *atomic.Uint64

	mu sync.Mutex
	n  map[netip.Addr]int
}

// msgPerIP is the whole response to a connection over the limit.
const msgPerIP = "HTTP/1.1 429 Too Many Requests\r\n" +
	"Connection: close\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 51\r\n" +
	"\r\n" +
	"fuge-proxy: too many connections from your address\n"

// limitPerIP wraps ln; max <= 0 means no limit.
func limitPerIP(ln net.Listener, max int, refused *atomic.Uint64) net.Listener {
	if max <= 0 {
		return ln
	}
	return &perIPListener{Listener: ln, max: max, refused: refused, n: map[netip.Addr]int{}}
}

// Accept returns the next connection within its address's limit, answering
// and closing those beyond it.
func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ta, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return c, nil
		}
		a, _ := netip.AddrFromSlice(ta.IP)
		a = a.Unmap()
		l.mu.Lock()
		over := l.n[a] >= l.max
		if !over {
			l.n[a]++
		}
		l.mu.Unlock()
		if over {
			l.refused.Add(1)
			// A new connection's send buffer is empty: the write does not
			// block the accept loop, and the deadline makes sure of it.
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			c.Write([]byte(msgPerIP))
			c.Close()
			continue
		}
		pc := &perIPConn{Conn: c, l: l, addr: a}
		if t, ok := c.(ipTexter); ok {
			pc.ip = t.ipText()
		} else {
			pc.ip = a.AppendTo(nil)
		}
		return pc, nil
	}
}

func (l *perIPListener) release(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[a] <= 1 {
		delete(l.n, a) // no entry per address ever seen
		return
	}
	l.n[a]--
}

// perIPConn gives its address's slot back when closed.
type perIPConn struct {
	net.Conn
	l    *perIPListener
	addr netip.Addr
	ip   []byte // addr's text, for X-Forwarded-For
	once sync.Once
}

func (c *perIPConn) ipText() []byte { return c.ip }

func (c *perIPConn) Close() error {
	c.once.Do(func() { c.l.release(c.addr) })
	return c.Conn.Close()
}

// rawListener hands out TCP connections whose reads and writes are
// rawRead and rawWrite (rawio_linux.go says why) and whose deadlines are
// moved lazily (rawConn.SetReadDeadline); others pass as they are.
type rawListener struct{ net.Listener }

func withRawIO(ln net.Listener) net.Listener {
	if !rawIO {
		return ln
	}
	return rawListener{ln}
}

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	r := &rawConn{Conn: tc, rc: rc}
	if ta, ok := tc.RemoteAddr().(*net.TCPAddr); ok {
		r.ip = appendIP(nil, ta.IP)
	}
	r.readFn, r.writeFn = r.readStep, r.writeStep
	return r, nil
}

// rawConn is a client's TCP connection read and written through
// syscall.RawConn, which waits on the runtime's poller as net does.
//
// fasthttp moves the read deadline twice per request (the idle timeout,
// then the read timeout) and the write deadline once, each a change to a
// runtime timer. rawConn keeps the deadline asked for apart from the one
// set on the socket: an earlier one is set at once, a later one only when
// the socket's fires, and then the read or write goes on. So the deadline
// in force is always the one asked for, and in the steady state a
// connection's timers move once per timeout, not three times per request.
type rawConn struct {
	net.Conn
	rc syscall.RawConn
	ip []byte // the peer's address as text, for X-Forwarded-For (clientIP)

	rb, wb          []byte // the buffer of the Read or Write in progress
	rn, wn          int
	rerr, werr      syscall.Errno
	readFn, writeFn func(uintptr) bool

	mu     sync.Mutex
	rd, wd lazyDeadline
}

// lazyDeadline is one direction's deadline: asked for, and set on the
// socket, in Unix nanoseconds, 0 for none.
type lazyDeadline struct{ want, set int64 }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// ask records a deadline and reports whether the socket's must move now:
// when the new one is earlier than the one set, or none is set.
func (d *lazyDeadline) ask(ns int64) bool {
	d.want = ns
	if d.set == ns || d.set != 0 && (ns == 0 || ns > d.set) {
		return false // the same, or later: when the one set fires
	}
	d.set = ns
	return true
}

// fired is called when the socket's deadline passed: it reports whether
// the one asked for is later, moving the socket's to it.
func (d *lazyDeadline) fired(now int64) (time.Time, bool) {
	if d.want == d.set || d.want != 0 && d.want <= now {
		return time.Time{}, false
	}
	d.set = d.want
	if d.want == 0 {
		return time.Time{}, true
	}
	return time.Unix(0, d.want), true
}

func (c *rawConn) ipText() []byte { return c.ip }

func (c *rawConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.rd.ask(unixNano(t)) {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *rawConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.wd.ask(unixNano(t)) {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *rawConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := unixNano(t)
	c.rd = lazyDeadline{ns, ns}
	c.wd = lazyDeadline{ns, ns}
	return c.Conn.SetDeadline(t)
}

// rearm moves the socket's deadline of d to the one asked for if that is
// later than the one that fired, and reports whether the I/O goes on.
func (c *rawConn) rearm(err error, d *lazyDeadline, set func(time.Time) error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, again := d.fired(time.Now().UnixNano())
	return again && set(t) == nil
}

func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rb, c.rn, c.rerr = b, 0, 0
	err := c.rc.Read(c.readFn)
	for err != nil && c.rearm(err, &c.rd, c.Conn.SetReadDeadline) {
		err = c.rc.Read(c.readFn)
	}
	c.rb = nil
	switch {
	case err != nil:
		return 0, err
	case c.rerr != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", c.rerr)}
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

func (c *rawConn) readStep(fd uintptr) bool {
	n, e := rawRead(fd, c.rb)
	switch {
	case e == syscall.EAGAIN:
		return false
	case e != 0:
		c.rerr = e
	default:
		c.rn = n
	}
	return true
}

func (c *rawConn) Write(b []byte) (int, error) {
	c.wb, c.wn, c.werr = b, 0, 0
	err := c.rc.Write(c.writeFn)
	for err != nil && c.rearm(err, &c.wd, c.Conn.SetWriteDeadline) {
		err = c.rc.Write(c.writeFn)
	}
	c.wb = nil
	if err == nil && c.werr != 0 {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", c.werr)}
	}
	return c.wn, err
}

func (c *rawConn) writeStep(fd uintptr) bool {
	for c.wn < len(c.wb) {
		n, e := rawWrite(fd, c.wb[c.wn:])
		switch {
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			c.werr = e
			return true
		}
		c.wn += n
	}
	return true
}
