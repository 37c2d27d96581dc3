// Package wire converts between the fuge.v1 protobuf messages and the
// messages of package lease that the pure cores exchange. Conversions from
// the wire validate what they read: a malformed message is an error, never a
// partly applied one.
package wire

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// ErrMalformed is returned for a message that cannot be a valid one.
var ErrMalformed = errors.New("wire: malformed message")

// MaxLeases bounds the leases in one message: an owner holds at most R
// ranges, and R is at most ring.MaxRingSize.
const MaxLeases = ring.MaxRingSize

// Range converts a range to the wire.
func Range(r ring.Range) *fugev1.Range { return &fugev1.Range{Start: r.Start, End: r.End} }

// RangeFrom converts a range from the wire; a missing range is an error.
func RangeFrom(r *fugev1.Range) (ring.Range, error) {
	if r == nil {
		return ring.Range{}, fmt.Errorf("%w: missing range", ErrMalformed)
	}
	return ring.Range{Start: r.Start, End: r.End}, nil
}

// Leases converts leases to the wire.
func Leases(ls []lease.Lease) []*fugev1.Lease {
	out := make([]*fugev1.Lease, len(ls))
	for i, l := range ls {
		out[i] = &fugev1.Lease{Range: Range(l.Range), Gen: uint64(l.Gen)}
	}
	return out
}

// LeasesFrom converts leases from the wire.
func LeasesFrom(ls []*fugev1.Lease) ([]lease.Lease, error) {
	if len(ls) > MaxLeases {
		return nil, fmt.Errorf("%w: %d leases, at most %d", ErrMalformed, len(ls), MaxLeases)
	}
	out := make([]lease.Lease, len(ls))
	for i, l := range ls {
		if l == nil {
			return nil, fmt.Errorf("%w: missing lease", ErrMalformed)
		}
		r, err := RangeFrom(l.Range)
		if err != nil {
			return nil, err
		}
		if l.Gen == 0 {
			return nil, fmt.Errorf("%w: lease %v has generation 0", ErrMalformed, r)
		}
		out[i] = lease.Lease{Range: r, Gen: lease.Gen(l.Gen)}
	}
	return out, nil
}

// LeasesPacked converts leases to the wire's packed form: start, end and
// generation of each, in order.
func LeasesPacked(ls []lease.Lease) []uint64 {
	if len(ls) == 0 {
		return nil
	}
	out := make([]uint64, 0, 3*len(ls))
	for _, l := range ls {
		out = append(out, l.Range.Start, l.Range.End, uint64(l.Gen))
	}
	return out
}

// LeasesFromPacked converts leases from the wire's packed form, with the
// checks of LeasesFrom.
func LeasesFromPacked(xs []uint64) ([]lease.Lease, error) {
	if len(xs)%3 != 0 {
		return nil, fmt.Errorf("%w: %d packed numbers, not three a lease", ErrMalformed, len(xs))
	}
	n := len(xs) / 3
	if n > MaxLeases {
		return nil, fmt.Errorf("%w: %d leases, at most %d", ErrMalformed, n, MaxLeases)
	}
	out := make([]lease.Lease, n)
	for i := range out {
		x := xs[3*i : 3*i+3 : 3*i+3]
		if x[2] == 0 {
			return nil, fmt.Errorf("%w: lease %v has generation 0", ErrMalformed, ring.Range{Start: x[0], End: x[1]})
		}
		out[i] = lease.Lease{Range: ring.Range{Start: x[0], End: x[1]}, Gen: lease.Gen(x[2])}
	}
	return out, nil
}

// leasesFromEither converts the leases of a field that may come in either
// form; a message carrying both is malformed.
func leasesFromEither(what string, ls []*fugev1.Lease, packed []uint64) ([]lease.Lease, error) {
	if len(packed) == 0 {
		return LeasesFrom(ls)
	}
	if len(ls) > 0 {
		return nil, fmt.Errorf("%w: both %s and %s_packed are set", ErrMalformed, what, what)
	}
	return LeasesFromPacked(packed)
}

func header(h lease.Header) *fugev1.Header {
	return &fugev1.Header{Nonce: h.Nonce, Seq: h.Seq, PeerNonce: h.PeerNonce, AckSeq: h.AckSeq}
}

func headerFrom(h *fugev1.Header) (lease.Header, error) {
	if h == nil {
		return lease.Header{}, fmt.Errorf("%w: missing header", ErrMalformed)
	}
	if h.Nonce == 0 || h.Seq == 0 {
		return lease.Header{}, fmt.Errorf("%w: header needs a nonzero nonce and seq", ErrMalformed)
	}
	return lease.Header{Nonce: h.Nonce, Seq: h.Seq, PeerNonce: h.PeerNonce, AckSeq: h.AckSeq}, nil
}

// Request converts a lease request to the wire; packed sends the held
// leases packed (only to a manager that said it reads them). The request
// says that its sender reads packed responses, as ResponseFrom does.
func Request(r lease.LeaseRequest, packed bool) *fugev1.LeaseRequest {
	out := &fugev1.LeaseRequest{
		Namespace: r.Namespace, Owner: r.Owner, Addr: r.Addr,
		Header: header(r.Header), Refused: Leases(r.Refused),
		Leaving: r.Leaving, MigrationAddr: r.MigrationAddr, Handover: r.Handover,
		Packed: true,
	}
	if packed {
		out.HeldPacked = LeasesPacked(r.Held)
	} else {
		out.Held = Leases(r.Held)
	}
	for _, m := range r.Migrated {
		out.Migrated = append(out.Migrated, Range(m))
	}
	if r.Load != nil {
		out.Load = &fugev1.LoadReport{Rate: r.Load.Rate, Groups: r.Load.Groups}
		for _, k := range r.Load.Hot {
			out.Load.Hot = append(out.Load.Hot, &fugev1.HotKey{Hash: k.Hash, Rate: k.Rate})
		}
	}
	return out
}

// LoadFrom converts a load report from the wire (nil: none), refusing
// one that lease.LoadReport.Validate refuses, with the field named.
func LoadFrom(l *fugev1.LoadReport) (*lease.LoadReport, error) {
	if l == nil {
		return nil, nil
	}
	if n := len(l.Hot); n > lease.MaxHotKeys {
		// Refused before converting anything.
		return nil, fmt.Errorf("%w: %w: load.hot has %d keys; want at most %d", ErrMalformed, lease.ErrInvalid, n, lease.MaxHotKeys)
	}
	out := &lease.LoadReport{Rate: l.Rate, Groups: l.Groups}
	for i, k := range l.Hot {
		if k == nil {
			return nil, fmt.Errorf("%w: load.hot[%d] is missing", ErrMalformed, i)
		}
		out.Hot = append(out.Hot, lease.HotKey{Hash: k.Hash, Rate: k.Rate})
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return out, nil
}

// RequestFrom converts a lease request from the wire. A leaving request
// must hold nothing.
func RequestFrom(r *fugev1.LeaseRequest) (lease.LeaseRequest, error) {
	if r.GetNamespace() == "" || r.GetOwner() == "" {
		return lease.LeaseRequest{}, fmt.Errorf("%w: namespace and owner are required", ErrMalformed)
	}
	h, err := headerFrom(r.Header)
	if err != nil {
		return lease.LeaseRequest{}, err
	}
	held, err := leasesFromEither("held", r.Held, r.HeldPacked)
	if err != nil {
		return lease.LeaseRequest{}, err
	}
	refused, err := LeasesFrom(r.Refused)
	if err != nil {
		return lease.LeaseRequest{}, err
	}
	if r.Leaving && len(held) > 0 {
		return lease.LeaseRequest{}, fmt.Errorf("%w: a leaving request holds %d leases", ErrMalformed, len(held))
	}
	if len(r.Migrated) > MaxLeases {
		return lease.LeaseRequest{}, fmt.Errorf("%w: %d migrated ranges", ErrMalformed, len(r.Migrated))
	}
	if r.MigrationAddr != "" {
		if err := lease.ValidAddr("migration_addr", r.MigrationAddr); err != nil {
			return lease.LeaseRequest{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	}
	out := lease.LeaseRequest{Namespace: r.Namespace, Owner: r.Owner, Addr: r.Addr, Header: h, Held: held, Refused: refused,
		Leaving: r.Leaving, MigrationAddr: r.MigrationAddr, Handover: r.Handover}
	for _, m := range r.Migrated {
		rr, err := RangeFrom(m)
		if err != nil {
			return lease.LeaseRequest{}, err
		}
		out.Migrated = append(out.Migrated, rr)
	}
	if out.Load, err = LoadFrom(r.Load); err != nil {
		return lease.LeaseRequest{}, err
	}
	return out, nil
}

// Response converts a lease response to the wire; packed sends the
// renewed and granted leases packed (only to an owner that said it reads
// them). The response says that its sender reads packed requests, as
// RequestFrom does.
func Response(r lease.LeaseResponse, packed bool) *fugev1.LeaseResponse {
	out := &fugev1.LeaseResponse{
		Namespace: r.Namespace, Owner: r.Owner, Header: header(r.Header),
		RoutingHeader: r.RoutingHeader,
		MigrateOut:    migrations(r.MigrateOut), MigrateIn: migrations(r.MigrateIn),
		Packed: true,
	}
	if packed {
		out.RenewPacked, out.GrantPacked = LeasesPacked(r.Renew), LeasesPacked(r.Grant)
	} else {
		out.Renew, out.Grant = Leases(r.Renew), Leases(r.Grant)
	}
	return out
}

func migrations(ms []lease.Migration) []*fugev1.MigrationOrder {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*fugev1.MigrationOrder, len(ms))
	for i, m := range ms {
		out[i] = &fugev1.MigrationOrder{Range: Range(m.Range), Gen: uint64(m.Gen), Peer: m.Peer, PeerAddr: m.PeerAddr}
	}
	return out
}

// migrationsFrom converts migration orders from the wire, validating each:
// a range, a generation, a peer name and a host:port.
func migrationsFrom(what string, ms []*fugev1.MigrationOrder) ([]lease.Migration, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %d %s orders, at most %d", ErrMalformed, len(ms), what, MaxLeases)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]lease.Migration, len(ms))
	for i, m := range ms {
		if m == nil {
			return nil, fmt.Errorf("%w: missing %s order", ErrMalformed, what)
		}
		r, err := RangeFrom(m.Range)
		if err != nil {
			return nil, err
		}
		if m.Gen == 0 {
			return nil, fmt.Errorf("%w: %s order %v has generation 0", ErrMalformed, what, r)
		}
		if err := lease.ValidName(what+".peer", m.Peer); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if err := lease.ValidAddr(what+".peer_addr", m.PeerAddr); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		out[i] = lease.Migration{Range: r, Gen: lease.Gen(m.Gen), Peer: m.Peer, PeerAddr: m.PeerAddr}
	}
	return out, nil
}

// ResponseFrom converts a lease response from the wire.
func ResponseFrom(r *fugev1.LeaseResponse) (lease.LeaseResponse, error) {
	h, err := headerFrom(r.GetHeader())
	if err != nil {
		return lease.LeaseResponse{}, err
	}
	renew, err := leasesFromEither("renew", r.Renew, r.RenewPacked)
	if err != nil {
		return lease.LeaseResponse{}, err
	}
	grant, err := leasesFromEither("grant", r.Grant, r.GrantPacked)
	if err != nil {
		return lease.LeaseResponse{}, err
	}
	out, err := migrationsFrom("migrate_out", r.MigrateOut)
	if err != nil {
		return lease.LeaseResponse{}, err
	}
	in, err := migrationsFrom("migrate_in", r.MigrateIn)
	if err != nil {
		return lease.LeaseResponse{}, err
	}
	return lease.LeaseResponse{Namespace: r.Namespace, Owner: r.Owner, Header: h, Renew: renew, Grant: grant,
		RoutingHeader: r.RoutingHeader, MigrateOut: out, MigrateIn: in}, nil
}

// Arc converts one entry of a namespace's view to its xDS resource.
func Arc(ns string, e lease.Entry) *fugev1.Arc {
	return &fugev1.Arc{Namespace: ns, Range: Range(e.Range), Owner: e.Owner, Addr: e.Addr, Gen: uint64(e.Gen),
		MigratedFrom: uint64(e.MigratedFrom)}
}

// ArcName is the xDS resource name of an arc: "<namespace>/<start>-<end>".
func ArcName(ns string, r ring.Range) string {
	return fmt.Sprintf("%s/%016x-%016x", ns, r.Start, r.End)
}

// EntryFrom converts an xDS arc resource to a view entry.
func EntryFrom(a *fugev1.Arc) (lease.Entry, error) {
	r, err := RangeFrom(a.GetRange())
	if err != nil {
		return lease.Entry{}, err
	}
	if a.Owner != "" && a.Addr == "" {
		return lease.Entry{}, fmt.Errorf("%w: arc %v held by %q without an address", ErrMalformed, r, a.Owner)
	}
	if a.MigratedFrom >= a.Gen && a.MigratedFrom != 0 {
		return lease.Entry{}, fmt.Errorf("%w: arc %v of generation %d migrated from a later generation %d", ErrMalformed, r, a.Gen, a.MigratedFrom)
	}
	return lease.Entry{Range: r, Owner: a.Owner, Addr: a.Addr, Gen: lease.Gen(a.Gen), MigratedFrom: lease.Gen(a.MigratedFrom)}, nil
}

// ClientKindKey is the gRPC metadata key with which a Fuge client names its
// kind as it opens an xDS stream to a manager. A Lookup sends ClientLookup:
// its stream is served by standbys in contact with the leader, which send
// the heartbeats its staleness bound counts on, and by the leader when it
// has no such standby. Streams without it (Envoy, proxyless gRPC) are
// served by any manager node from its replicated state.
//
// A Lookup that could not reach the standby the leader named sends
// LeaderFallbackKey (any value) on its next streams, until it holds a
// table again: the leader then serves it, so that standbys whose gRPC
// port is unreachable (a firewall, an advertised address that is wrong)
// cost Lookups a detour, not the manager.
const (
	ClientKindKey     = "fuge-client"
	ClientLookup      = "lookup"
	LeaderFallbackKey = "fuge-leader-fallback"
)

// A Lookup stream's answer larger than MaxLookupResponseBytes of resources
// (a whole table: about 4 MB at R = 65536) is sent in parts of at most
// that size, well below gRPC's 4 MiB default on either side, so that no
// ring size makes a message too large to send or to receive. Every part
// but the last carries the response's system_version_info with
// MorePartsSuffix after it: the Lookup waits for the rest before it judges
// whether its table is whole. The last part carries the version alone, and
// the removals.
const (
	MaxLookupResponseBytes = 1 << 20
	MorePartsSuffix        = "+"
)

// The lease table is served over xDS (fuge.v1.ArcBlock) cut into 2^bits
// blocks by the top bits of each arc's end, bits chosen from the ring size
// R so that a block holds about 4 arcs: a change of a few arcs re-sends a
// few blocks of about 250 bytes each, where 64 fixed blocks made one
// leaving owner of 500 at R = 65536 re-send 52 of 64 blocks (3 MB of a
// 3.7 MB table) for 131 changed arcs, and blocks of 16 arcs 131 blocks of
// 1 KB. Every block carries its bit count, so a lookup can check what it
// holds. The arcs of a block leave their namespace out: the block names it.
const (
	MinBlockBits = 6  // 64 blocks: rings of up to 1024 entries
	MaxBlockBits = 14 // 16,384 blocks: rings of 65536 entries and more
)

// BlockBits is the bit count of the blocks of a ring of ringSize entries:
// log2(ringSize) - 2, clamped to [MinBlockBits, MaxBlockBits]. A ring size
// that is not a power of two counts as the next one.
func BlockBits(ringSize int) uint32 {
	k := uint32(bits.Len(uint(max(ringSize, 1) - 1))) // ceil(log2)
	return min(max(k, MinBlockBits+2)-2, MaxBlockBits)
}

// BlockOf is the block holding an arc that ends at end: its top bits bits.
func BlockOf(end uint64, bits uint32) uint32 { return uint32(end >> (64 - bits)) }

// ValidBlock checks a block's bit count and number: bits from MinBlockBits
// to MaxBlockBits, b below 2^bits.
func ValidBlock(bits, b uint32) error {
	if bits < MinBlockBits || bits > MaxBlockBits {
		return fmt.Errorf("%w: block_bits %d, want %d to %d", ErrMalformed, bits, MinBlockBits, MaxBlockBits)
	}
	if b >= 1<<bits {
		return fmt.Errorf("%w: block %d of %d", ErrMalformed, b, 1<<bits)
	}
	return nil
}

// BlockName is the xDS resource name of a block: "<namespace>/block/<b>".
func BlockName(ns string, b uint32) string { return fmt.Sprintf("%s/block/%d", ns, b) }

// ArcBlock converts the entries of one block to its xDS resource. Entries
// must all end in block b of 2^bits, in ring order.
func ArcBlock(ns string, bits, b uint32, es []lease.Entry) *fugev1.ArcBlock {
	out := &fugev1.ArcBlock{Namespace: ns, Block: b, BlockBits: bits, Arcs: make([]*fugev1.Arc, len(es))}
	for i, e := range es {
		out.Arcs[i] = Arc("", e)
	}
	return out
}

// EntriesFromBlock converts an xDS block back to entries, checking its
// bit count and number (ValidBlock) and that every arc ends in the block.
func EntriesFromBlock(ns string, blk *fugev1.ArcBlock) ([]lease.Entry, error) {
	if blk.GetNamespace() != ns {
		return nil, fmt.Errorf("%w: block of namespace %q, want %q", ErrMalformed, blk.GetNamespace(), ns)
	}
	if err := ValidBlock(blk.BlockBits, blk.Block); err != nil {
		return nil, err
	}
	out := make([]lease.Entry, len(blk.Arcs))
	for i, a := range blk.Arcs {
		e, err := EntryFrom(a)
		if err != nil {
			return nil, err
		}
		if BlockOf(e.Range.End, blk.BlockBits) != blk.Block {
			return nil, fmt.Errorf("%w: arc %v is not in block %d", ErrMalformed, e.Range, blk.Block)
		}
		out[i] = e
	}
	return out, nil
}
