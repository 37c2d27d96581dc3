package lb

import (
	"slices"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Balancer picks the backend for a request. fuge-proxy routes every request
// through one, so that the lease ring and the round-robin baseline can be
// compared with everything else equal. Implementations are safe for
// concurrent use, and Pick does not allocate.
type Balancer interface {
	// Pick returns the backend for a request whose routing key hashes to
	// keyHash (ring.Hash), and false when there is none: no table yet, or
	// the key's arc is free.
	Pick(keyHash uint64) (Pick, bool)
	// Updated returns a channel that is closed at the next change of what
	// Pick may return; each change replaces the channel. Take the channel
	// before calling Pick, then wait on it for the next change. It may also
	// close when nothing Pick returns changed; it never closes for a
	// balancer that cannot change (a nil channel).
	Updated() <-chan struct{}
}

// Pick is a Balancer's answer: where to send the request, and the lease it
// is sent under. Balancers without leases (round robin) answer the full
// circle and generation 0.
type Pick struct {
	Addr  string     // the backend's address, host:port
	Range ring.Range // the arc of the key held under Gen
	Gen   lease.Gen  // the lease generation; 0 when there are no leases
}

// LeaseBalancer routes by the lease ring: every key goes to the owner that
// holds its arc, as the Lookup last heard from the manager, with the arc's
// generation (fuge-proxy stamps it on the request as Fuge-Generation). It is
// safe for concurrent use; Pick takes no lock and does not allocate.
type LeaseBalancer struct {
	l *Lookup
}

var _ Balancer = (*LeaseBalancer)(nil)

// NewLeaseBalancer returns the lease-ring Balancer of l. It does not start
// l; Pick answers false until l has a table.
func NewLeaseBalancer(l *Lookup) *LeaseBalancer { return &LeaseBalancer{l: l} }

// Pick returns the holder of keyHash's arc, that arc and its generation
// (Lookup.Lookup). It is false before the first table and while the arc is
// free.
func (b *LeaseBalancer) Pick(keyHash uint64) (Pick, bool) {
	addr, r, gen, ok := b.l.Lookup(keyHash)
	return Pick{Addr: addr, Range: r, Gen: gen}, ok
}

// Updated is the Lookup's Updated: closed at the next applied table.
func (b *LeaseBalancer) Updated() <-chan struct{} { return b.l.Updated() }

// Ready is closed once the Lookup holds its first full table.
func (b *LeaseBalancer) Ready() <-chan struct{} { return b.l.Ready() }

// Addrs returns the distinct addresses of the owners in the current table,
// sorted; nil before the first table. It allocates: call it on Updated, not
// per request.
func (b *LeaseBalancer) Addrs() []string { return ownerAddrs(b.l.Entries()) }

// ownerAddrs returns the distinct non-empty addresses of the held arcs in
// es, sorted.
func ownerAddrs(es []lease.Entry) []string {
	var out []string
	for _, e := range es {
		if e.Owner != "" && e.Addr != "" {
			out = append(out, e.Addr)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
