package proxy

import (
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
		return &perIPConn{Conn: c, l: l, addr: a}, nil
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
	once sync.Once
}

func (c *perIPConn) Close() error {
	c.once.Do(func() { c.l.release(c.addr) })
	return c.Conn.Close()
}

// rawListener hands out TCP connections whose reads and writes are
// rawRead and rawWrite (rawio_linux.go says why); others pass as they are.
// writeSlack is how far a connection's write deadline may lag the one asked
// for (see rawConn.SetWriteDeadline).
type rawListener struct {
	net.Listener
	writeSlack time.Duration
}

func withRawIO(ln net.Listener, writeSlack time.Duration) net.Listener {
	if !rawIO {
		return ln
	}
	return rawListener{ln, writeSlack}
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
	r := &rawConn{Conn: tc, rc: rc, writeSlack: l.writeSlack}
	r.readFn, r.writeFn = r.readStep, r.writeStep
	return r, nil
}

// rawConn is a client's TCP connection read and written through
// syscall.RawConn, which waits on the runtime's poller as net does, and
// honours the deadlines set on the connection.
type rawConn struct {
	net.Conn
	rc syscall.RawConn

	rb, wb          []byte // the buffer of the Read or Write in progress
	rn, wn          int
	rerr, werr      syscall.Errno
	readFn, writeFn func(uintptr) bool

	writeSlack    time.Duration
	writeDeadline atomic.Int64 // the one set, Unix ns; 0 for none
}

// SetWriteDeadline moves the write deadline only when the one asked for is
// earlier than the one set, or later by writeSlack or more: fasthttp sets
// it before every response, and each move is a change to a runtime timer.
// A response may so be cut off up to writeSlack (WriteTimeout/8) early.
func (c *rawConn) SetWriteDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	if cur := c.writeDeadline.Load(); cur != 0 && ns >= cur && ns-cur < int64(c.writeSlack) {
		return nil
	}
	c.writeDeadline.Store(ns)
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines, exactly.
func (c *rawConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.writeDeadline.Store(0)
	} else {
		c.writeDeadline.Store(t.UnixNano())
	}
	return c.Conn.SetDeadline(t)
}

func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rb, c.rn, c.rerr = b, 0, 0
	err := c.rc.Read(c.readFn)
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
