package lb

import (
	"errors"
	"fmt"
	"slices"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// chunkSize is how many arcs a chunk of a chunked table holds when it is
// cut: a push re-cuts only the chunks its blocks reach, and the table's
// other chunks are shared with the one before.
const chunkSize = 32

// chunked is a table in ring order (ends ascending strictly), cut into
// chunks. It is immutable once built: a Lookup publishes it to readers
// that take no lock, and the next push builds a new one that shares the
// chunks it did not reach. Copying a flat table for every push cost a
// Lookup 3.6 ms and 4.4 MB at R = 65536 (BenchmarkApplyPush).
type chunked struct {
	chunks [][]lease.Entry // each non-empty
	lasts  []uint64        // lasts[c] is the end of chunks[c]'s last arc
	starts []int           // starts[c] is the index of chunks[c]'s first arc in the table
	n      int             // arcs in all
	size   int             // arcs per chunk when one is cut
}

// chunkedOf cuts es (which it keeps: es must not change) into chunks of
// size arcs.
func chunkedOf(es []lease.Entry, size int) *chunked {
	t := &chunked{size: size}
	for len(es) > 0 {
		k := min(len(es), size)
		t.add(es[:k:k])
		es = es[k:]
	}
	return t
}

// add appends a non-empty chunk.
func (t *chunked) add(ch []lease.Entry) {
	t.chunks = append(t.chunks, ch)
	t.lasts = append(t.lasts, ch[len(ch)-1].Range.End)
	t.starts = append(t.starts, t.n)
	t.n += len(ch)
}

// chunkAtOrAfter is the first chunk whose last end is h or after it,
// len(t.chunks) if none. It is on every routed request's path: written
// out, it measured 106-135 ns a BenchmarkPublishedLookup where
// slices.BinarySearch measured 134-139.
func (t *chunked) chunkAtOrAfter(h uint64) int {
	lo, hi := 0, len(t.lasts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.lasts[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find returns the arc containing h, as ring.Table.Find does: the first
// arc ending at h or after it, or the first arc (which crosses zero) when
// every arc ends before h. The table must not be empty.
func (t *chunked) find(h uint64) *lease.Entry {
	c := t.chunkAtOrAfter(h)
	if c == len(t.chunks) {
		return &t.chunks[0][0]
	}
	ch := t.chunks[c]
	lo, hi := 0, len(ch)-1 // the last arc ends at h or after it
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ch[m].Range.End < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return &ch[lo]
}

// at is the table's k-th arc (a splice's check, off the lookup path).
func (t *chunked) at(k int) lease.Entry {
	c, found := slices.BinarySearch(t.starts, k)
	if !found {
		c-- // the last chunk starting before k
	}
	return t.chunks[c][k-t.starts[c]]
}

// flat returns the table as one new slice.
func (t *chunked) flat() []lease.Entry {
	out := make([]lease.Entry, 0, t.n)
	for _, ch := range t.chunks {
		out = append(out, ch...)
	}
	return out
}

// spliceBlocks returns table (a partition of the circle in ring order, cut
// into 2^bits blocks) with the arcs of each block in blocks (ascending)
// replaced by arcsOf(block), and those new arcs, as changes in ring order.
// Only the chunks those blocks reach are copied and cut anew; the others
// are shared with table, which is not changed. It checks what a whole
// rebuild (tableOf) would check, only where the blocks changed it: that
// each arc around a replaced run starts where the one before it ends.
// Blocks ascend, and arcs within a block (decodeBlocks), so the ends still
// ascend strictly.
func spliceBlocks(table *chunked, bits uint32, blocks []uint32, arcsOf func(b uint32) []lease.Entry) (*chunked, []lease.Change, error) {
	if table.n == 0 {
		return nil, nil, errors.New("no arcs")
	}
	shift := 64 - bits
	last := len(table.chunks) - 1
	// The chunks holding a block's arcs, or where they go: from the first
	// chunk that ends at the block's first position or after it, to the
	// first that ends at its last position or after it (the last chunk
	// when none does). Blocks ascend, so these spans do; overlapping or
	// adjacent ones are rebuilt together, as one segment.
	type segment struct {
		c0, c1 int // chunks
		b0, b1 int // blocks[b0:b1]
	}
	var segs []segment
	for k, b := range blocks {
		lo := uint64(b) << shift
		hi := lo | (1<<shift - 1)
		c0 := min(table.chunkAtOrAfter(lo), last)
		c1 := min(table.chunkAtOrAfter(hi), last)
		if n := len(segs) - 1; n >= 0 && c0 <= segs[n].c1+1 {
			segs[n].c1 = max(segs[n].c1, c1)
			segs[n].b1 = k + 1
			continue
		}
		segs = append(segs, segment{c0: c0, c1: c1, b0: k, b1: k + 1})
	}
	k := len(table.chunks) + len(blocks)
	out := &chunked{size: table.size, chunks: make([][]lease.Entry, 0, k), lasts: make([]uint64, 0, k), starts: make([]int, 0, k)}
	var changes []lease.Change
	var runs [][2]int // replaced runs, as indexes into out
	next := 0         // the first chunk of table not yet in out
	for _, sg := range segs {
		for ; next < sg.c0; next++ {
			out.add(table.chunks[next])
		}
		next = sg.c1 + 1
		// The segment's arcs before, read in place from its chunks (a
		// copy of them into one slice first was a third of a push's cost
		// at R = 65536).
		old := segmentArcs{chunks: table.chunks[sg.c0 : sg.c1+1]}
		grow := 0
		for _, b := range blocks[sg.b0:sg.b1] {
			grow += len(arcsOf(b))
		}
		spliced := make([]lease.Entry, 0, table.starts[sg.c1]+len(table.chunks[sg.c1])-table.starts[sg.c0]+grow)
		for _, b := range blocks[sg.b0:sg.b1] {
			lo := uint64(b) << shift
			// Keep the arcs before the block's, then pass over its own.
			spliced = old.appendWhile(spliced, func(e *lease.Entry) bool { return e.Range.End < lo })
			start := out.n + len(spliced)
			// Only the arcs that differ from the block's arcs before are
			// changes: a block carries all its arcs (about 4) when one of
			// them changed, and applying the others again changed nothing.
			for _, e := range arcsOf(b) {
				spliced = append(spliced, e)
				for w := old.peek(); w != nil && w.Range.End < e.Range.End && wire.BlockOf(w.Range.End, bits) == b; w = old.peek() {
					old.skip()
				}
				if w := old.peek(); w != nil && wire.BlockOf(w.Range.End, bits) == b && *w == e {
					continue
				}
				changes = append(changes, lease.Change{Entry: e})
			}
			for w := old.peek(); w != nil && wire.BlockOf(w.Range.End, bits) == b; w = old.peek() {
				old.skip()
			}
			runs = append(runs, [2]int{start, out.n + len(spliced)})
		}
		spliced = old.appendWhile(spliced, func(*lease.Entry) bool { return true })
		for len(spliced) > 0 {
			k := min(len(spliced), out.size)
			out.add(spliced[:k:k])
			spliced = spliced[k:]
		}
	}
	for ; next < len(table.chunks); next++ {
		out.add(table.chunks[next])
	}
	n := out.n
	if n == 0 {
		return nil, nil, errors.New("no arcs")
	}
	for _, r := range runs {
		// From the arc before the run to the arc after it.
		for k := r[0] - 1; k < r[1]; k++ {
			prev, next := out.at((k+n)%n), out.at((k+1+n)%n)
			if next.Range.Start != prev.Range.End {
				return nil, nil, fmt.Errorf("arc %v does not start where the arc before it ends (%x)", next.Range, prev.Range.End)
			}
		}
	}
	return out, changes, nil
}

// segmentArcs reads a run of chunks' arcs in order, in place.
type segmentArcs struct {
	chunks [][]lease.Entry
	c, k   int // the next arc is chunks[c][k]
}

// peek is the next arc, nil at the end.
func (a *segmentArcs) peek() *lease.Entry {
	if a.c == len(a.chunks) {
		return nil
	}
	return &a.chunks[a.c][a.k]
}

// skip passes over the next arc.
func (a *segmentArcs) skip() {
	if a.k++; a.k == len(a.chunks[a.c]) {
		a.c, a.k = a.c+1, 0
	}
}

// appendWhile appends to dst the next arcs for which keep holds, in runs
// copied a chunk at a time, and passes over them.
func (a *segmentArcs) appendWhile(dst []lease.Entry, keep func(*lease.Entry) bool) []lease.Entry {
	for a.c < len(a.chunks) {
		ch := a.chunks[a.c]
		j := a.k
		for j < len(ch) && keep(&ch[j]) {
			j++
		}
		dst = append(dst, ch[a.k:j]...)
		if j < len(ch) {
			a.k = j
			return dst
		}
		a.c, a.k = a.c+1, 0
	}
	return dst
}
