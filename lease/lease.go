package lease

import (
	"fmt"
	"strings"

	"github.com/fuge-project/fuge/ring"
)

// Gen is a lease generation number. Per point of the key space generations
// only grow and are never reused; every grant and every loss of a lease makes
// a new one. Applications may pass it to storage as a fencing token.
type Gen uint64

// Lease is a range with the generation it is held under.
type Lease struct {
	Range ring.Range
	Gen   Gen
}

func (l Lease) String() string { return fmt.Sprintf("%v@%d", l.Range, l.Gen) }

// Header orders the messages of one owner session (Centrifuge §2.3.2).
type Header struct {
	Nonce     uint64 // sender's incarnation nonce
	Seq       uint64 // sender's sequence number: 1, 2, ... per incarnation
	PeerNonce uint64 // the last nonce heard from the peer, 0 if none
	AckSeq    uint64 // the last sequence number heard from the peer, 0 if none
}

func (h Header) String() string {
	return fmt.Sprintf("seq=%d/%x ack=%d/%x", h.Seq, h.Nonce, h.AckSeq, h.PeerNonce)
}

// LeaseRequest goes from an owner to the manager.
type LeaseRequest struct {
	Namespace string
	Owner     string // the owner's stable name (its ring hash_key)
	Addr      string // where lookups send the owner's requests
	Header
	// Held is the complete set of leases the owner holds and wants renewed.
	// A lease of this owner that the manager knows and that is absent here is
	// released (when the request is not racing).
	Held []Lease
	// Migrated lists released ranges whose state the owner handed over
	// cleanly; their change is flagged Clean and lookups do not signal loss.
	Migrated []ring.Range
	// Refused lists renewals the owner refused since its last request
	// (for the record; omitting them from Held is what releases them).
	Refused []Lease
	// Leaving marks the last request of an incarnation that closes
	// cleanly: the owner has stopped serving every range and holds nothing
	// (Held is empty), so the manager takes it out of the ring and regrants
	// its arcs at once instead of waiting for them to expire.
	Leaving bool
	// Load, if not nil, is the owner's load now (see LoadReport): soft
	// state for the leader's balancing policy, never committed.
	Load *LoadReport
}

// LeaseResponse goes from the manager to an owner.
type LeaseResponse struct {
	Namespace string
	Owner     string
	Header
	Renew []Lease // the complete set of leases renewed
	Grant []Lease // leases newly granted
	// RoutingHeader is the namespace's routing header, whose value the
	// routers hash: the owner's guard reads the key from it.
	RoutingHeader string
}

// Entry is one range of the lookups' view of the lease table. Owner is empty
// while the range is free.
type Entry struct {
	Range ring.Range
	Owner string
	Addr  string
	Gen   Gen
}

// Change sets one range of the lookups' view.
type Change struct {
	LSN   uint64
	Entry Entry
	// Clean marks a change whose new generation does not mean lost state:
	// the state was migrated to the new owner.
	Clean bool
}

// LookupRequest asks for the changes after LSN.
type LookupRequest struct {
	Namespace    string
	Lookup       string // the lookup's name, for the manager's records
	ManagerNonce uint64 // 0 on first contact
	LSN          uint64 // last LSN applied, 0 if none
}

// LookupResponse answers a LookupRequest, or is pushed when changes commit.
// With Snapshot set, Entries is the whole table as of LSN; otherwise Changes
// holds every change in (FromLSN, LSN], in order.
type LookupResponse struct {
	Namespace    string
	ManagerNonce uint64
	Snapshot     bool
	FromLSN      uint64
	LSN          uint64
	Entries      []Entry
	Changes      []Change
}

// FormatLeases renders leases compactly for logs and golden files.
func FormatLeases(ls []Lease) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(l.String())
	}
	b.WriteByte(']')
	return b.String()
}
