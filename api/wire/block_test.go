package wire

import (
	"errors"
	"slices"
	"testing"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestBlockBits checks the block sizes by ring size: about 4 arcs a
// block, from 64 blocks up to 16,384.
func TestBlockBits(t *testing.T) {
	for _, tt := range []struct {
		ringSize int
		want     uint32
	}{
		{0, 6}, {1, 6}, {64, 6}, {256, 6}, {257, 7}, {1024, 8}, {1025, 9}, {2048, 9},
		{4096, 10}, {16384, 12}, {65536, 14}, {1 << 20, 14}, {ring.MaxRingSize, 14},
	} {
		if got := BlockBits(tt.ringSize); got != tt.want {
			t.Errorf("BlockBits(%d) = %d, want %d", tt.ringSize, got, tt.want)
		}
	}
	for bits := uint32(MinBlockBits); bits <= MaxBlockBits; bits++ {
		if got := BlockOf(^uint64(0), bits); got != 1<<bits-1 {
			t.Errorf("BlockOf(max, %d) = %d, want the last block", bits, got)
		}
		if got := BlockOf(1<<63, bits); got != 1<<(bits-1) {
			t.Errorf("BlockOf(2^63, %d) = %d, want the middle", bits, got)
		}
	}
}

// TestEntriesFromBlockBounds checks that a block's bit count and number
// are refused out of bounds, and that arcs must end in the block at its
// bit count.
func TestEntriesFromBlockBounds(t *testing.T) {
	e := lease.Entry{Range: ring.Range{Start: 1 << 62, End: 1<<63 + 5}, Owner: "a", Addr: "h:1", Gen: 2}
	for _, tt := range []struct {
		name       string
		bits, b    uint32
		ok         bool
		withTheArc bool
	}{
		{"the arc's block at 6 bits", 6, 32, true, true},
		{"the arc's block at 12 bits", 12, 2048, true, true},
		{"another block", 12, 2047, false, true},
		{"the last of 64", 6, 63, true, false},
		{"one past the last of 64", 6, 64, false, false},
		{"the last of 4096", 12, 4095, true, false},
		{"one past the last of 4096", 12, 4096, false, false},
		{"no bit count", 0, 0, false, false},
		{"too few bits", MinBlockBits - 1, 0, false, false},
		{"too many bits", MaxBlockBits + 1, 0, false, false},
		{"far too many bits", 1 << 31, 0, false, false},
	} {
		var es []lease.Entry
		if tt.withTheArc {
			es = []lease.Entry{e}
		}
		blk := ArcBlock("ns", tt.bits, tt.b, es)
		got, err := EntriesFromBlock("ns", blk)
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ok=%v", tt.name, err, tt.ok)
			continue
		}
		if err == nil && !slices.Equal(got, es) {
			t.Errorf("%s: %v, want %v", tt.name, got, es)
		}
	}
	if _, err := EntriesFromBlock("ns", &fugev1.ArcBlock{Namespace: "ns", Block: 1, BlockBits: 6}); err != nil {
		t.Errorf("an empty block: %v", err)
	}
	if err := ValidBlock(7, 128); err == nil {
		t.Error("block 128 of 128 accepted")
	}
}
