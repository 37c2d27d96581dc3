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
	blockNamespace, blockNumber, blockArcs            = 1, 2, 3
	arcNamespace, arcRange, arcOwner, arcAddr, arcGen = 1, 2, 3, 4, 5
	rangeStart, rangeEnd                              = 1, 2
)

var errWire = errors.New("malformed protobuf")

// decodeArcBlock decodes a fuge.v1.ArcBlock of namespace ns: what
// proto.Unmarshal into fugev1.ArcBlock followed by wire.EntriesFromBlock
// returns, without building the messages. A lookup decodes a whole table
// (4,096 arcs at the default ring size) each time it connects; through the
// generated messages that was four allocations per arc. Owner names and
// addresses repeat across arcs: intern gives each distinct one a single
// string (nil: no interning).
func decodeArcBlock(ns string, b []byte, intern map[string]string) (uint32, []lease.Entry, error) {
	var (
		gotNS string
		block uint32
		arcs  [][]byte
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil, errWire
		}
		b = b[n:]
		switch {
		case num == blockNamespace && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return 0, nil, errWire
			}
			gotNS, b = string(v), b[n:]
		case num == blockNumber && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, nil, errWire
			}
			block, b = uint32(v), b[n:]
		case num == blockArcs && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, nil, errWire
			}
			arcs, b = append(arcs, v), b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, nil, errWire
			}
			b = b[n:]
		}
	}
	out := make([]lease.Entry, len(arcs))
	for i, a := range arcs {
		e, ok, err := decodeArc(a, intern)
		if err != nil {
			return 0, nil, err
		}
		out[i] = e
		if !ok {
			// Checked once the whole message is parsed, as
			// EntriesFromBlock does after proto.Unmarshal.
			arcs[i] = nil
		}
	}
	if gotNS != ns {
		return 0, nil, fmt.Errorf("%w: block of namespace %q, want %q", wire.ErrMalformed, gotNS, ns)
	}
	if block >= wire.Blocks {
		return 0, nil, fmt.Errorf("%w: block %d of %d", wire.ErrMalformed, block, wire.Blocks)
	}
	for i, e := range out {
		if arcs[i] == nil {
			return 0, nil, fmt.Errorf("%w: missing range", wire.ErrMalformed)
		}
		if e.Owner != "" && e.Addr == "" {
			return 0, nil, fmt.Errorf("%w: arc %v held by %q without an address", wire.ErrMalformed, e.Range, e.Owner)
		}
		if wire.BlockOf(e.Range.End) != block {
			return 0, nil, fmt.Errorf("%w: arc %v is not in block %d", wire.ErrMalformed, e.Range, block)
		}
	}
	return block, out, nil
}

// decodeArc decodes a fuge.v1.Arc; ok is false when it has no range.
func decodeArc(b []byte, intern map[string]string) (e lease.Entry, ok bool, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, false, errWire
		}
		b = b[n:]
		switch {
		case (num == arcNamespace || num == arcOwner || num == arcAddr) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return e, false, errWire
			}
			b = b[n:]
			switch num {
			case arcOwner:
				e.Owner = internString(intern, v)
			case arcAddr:
				e.Addr = internString(intern, v)
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
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, false, errWire
			}
			b = b[n:]
		}
	}
	return e, ok, nil
}

func decodeRange(b []byte, r ring.Range) (ring.Range, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
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

// internString returns v as a string, the same one for equal bytes.
func internString(intern map[string]string, v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if intern == nil {
		return string(v)
	}
	if s, ok := intern[string(v)]; ok {
		return s
	}
	s := string(v)
	intern[s] = s
	return s
}
