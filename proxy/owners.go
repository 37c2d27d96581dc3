package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

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
	return errors.As(err, &de) || errors.Is(err, fasthttp.ErrNoFreeConns)
}

// owner is the proxy's connection pool to one owner address and its
// latency histogram.
type owner struct {
	addr    string
	hc      *fasthttp.HostClient
	latency prometheus.Observer
	conns   connSet // every open connection, idle or carrying a request
}

// connSet tracks an owner's open connections, so that the proxy can abandon
// the requests waiting on an owner that left the lease table.
type connSet struct {
	mu sync.Mutex
	m  map[*trackedConn]struct{}
}

// trackedConn removes itself from its set when closed, and records when it
// last wrote and read (nanoseconds since the set's epoch), so that a request
// waiting for its answer can be told from an idle or busy-answering one.
type trackedConn struct {
	net.Conn
	set             *connSet
	once            sync.Once
	wrote, readTime atomic.Int64
}

func (c *trackedConn) Write(b []byte) (int, error) {
	c.wrote.Store(int64(time.Since(epoch)))
	return c.Conn.Write(b)
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.readTime.Store(int64(time.Since(epoch)))
	}
	return n, err
}

// waiting reports whether c sent a request at least grace ago and has read
// nothing since.
func (c *trackedConn) waiting(grace time.Duration) bool {
	w := c.wrote.Load()
	return w > c.readTime.Load() && time.Duration(int64(time.Since(epoch))-w) >= grace
}

// epoch is the base of trackedConn's times.
var epoch = time.Now()

// AbandonGrace is how long a request must have waited for its answer from
// an owner that left the lease table before the proxy abandons it: an owner
// that is answering (421 for a key it lost, or the last requests of a
// drain) is left to finish.
const AbandonGrace = 250 * time.Millisecond

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.m, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *connSet) add(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*trackedConn]struct{}{}
	}
	s.m[t] = struct{}{}
	s.mu.Unlock()
	return t
}

// closeWaiting closes the connections whose request has waited at least
// grace for an answer: the attempt fails at once (and is retried if
// idempotent). It counts each in n before closing it, so that whoever sees
// the retried answer sees the count, and returns how many remain open.
func (s *connSet) closeWaiting(grace time.Duration, n *atomic.Uint64) (open int) {
	s.mu.Lock()
	var cs []*trackedConn
	for c := range s.m {
		if c.waiting(grace) {
			cs = append(cs, c)
		}
	}
	open = len(s.m) - len(cs)
	s.mu.Unlock()
	for _, c := range cs {
		n.Add(1)
		c.Close()
	}
	return open
}

// owners maps addresses to pools. Requests read an immutable map through an
// atomic pointer; a miss creates the pool under the lock and publishes a new
// map.
type owners struct {
	m      atomic.Pointer[map[string]*owner]
	mu     sync.Mutex
	create func(addr string) *owner
	remove func(o *owner)
}

func newOwners(create func(string) *owner, remove func(*owner)) *owners {
	o := &owners{create: create, remove: remove}
	o.m.Store(&map[string]*owner{})
	return o
}

// get returns the pool of addr, creating it on first use.
func (o *owners) get(addr string) *owner {
	if c, ok := (*o.m.Load())[addr]; ok {
		return c
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.m.Load()
	if c, ok := old[addr]; ok {
		return c
	}
	c := o.create(addr)
	m := make(map[string]*owner, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[addr] = c
	o.m.Store(&m)
	return c
}

// retain drops the pools of addresses not in keep, closing their idle
// connections, and returns them. The table no longer sends any key there,
// so a request still waiting on such an owner (paused, wedged, cut off)
// waits for nothing: abandonWaiting ends it.
func (o *owners) retain(keep []string) []*owner {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.m.Load()
	m := make(map[string]*owner, len(old))
	var gone []*owner
	for k, v := range old {
		if slices.Contains(keep, k) {
			m[k] = v
		} else {
			gone = append(gone, v)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	o.m.Store(&m)
	for _, c := range gone {
		c.hc.CloseIdleConnections()
		o.remove(c)
	}
	return gone
}

// abandonWaiting watches the connections of an owner that left the table
// until none is open or stop closes, every AbandonGrace closing those whose
// request has waited AbandonGrace for an answer, and counts them in n.
func abandonWaiting(o *owner, n *atomic.Uint64, stop <-chan struct{}) {
	t := time.NewTicker(AbandonGrace / 2)
	defer t.Stop()
	for {
		if o.conns.closeWaiting(AbandonGrace, n) == 0 {
			return
		}
		select {
		case <-t.C:
		case <-stop:
			return
		}
	}
}

// closeIdle closes every pool's idle connections.
func (o *owners) closeIdle() {
	for _, c := range *o.m.Load() {
		c.hc.CloseIdleConnections()
	}
}

// len is the number of pools.
func (o *owners) len() int { return len(*o.m.Load()) }

// newHostClient returns the pool to one owner. The proxy does its own
// retries, so the client makes one attempt per call.
//
// With BackendTLS, the handshake is part of the dial, not left to fasthttp
// (IsTLS): then a failed handshake is a dialError like a refused
// connection (nothing was sent, so even a POST may go elsewhere), and a
// black hole that accepts TCP and never answers the handshake is given up
// after DialTimeout rather than UpstreamTimeout.
func (p *Proxy) newHostClient(addr string, conns *connSet) *fasthttp.HostClient {
	dial := p.cfg.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: p.cfg.DialTimeout}
		dial = func(addr string) (net.Conn, error) { return d.Dial("tcp", addr) }
	}
	var tlsConf *tls.Config
	if p.cfg.BackendTLS != nil {
		tlsConf = p.cfg.BackendTLS.Clone()
		if tlsConf.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tlsConf.ServerName = host
			}
		}
		if len(tlsConf.NextProtos) == 0 {
			tlsConf.NextProtos = []string{"http/1.1"}
		}
	}
	return &fasthttp.HostClient{
		Addr: addr,
		Dial: func(addr string) (net.Conn, error) {
			start := time.Now()
			c, err := dial(addr)
			if err != nil {
				return nil, &dialError{err}
			}
			c = conns.add(c)
			if tlsConf == nil {
				return c, nil
			}
			tc := tls.Client(c, tlsConf)
			tc.SetDeadline(start.Add(p.cfg.DialTimeout))
			if err := tc.Handshake(); err != nil {
				c.Close()
				return nil, &dialError{fmt.Errorf("TLS handshake: %w", err)}
			}
			tc.SetDeadline(time.Time{})
			return tc, nil
		},
		MaxConns:                  p.cfg.MaxConnsPerOwner,
		MaxConnWaitTimeout:        p.cfg.RetryBudget,
		ReadTimeout:               p.cfg.UpstreamTimeout,
		WriteTimeout:              p.cfg.UpstreamTimeout,
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		NoDefaultUserAgentHeader:  true,
		DisablePathNormalizing:    true,
	}
}
