package lb

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Field numbers of fuge.v1.ArcBlock, Arc and Range.
const (
	blockNamespace, blockNumber, blockArcs, blockBits = 1, 2, 3, 10
	arcNamespace, arcRange, arcOwner, arcAddr, arcGen = 1, 2, 3, 4, 5
	arcMigratedFrom                                   = 6
	rangeStart, rangeEnd                              = 1, 2
)

var errWire = errors.New("malformed protobuf")

// consumeTag is protowire.ConsumeTag that also refuses field numbers above
// protowire.MaxValidNumber, as proto.Unmarshal does (ConsumeTag accepts
// numbers up to MaxInt32).
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// decodeArcBlock decodes a fuge.v1.ArcBlock of namespace ns: what
// proto.Unmarshal into fugev1.ArcBlock followed by wire.EntriesFromBlock
// returns, without building the messages. A lookup decodes a whole table
// (4,096 arcs at the default ring size) each time it connects; through the
// generated messages that was four allocations per arc. Owner names and
// addresses repeat across arcs: intern gives each distinct one a single
// string (nil: no interning). It returns the block's number, its bit
// count (both checked by wire.ValidBlock) and its arcs.
func decodeArcBlock(ns string, b []byte, intern *interner) (uint32, uint32, []lease.Entry, error) {
	return decodeArcBlockTo(nil, ns, b, intern)
}

// decodeArcBlockTo is decodeArcBlock appending the block's arcs to dst:
// it returns dst extended, the block's arcs being its tail from len(dst).
// A nil dst is allocated for the block.
func decodeArcBlockTo(dst []lease.Entry, ns string, b []byte, intern *interner) (block, bits uint32, _ []lease.Entry, _ error) {
	var (
		gotNS   string
		noRange = -1 // the first arc without a range
	)
	if dst == nil {
		// About 60 bytes an arc: one allocation for most blocks.
		dst = make([]lease.Entry, 0, len(b)/48+1)
	}
	first := len(dst)
	out := dst
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, 0, nil, errWire
		}
		b = b[n:]
		switch {
		case num == blockNamespace && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return 0, 0, nil, errWire
			}
			gotNS, b = string(v), b[n:]
		case num == blockNumber && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, nil, errWire
			}
			block, b = uint32(v), b[n:] // truncated, as proto.Unmarshal does
		case num == blockBits && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, nil, errWire
			}
			bits, b = uint32(v), b[n:]
		case num == blockArcs && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, nil, errWire
			}
			b = b[n:]
			e, ok, err := decodeArc(v, intern)
			if err != nil {
				return 0, 0, nil, err
			}
			if !ok && noRange < 0 {
				noRange = len(out) - first
			}
			out = append(out, e)
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, 0, nil, errWire
			}
			b = b[n:]
		}
	}
	// Checked once the whole message is parsed, as EntriesFromBlock does
	// after proto.Unmarshal: the block's number may follow its arcs.
	if gotNS != ns {
		return 0, 0, nil, fmt.Errorf("%w: block of namespace %q, want %q", wire.ErrMalformed, gotNS, ns)
	}
	if err := wire.ValidBlock(bits, block); err != nil {
		return 0, 0, nil, err
	}
	for i, e := range out[first:] {
		if i == noRange {
			return 0, 0, nil, fmt.Errorf("%w: missing range", wire.ErrMalformed)
		}
		if e.Owner != "" && e.Addr == "" {
			return 0, 0, nil, fmt.Errorf("%w: arc %v held by %q without an address", wire.ErrMalformed, e.Range, e.Owner)
		}
		if wire.BlockOf(e.Range.End, bits) != block {
			return 0, 0, nil, fmt.Errorf("%w: arc %v is not in block %d", wire.ErrMalformed, e.Range, block)
		}
	}
	return block, bits, out, nil
}

// countArcs counts the arcs of an encoded fuge.v1.ArcBlock (its field 3),
// stopping at the first malformed field: what to allocate for a response.
func countArcs(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, k := consumeTag(b)
		if k < 0 {
			return n
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(num, typ, b)
		if k < 0 {
			return n
		}
		if num == blockArcs && typ == protowire.BytesType {
			n++
		}
		b = b[k:]
	}
	return n
}

// decodeArc decodes a fuge.v1.Arc; ok is false when it has no range.
func decodeArc(b []byte, intern *interner) (e lease.Entry, ok bool, err error) {
	var owner, addr []byte
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return e, false, errWire
		}
		b = b[n:]
		switch {
		case (num == arcNamespace || num == arcOwner || num == arcAddr) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, false, errWire
			}
			b = b[n:]
			switch num {
			case arcOwner:
				owner = v
			case arcAddr:
				addr = v
			default:
				if !utf8.Valid(v) {
					return e, false, errWire
				}
			}
		case num == arcRange && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, false, errWire
			}
			b = b[n:]
			// A repeated message field merges into what came before.
			if e.Range, err = decodeRange(v, e.Range); err != nil {
				return e, false, err
			}
			ok = true
		case num == arcGen && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, false, errWire
			}
			e.Gen, b = lease.Gen(v), b[n:]
		case num == arcMigratedFrom && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, false, errWire
			}
			e.MigratedFrom, b = lease.Gen(v), b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, false, errWire
			}
			b = b[n:]
		}
	}
	if e.MigratedFrom != 0 && e.MigratedFrom >= e.Gen {
		return e, false, fmt.Errorf("%w: arc of generation %d migrated from a later generation %d", errMalformed, e.Gen, e.MigratedFrom)
	}
	if e.Owner, e.Addr, err = intern.pair(owner, addr); err != nil {
		return e, false, err
	}
	return e, ok, nil
}

func decodeRange(b []byte, r ring.Range) (ring.Range, error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return r, errWire
		}
		b = b[n:]
		if (num == rangeStart || num == rangeEnd) && typ == protowire.Fixed64Type {
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return r, errWire
			}
			b = b[n:]
			if num == rangeStart {
				r.Start = v
			} else {
				r.End = v
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return r, errWire
		}
		b = b[n:]
	}
	return r, nil
}

// interner gives the owner names and addresses of one response a single
// string each. An owner's address is almost always the same from arc to
// arc, so it is kept with the owner: one map look-up an arc, and each
// distinct string is checked to be UTF-8 once (as proto3 requires).
type interner struct {
	m map[string]internedOwner
}

type internedOwner struct{ owner, addr string }

func newInterner() *interner { return &interner{m: map[string]internedOwner{}} }

// pair returns owner and addr as strings, the same ones for the same
// bytes; an error if either is not UTF-8. A nil interner only converts.
func (x *interner) pair(owner, addr []byte) (string, string, error) {
	if x == nil {
		if !utf8.Valid(owner) || !utf8.Valid(addr) {
			return "", "", errWire
		}
		return string(owner), string(addr), nil
	}
	io, ok := x.m[string(owner)]
	if !ok {
		if !utf8.Valid(owner) {
			return "", "", errWire
		}
		io.owner = string(owner)
		if len(owner) == 0 {
			io.owner = ""
		}
	}
	if !ok || io.addr != string(addr) {
		if !utf8.Valid(addr) {
			return "", "", errWire
		}
		io.addr = string(addr)
		if len(addr) == 0 {
			io.addr = ""
		}
		x.m[io.owner] = io
	}
	return io.owner, io.addr, nil
}
