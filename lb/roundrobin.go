package lb

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fuge-project/fuge/ring"
)

// RoundRobin is the baseline Balancer: it ignores the key and hands out the
// addresses of an immutable pool in turn, by an atomic counter, as a plain
// layer-7 load balancer does. Every Pick is the full circle under
// generation 0. It is safe for concurrent use; Pick takes no lock and does
// not allocate, except the first Pick after a Lookup-backed pool changed,
// which rebuilds the pool.
type RoundRobin struct {
	next atomic.Uint64
	pool atomic.Pointer[rrPool]

	l     *Lookup       // nil for a static pool
	ready chan struct{} // static pools only
	mu    sync.Mutex    // serializes rebuilds
}

// rrPool is an immutable pool: the addresses, and the Lookup version they
// were read at.
type rrPool struct {
	addrs   []string
	version uint64
}

var _ Balancer = (*RoundRobin)(nil)

// NewRoundRobin returns a round-robin Balancer over a static list of
// addresses, in the order given (an address listed twice gets twice the
// share); empty strings are dropped. The pool never changes: Updated returns
// nil. With no address, Pick always answers false.
func NewRoundRobin(addrs []string) *RoundRobin {
	rr := &RoundRobin{ready: make(chan struct{})}
	p := &rrPool{addrs: slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return a == "" })}
	rr.pool.Store(p)
	if len(p.addrs) > 0 {
		close(rr.ready)
	}
	return rr
}

// NewLookupRoundRobin returns a round-robin Balancer over the distinct
// owner addresses in l's table, sorted. The pool follows the table: the
// first Pick after an update rebuilds it. It does not start l; Pick answers
// false until l has a table with a held arc.
func NewLookupRoundRobin(l *Lookup) *RoundRobin {
	rr := &RoundRobin{l: l}
	rr.pool.Store(&rrPool{})
	return rr
}

// Pick returns the next address of the pool, the full circle and
// generation 0, ignoring keyHash; false when the pool is empty.
func (rr *RoundRobin) Pick(keyHash uint64) (Pick, bool) {
	p := rr.current()
	n := uint64(len(p.addrs))
	if n == 0 {
		return Pick{}, false
	}
	i := rr.next.Add(1) - 1
	return Pick{Addr: p.addrs[i%n], Range: ring.Full()}, true
}

// current returns the pool, rebuilt first if the Lookup's table changed
// since it was read.
func (rr *RoundRobin) current() *rrPool {
	p := rr.pool.Load()
	if rr.l == nil || rr.l.Version() == p.version {
		return p
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if p = rr.pool.Load(); rr.l.Version() == p.version {
		return p
	}
	// Read the version before the table: if the table is newer than the
	// version, the next Pick rebuilds once more, which is harmless.
	v := rr.l.Version()
	p = &rrPool{addrs: ownerAddrs(rr.l.Entries()), version: v}
	rr.pool.Store(p)
	return p
}

// Updated returns nil for a static pool (it never changes) and the
// Lookup's Updated otherwise, which also closes on table changes that leave
// the set of addresses as it was.
func (rr *RoundRobin) Updated() <-chan struct{} {
	if rr.l == nil {
		return nil
	}
	return rr.l.Updated()
}

// Ready is closed once the pool can be non-empty: at once for a static
// pool with an address (never for an empty one), and once the Lookup holds
// its first table otherwise.
func (rr *RoundRobin) Ready() <-chan struct{} {
	if rr.l == nil {
		return rr.ready
	}
	return rr.l.Ready()
}

// Addrs returns a copy of the current pool.
func (rr *RoundRobin) Addrs() []string { return slices.Clone(rr.current().addrs) }
