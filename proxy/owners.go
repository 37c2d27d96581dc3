package proxy

import (
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"

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
// connections. A request still using a dropped pool finishes; its
// connection is closed when it idles out.
func (o *owners) retain(keep []string) {
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
		return
	}
	o.m.Store(&m)
	for _, c := range gone {
		c.hc.CloseIdleConnections()
		o.remove(c)
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
func (p *Proxy) newHostClient(addr string) *fasthttp.HostClient {
	dial := p.cfg.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: p.cfg.DialTimeout}
		dial = func(addr string) (net.Conn, error) { return d.Dial("tcp", addr) }
	}
	return &fasthttp.HostClient{
		Addr: addr,
		Dial: func(addr string) (net.Conn, error) {
			c, err := dial(addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
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
