package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ownerIdleTimeout closes a pooled connection unused for this long when the
// pool next hands one out, before the owner's own idle timeout (fasthttp's
// servers default to 10 s of MaxIdleConnDuration on the client side) is
// likely to close it under a request.
const ownerIdleTimeout = 10 * time.Second

// probeAfter is how long a connection must have idled before the pool
// checks, with one non-blocking read, that the owner has not closed it
// meanwhile: a request sent on a connection the owner closed fails after
// sending, and a POST is not retried.
const probeAfter = time.Second

// maxDialing bounds the connections a pool dials at once.
const maxDialing = 4

// connPool is the proxy's connections to one owner: at most max open, the
// idle ones in a stack (the most recently used first, so that a quiet pool
// keeps few connections warm). A request that finds none idle waits for
// whichever comes first: a connection put back by another request or one
// the pool dials for it (at most maxDialing at once), as Envoy's pools
// do. A request that waited for its own dial instead waited a whole
// handshake even when a connection came free a moment later: with TLS to
// the owners, a mutual handshake costs about 2 ms of CPU, and on the
// proxy's one core a few of them held up the requests behind, which then
// found nothing idle and dialled in turn (open-loop p99 of 37-77 ms at
// 5,000 requests/s, against 2-3 ms without TLS).
type connPool struct {
	dial       func() (net.Conn, error)
	max        int
	probeAfter atomic.Int64 // ns; probeAfter, or a test's

	mu      sync.Mutex
	idle    []*upConn
	open    int                  // connections open or being dialled
	dialing int                  // of open, being dialled
	dialErr error                // the last failed dial's, for the waiters it fails
	waiters []chan *upConn       // requests waiting for a connection; nil: a dial failed
	all     map[*upConn]struct{} // every open connection, for abandonWaiting and the histogram
	closed  latencyCounts        // the histogram counts of closed connections
	gone    bool                 // closeIdle ran: connections put back are closed

	// Pipelining (acquire): with pipeConns plain TCP connections busy,
	// an idempotent request goes behind the others on the busy one with
	// the fewest in flight, up to pipeDepth; busy lists them.
	pipeConns, pipeDepth int
	busy                 []*upConn
	// The owner's service time, as the fastest answer in a window of
	// serviceWindow (a minimum, as BBR's round-trip time: the answers'
	// queueing falls out). Pipelining waits for a fast window: behind a
	// slow answer a request would wait for it, and a slow owner wants
	// its requests in parallel, not in line.
	fastest, winFastest time.Duration // the last window's, this one's
	winN                int
	pipeMax             time.Duration // pipelineMaxService, or a test's

	spin *spinner // the proxy's, shared by its pools; nil: never spin
	// spinOK: the last window's fastest answer came within spin.wait, so
	// a spin may catch this owner's answers (an owner never that fast
	// would only burn the CPU). Set where fastest is.
	spinOK atomic.Bool
}

// serviceWindow is how many answers a service-time window takes;
// pipelineMaxService is the service time up to which pipelining is on.
const (
	serviceWindow      = 256
	pipelineMaxService = 200 * time.Microsecond
)

// newPool returns the pool to addr. With tlsConf, the handshake is part of
// the dial: a failed one is a dialError like a refused connection (nothing
// was sent, so even a POST may go elsewhere), and a black hole that accepts
// TCP and never answers the handshake is given up after dialTimeout.
func newPool(addr string, dial func(string) (net.Conn, error), tlsConf *tls.Config, dialTimeout time.Duration, max int) *connPool {
	if tlsConf != nil {
		tlsConf = tlsConf.Clone()
		if tlsConf.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tlsConf.ServerName = host
			}
		}
		if len(tlsConf.NextProtos) == 0 {
			tlsConf.NextProtos = []string{"http/1.1"}
		}
	}
	p := &connPool{
		max: max,
		all: map[*upConn]struct{}{},
		dial: func() (net.Conn, error) {
			start := time.Now()
			c, err := dial(addr)
			if err != nil {
				return nil, &dialError{err}
			}
			if tlsConf == nil {
				return c, nil
			}
			tc := tls.Client(c, tlsConf)
			tc.SetDeadline(start.Add(dialTimeout))
			if err := tc.Handshake(); err != nil {
				c.Close()
				return nil, &dialError{fmt.Errorf("TLS handshake: %w", err)}
			}
			tc.SetDeadline(time.Time{})
			return tc, nil
		},
	}
	p.probeAfter.Store(int64(probeAfter))
	p.fastest = time.Hour // no pipelining before a window of answers
	p.pipeMax = pipelineMaxService
	return p
}

// newPipelinedPool is newPool with pipelining: requests pipelined behind
// others once pipeConns connections are busy, up to depth on each (1:
// never); and with spin, a request alone in flight polls for its answer.
func newPipelinedPool(addr string, dial func(string) (net.Conn, error), tlsConf *tls.Config, dialTimeout time.Duration, max, pipeConns, depth int, spin *spinner) *connPool {
	p := newPool(addr, dial, tlsConf, dialTimeout, max)
	p.pipeConns, p.pipeDepth, p.spin = pipeConns, depth, spin
	return p
}

// get returns an idle connection, or else the first connection put back or
// dialled for it before deadline; now is the time. idle reports that it
// was idle, so got at once. When a dial fails, every request waiting fails
// with it (a dialError: nothing was sent), as the owner is unreachable.
func (p *connPool) get(now, deadline time.Time) (c *upConn, idle bool, err error) {
	p.mu.Lock()
	return p.getLocked(now, deadline)
}

// getLocked is get, called with p.mu held.
func (p *connPool) getLocked(now, deadline time.Time) (c *upConn, idle bool, err error) {
	nowNs := int64(now.Sub(epoch))
	for len(p.idle) > 0 {
		// The oldest idle connection goes first if it has idled too long.
		if c := p.idle[0]; nowNs-c.idleAt > int64(ownerIdleTimeout) {
			p.idle = p.idle[:copy(p.idle, p.idle[1:])]
			p.open--
			p.mu.Unlock()
			c.close()
			p.mu.Lock()
			continue
		}
		c := p.idle[len(p.idle)-1]
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		p.takeLocked(c)
		p.mu.Unlock()
		if nowNs-c.idleAt >= p.probeAfter.Load() && !c.usable() {
			p.discard(c)
			p.mu.Lock()
			continue
		}
		return c, true, nil
	}
	ch := make(chan *upConn, 1)
	p.waiters = append(p.waiters, ch)
	p.dialForWaitersLocked()
	p.mu.Unlock()

	t := time.NewTimer(deadline.Sub(now))
	defer t.Stop()
	select {
	case c := <-ch:
		return p.handed(c)
	case <-t.C:
	}
	p.mu.Lock()
	for i, w := range p.waiters {
		if w == ch {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			return nil, false, errNoFreeConns
		}
	}
	p.mu.Unlock()
	// Handed one just as the timer fired: give it back.
	if c := <-ch; c != nil {
		p.put(c)
	}
	return nil, false, errNoFreeConns
}

// How acquire found a connection.
const (
	gotIdle      = iota // idle: the request has it alone, at once
	gotWaited           // put back or dialled while the request waited
	gotPipelined        // the request was written behind others on it
)

// acquire is get for a request whose bytes are w (nil: it must not be
// pipelined, as it is not idempotent). When pipeConns
// connections are busy, w is written at once behind the requests on the
// busy connection with the fewest in flight, if that is fewer than
// pipeDepth and every request on it may be pipelined (RFC 9112 §9.3.2:
// none behind a non-idempotent one), and the request's turn to read its
// answer comes on turn (connPool.done of the request before it). Up to
// pipeConns requests at once, an owner gets them on connections of their
// own, as without pipelining; beyond, pipelining saves the owner and the
// proxy a read and a write for each request an answer batch carries.
func (p *connPool) acquire(now, deadline time.Time, w []byte, turn chan struct{}) (c *upConn, how int, err error) {
	p.mu.Lock()
	if w != nil && p.pipeDepth > 1 {
		if len(p.busy) >= p.pipeConns && p.fastest <= p.pipeMax && !p.gone {
			var best *upConn
			for _, b := range p.busy {
				if b.inflight < p.pipeDepth && (best == nil || b.inflight < best.inflight) && b.pipeable.Load() && !b.broken.Load() {
					best = b
				}
			}
			if best != nil && best.pipeWrite(w, deadline) {
				best.wrote.Store(int64(now.Sub(epoch)))
				best.inflight++
				best.turns = append(best.turns, turn)
				p.mu.Unlock()
				return best, gotPipelined, nil
			}
		}
	}
	c, idle, err := p.getLocked(now, deadline)
	if idle {
		return c, gotIdle, err
	}
	return c, gotWaited, err
}

// takeLocked marks c, idle or new, busy with one request. The caller
// holds p.mu.
func (p *connPool) takeLocked(c *upConn) {
	c.inflight = 1
	c.pipeable.Store(false)
	if c.raw != nil && p.pipeDepth > 1 {
		c.busyAt = len(p.busy)
		p.busy = append(p.busy, c)
	}
}

// done ends a request on c: keep reports that its answer came whole and
// the owner keeps the connection; svc, if not negative, is how long the
// owner took to answer (from the write, or for a pipelined request from
// its turn). The next pipelined request on c gets
// its turn, or, if none is left, c goes to a waiting request or the idle
// stack, or is closed if it failed, the owner closes it, or it holds
// bytes no request asked for. Once one answer failed every request behind
// it fails (errPipelineBroken): their answers cannot be told apart.
func (p *connPool) done(c *upConn, keep bool, svc time.Duration) {
	if !keep {
		c.broken.Store(true)
	}
	p.mu.Lock()
	if svc >= 0 && keep {
		p.sampleLocked(svc)
	}
	c.inflight--
	if c.inflight > 0 {
		next := c.turns[0]
		c.turns = c.turns[:copy(c.turns, c.turns[1:])]
		p.mu.Unlock()
		if !keep {
			c.nc.Close() // no more is read; c.close comes with the last
		}
		next <- struct{}{}
		return
	}
	if i := c.busyAt; i >= 0 {
		last := p.busy[len(p.busy)-1]
		p.busy[i], last.busyAt = last, i
		p.busy[len(p.busy)-1] = nil
		p.busy = p.busy[:len(p.busy)-1]
		c.busyAt = -1
	}
	if c.broken.Load() || c.leftover() {
		p.open--
		p.dialForWaitersLocked()
		p.mu.Unlock()
		c.close()
		return
	}
	c.idleAt = c.readTime.Load()
	p.handUnlock(c)
}

// sampleLocked counts an answer that took svc in the service-time window.
// The caller holds p.mu.
func (p *connPool) sampleLocked(svc time.Duration) {
	if p.winN == 0 || svc < p.winFastest {
		p.winFastest = svc
	}
	if p.winN++; p.winN == serviceWindow {
		p.fastest, p.winN = p.winFastest, 0
		p.spinOK.Store(p.spin != nil && p.fastest <= p.spin.wait)
	}
}

// handed is what a waiting request got: a connection, or nil when a dial
// failed.
func (p *connPool) handed(c *upConn) (*upConn, bool, error) {
	if c != nil {
		return c, false, nil
	}
	p.mu.Lock()
	err := p.dialErr // a *dialError (newPool)
	p.mu.Unlock()
	return nil, false, err
}

// dialForWaitersLocked starts dials for the waiting requests that dials
// under way will not serve, within max open and maxDialing at once. The
// caller holds p.mu.
func (p *connPool) dialForWaitersLocked() {
	for len(p.waiters) > p.dialing && p.open < p.max && p.dialing < maxDialing && !p.gone {
		p.open++
		p.dialing++
		go p.dialAhead()
	}
}

// dialAhead dials a connection in a slot already counted in open and
// dialing, and hands it to the first waiting request or to the idle
// stack. A failed dial fails every waiting request.
func (p *connPool) dialAhead() {
	nc, err := p.dial()
	p.mu.Lock()
	p.dialing--
	if err != nil {
		p.open--
		p.dialErr = err
		ws := p.waiters
		p.waiters = nil
		p.mu.Unlock()
		for _, w := range ws {
			w <- nil
		}
		return
	}
	c := newUpConn(nc, p)
	c.idleAt = int64(time.Since(epoch)) // it idles from now if nobody takes it
	p.all[c] = struct{}{}
	// Handed over under the lock that counted this dial out, so that no
	// other dial is started for the request it serves.
	p.handUnlock(c)
}

// put hands c, after a complete answer, to a waiting request or back to
// the idle stack. It idles from the last read of the answer.
func (p *connPool) put(c *upConn) { p.done(c, true, -1) }

// handUnlock hands c to the first waiting request, or back to the idle
// stack, or closes it once the pool is gone; then starts the dials the
// requests still waiting need (none after a put, which changes no count a
// dial depends on; after a finished dial, one in its place if needed) and
// releases p.mu, which the caller holds.
func (p *connPool) handUnlock(c *upConn) {
	var w chan *upConn
	drop := false
	switch {
	case len(p.waiters) > 0:
		w = p.waiters[0]
		p.waiters = p.waiters[:copy(p.waiters, p.waiters[1:])]
		p.takeLocked(c)
	case p.gone:
		p.open--
		drop = true
	default:
		p.idle = append(p.idle, c)
	}
	p.dialForWaitersLocked()
	p.mu.Unlock()
	if w != nil {
		w <- c
	} else if drop {
		c.close()
	}
}

// discard ends a request on c that failed: c is closed once no request
// is left on it, and its slot freed.
func (p *connPool) discard(c *upConn) { p.done(c, false, -1) }

// forget takes a closed connection out of the set, keeping its histogram
// counts.
func (p *connPool) forget(c *upConn) {
	p.mu.Lock()
	if _, ok := p.all[c]; ok {
		delete(p.all, c)
		p.closed.addFrom(&c.lat)
	}
	p.mu.Unlock()
}

// closeIdle closes the idle connections, and those put back from now on:
// the owner left the table, or the proxy is shutting down.
func (p *connPool) closeIdle() {
	p.mu.Lock()
	p.gone = true
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// closeWaiting closes the connections whose request has waited at least
// grace for an answer: the attempt fails at once (and is retried if
// idempotent). It counts each in n before closing it, so that whoever sees
// the retried answer sees the count, and returns how many remain open.
func (p *connPool) closeWaiting(grace time.Duration, n *atomic.Uint64) (open int) {
	p.mu.Lock()
	var cs []*upConn
	for c := range p.all {
		if c.waiting(grace) {
			cs = append(cs, c)
		}
	}
	open = len(p.all) - len(cs)
	p.mu.Unlock()
	for _, c := range cs {
		n.Add(1)
		c.close() // the request's goroutine sees the error and discards it
	}
	return open
}

// latency sums the histogram counts of every connection, open or closed.
func (p *connPool) latency() *latencyCounts {
	sum := new(latencyCounts)
	p.mu.Lock()
	sum.addFrom(&p.closed)
	for c := range p.all {
		sum.addFrom(&c.lat)
	}
	p.mu.Unlock()
	return sum
}
