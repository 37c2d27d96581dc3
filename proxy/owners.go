package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// owner is the proxy's connection pool to one owner address.
type owner struct {
	addr string
	pool *connPool
}

// AbandonGrace is how long a request must have waited for its answer from
// an owner that left the lease table before the proxy abandons it: an owner
// that is answering (421 for a key it lost, or the last requests of a
// drain) is left to finish.
const AbandonGrace = 250 * time.Millisecond

// owners maps addresses to pools. Requests read an immutable map through an
// atomic pointer; a miss creates the pool under the lock and publishes a new
// map.
type owners struct {
	m      atomic.Pointer[map[string]*owner]
	mu     sync.Mutex
	create func(addr string) *owner
}

func newOwners(create func(string) *owner) *owners {
	o := &owners{create: create}
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
		c.pool.closeIdle()
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
		if o.pool.closeWaiting(AbandonGrace, n) == 0 {
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
		c.pool.closeIdle()
	}
}

// latency calls f with each owner's upstream latency histogram.
func (o *owners) latency(f func(addr string, l *latencyCounts)) {
	for _, c := range *o.m.Load() {
		f(c.addr, c.pool.latency())
	}
}

// len is the number of pools.
func (o *owners) len() int { return len(*o.m.Load()) }
