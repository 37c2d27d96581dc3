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
	// Migrated lists released ranges that the manager recalled as a
	// migration (LeaseResponse.MigrateOut) and whose state this owner will
	// export to the new owner: it has stopped serving them. Only a range
	// both recalled as a migration and released as migrated is granted to
	// the new owner as an import; anything else is a plain handoff.
	Migrated []ring.Range
	// MigrationAddr is where this owner serves MigrationService (host:port),
	// or "" when it cannot migrate state: the manager then never flags a
	// migration to or from it.
	MigrationAddr string
	// Handover asks the manager to take this owner out of the ring with its
	// state: every range is recalled as a migration to its new owner (a
	// drain the owner asked for). Owner.Close sends it before its leaving
	// request when it has a Migrator.
	Handover bool
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
	// MigrateOut lists ranges recalled from this owner as a clean handoff:
	// they are absent from Renew and Grant like any recall, and Peer is
	// the new owner, to which the owner exports their state once it has
	// stopped serving them (releasing them as Migrated). Gen is the
	// generation the owner held them under.
	MigrateOut []Migration
	// MigrateIn lists granted ranges (each also in Grant, under Gen) whose
	// state the owner imports from Peer, their previous owner, before it
	// serves them: it holds them but refuses requests until the import
	// completed or its deadline passed.
	MigrateIn []Migration
}

// Migration names the other side of a clean handoff of one range.
type Migration struct {
	Range    ring.Range
	Gen      Gen
	Peer     string // the other owner's name
	PeerAddr string // where it serves MigrationService
}

// Entry is one range of the lookups' view of the lease table. Owner is empty
// while the range is free.
type Entry struct {
	Range ring.Range
	Owner string
	Addr  string
	Gen   Gen
	// MigratedFrom, when not 0, is the generation whose state this one
	// continues: the range moved to its owner by a clean migration from
	// the holder of MigratedFrom. A lookup that knew the range under
	// MigratedFrom signals no loss for it; under any other generation it
	// does (it may have missed a loss in between).
	MigratedFrom Gen
}

// Change sets one range of the lookups' view.
type Change struct {
	LSN   uint64
	Entry Entry
	// Clean marks a change whose new generation does not mean lost state:
	// the state was migrated to the new owner (Entry.MigratedFrom is the
	// generation it replaces).
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
