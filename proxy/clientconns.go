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
