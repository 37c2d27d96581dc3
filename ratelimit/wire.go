package ratelimit

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Wire format of a gossip message (one UDP datagram), big-endian:
//
//	"FR" version(1) flags(1: bit 0 ack)
//	view(8) from(4) to(4) seq(8) w(8, float64 bits) count(2)
//	count × { len(2) key(len) s(8, float64 bits) }
//
// MaxMessageBytes bounds a message, MaxMessageKeys its keys.
const (
	MaxMessageBytes = 60 << 10
	MaxMessageKeys  = 4096
	wireVersion     = 1
	headerBytes     = 4 + 8 + 4 + 4 + 8 + 8 + 2
	maxGossipKeyLen = MaxNameLen + 1 + MaxKeyLen
)

// AppendMessage appends m's encoding to dst. It fails if m has more than
// MaxMessageKeys keys, a key over the size bound, or would exceed
// MaxMessageBytes.
func AppendMessage(dst []byte, m Message) ([]byte, error) {
	if len(m.Keys) != len(m.S) || len(m.Keys) > MaxMessageKeys {
		return dst, fmt.Errorf("%w: %d keys and %d sums (at most %d)", ErrMessage, len(m.Keys), len(m.S), MaxMessageKeys)
	}
	start := len(dst)
	var flags byte
	if m.Ack {
		flags = 1
	}
	dst = append(dst, 'F', 'R', wireVersion, flags)
	dst = binary.BigEndian.AppendUint64(dst, m.View)
	dst = binary.BigEndian.AppendUint32(dst, m.From)
	dst = binary.BigEndian.AppendUint32(dst, m.To)
	dst = binary.BigEndian.AppendUint64(dst, m.Seq)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(m.W))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Keys)))
	for i, k := range m.Keys {
		if len(k) > maxGossipKeyLen {
			return dst[:start], fmt.Errorf("%w: key of %d bytes (at most %d)", ErrMessage, len(k), maxGossipKeyLen)
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(m.S[i]))
		if len(dst)-start > MaxMessageBytes {
			return dst[:start], fmt.Errorf("%w: over %d bytes", ErrMessage, MaxMessageBytes)
		}
	}
	return dst, nil
}

// DecodeMessage decodes one message; every field is bounded and the sums
// must be finite.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if len(b) > MaxMessageBytes {
		return m, fmt.Errorf("%w: %d bytes (at most %d)", ErrMessage, len(b), MaxMessageBytes)
	}
	if len(b) < headerBytes || b[0] != 'F' || b[1] != 'R' || b[2] != wireVersion || b[3]&^1 != 0 {
		return m, fmt.Errorf("%w: bad header", ErrMessage)
	}
	m.Ack = b[3]&1 != 0
	m.View = binary.BigEndian.Uint64(b[4:])
	m.From = binary.BigEndian.Uint32(b[12:])
	m.To = binary.BigEndian.Uint32(b[16:])
	m.Seq = binary.BigEndian.Uint64(b[20:])
	m.W = math.Float64frombits(binary.BigEndian.Uint64(b[28:]))
	n := int(binary.BigEndian.Uint16(b[36:]))
	if !finite(m.W) || m.W < 0 {
		return Message{}, fmt.Errorf("%w: weight %v", ErrMessage, m.W)
	}
	if n > MaxMessageKeys {
		return Message{}, fmt.Errorf("%w: %d keys (at most %d)", ErrMessage, n, MaxMessageKeys)
	}
	b = b[headerBytes:]
	if n > 0 {
		m.Keys, m.S = make([]string, 0, n), make([]float64, 0, n)
	}
	for range n {
		if len(b) < 2 {
			return Message{}, fmt.Errorf("%w: truncated", ErrMessage)
		}
		kl := int(binary.BigEndian.Uint16(b))
		if kl > maxGossipKeyLen || len(b) < 2+kl+8 {
			return Message{}, fmt.Errorf("%w: key length %d", ErrMessage, kl)
		}
		v := math.Float64frombits(binary.BigEndian.Uint64(b[2+kl:]))
		if !finite(v) {
			return Message{}, fmt.Errorf("%w: sum %v", ErrMessage, v)
		}
		m.Keys = append(m.Keys, string(b[2:2+kl]))
		m.S = append(m.S, v)
		b = b[2+kl+8:]
	}
	if len(b) != 0 {
		return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrMessage, len(b))
	}
	return m, nil
}
