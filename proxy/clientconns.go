package proxy

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
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

// withRawIO gives a TCP listener's connections readiness of the proxy's
// own and raw system calls (evconn_linux.go says why); other listeners,
// and every listener elsewhere than Linux, pass as they are. spin, if not
// nil, learns of the listener's epoll instance (spinner).
func withRawIO(ln net.Listener, spin *spinner) net.Listener {
	tl, ok := ln.(*net.TCPListener)
	if !ok || !rawIO {
		return ln
	}
	el, err := newEvListener(tl, spin)
	if err != nil {
		return ln
	}
	return el
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
