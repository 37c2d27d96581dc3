package lb

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// randomPartition cuts the circle at n random ends (some at block
// boundaries, one sometimes at 0) and gives each arc a random owner.
func randomPartition(rnd *rand.Rand, n int, bits uint32) []lease.Entry {
	ends := map[uint64]bool{}
	for len(ends) < n {
		x := rnd.Uint64()
		switch rnd.IntN(8) {
		case 0:
			x = 0
		case 1:
			x &^= 1<<(64-bits) - 1 // the first position of a block
		}
		ends[x] = true
	}
	xs := slices.Sorted(maps.Keys(ends))
	es := make([]lease.Entry, n)
	for k, x := range xs {
		o := fmt.Sprint("o", rnd.IntN(5))
		es[k] = lease.Entry{Range: ring.Range{Start: xs[(k+n-1)%n], End: x}, Owner: o, Addr: o + ":1", Gen: lease.Gen(1 + rnd.IntN(3))}
	}
	return es
}

// blocksOf cuts a partition into its blocks, by number.
func blocksOf(es []lease.Entry, bits uint32) map[uint32][]lease.Entry {
	out := map[uint32][]lease.Entry{}
	for _, e := range es {
		b := wire.BlockOf(e.Range.End, bits)
		out[b] = append(out[b], e)
	}
	return out
}

// TestSpliceBlocksMatchesWhole: a table with the blocks that differ from
// the next one's replaced is the next table, arc for arc, in chunks whose
// bookkeeping and lookups are right (checkChunked), the table spliced is
// left as it was, and the changes are exactly those blocks' arcs that
// were not arcs before (which bring a core to the next table); splicing in a block from a third table
// that does not fit its neighbours is refused, as tableOf refuses the
// whole.
func TestSpliceBlocksMatchesWhole(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	refused := 0
	for i := range 3000 {
		bits := uint32(wire.MinBlockBits)
		old := randomPartition(rnd, 1+rnd.IntN(40), bits)
		next := slices.Clone(old)
		switch rnd.IntN(3) {
		case 0: // new owners and generations, same arcs
			for k := range next {
				if rnd.IntN(4) == 0 {
					next[k].Owner, next[k].Addr, next[k].Gen = "x", "x:1", next[k].Gen+1
				}
			}
		default: // another cut altogether
			next = randomPartition(rnd, 1+rnd.IntN(40), bits)
		}
		ob, nb := blocksOf(old, bits), blocksOf(next, bits)
		var touched []uint32
		for b := range uint32(1) << bits {
			if !slices.Equal(ob[b], nb[b]) {
				touched = append(touched, b)
			}
		}
		// Chunks of 1 to 8 arcs, so that blocks straddle them.
		size := 1 + rnd.IntN(8)
		oldT := chunkedOf(slices.Clone(old), size)
		got, changes, err := spliceBlocks(oldT, bits, touched, func(b uint32) []lease.Entry { return nb[b] })
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !slices.Equal(got.flat(), next) {
			t.Fatalf("case %d: spliced\n%v\nwant\n%v", i, got.flat(), next)
		}
		checkChunked(t, got)
		if !slices.Equal(oldT.flat(), old) {
			t.Fatalf("case %d: splicing changed the table spliced", i)
		}
		// The changes are those blocks' arcs that were not arcs of the
		// table before, the same range with the same holder.
		var want []lease.Entry
		for _, b := range touched {
			for _, e := range nb[b] {
				if !slices.Contains(old, e) {
					want = append(want, e)
				}
			}
		}
		if len(changes) != len(want) {
			t.Fatalf("case %d: %d changes, want %d", i, len(changes), len(want))
		}
		for k, c := range changes {
			if c.Entry != want[k] {
				t.Fatalf("case %d: change %d is %v, want %v", i, k, c.Entry, want[k])
			}
		}
		// Fewer changes, the same table: a core holding the table before
		// that applies them holds what a core given the next table holds.
		applied, fresh := newCore(t), newCore(t)
		applied.Step(snap(1, 1, old...), t0)
		for k := range changes {
			changes[k].LSN = 2 // one push, as applyTouched numbers it
		}
		applied.Step(delta(1, 1, 2, changes...), t0)
		fresh.Step(snap(1, 2, next...), t0)
		if a, w := applied.Entries(), fresh.Entries(); applied.Stats().Applied != 2 || !slices.Equal(a, w) {
			t.Fatalf("case %d: the core applied %d responses and holds\n%v\nwant\n%v", i, applied.Stats().Applied, a, w)
		}
		// A block of a third cut: refused unless it happens to fit.
		third := blocksOf(randomPartition(rnd, 2+rnd.IntN(40), bits), bits)
		b := slices.Collect(maps.Keys(third))[0]
		mixed := map[uint32][]lease.Entry{}
		maps.Copy(mixed, ob)
		mixed[b] = third[b]
		var whole []lease.Entry
		for k := range uint32(1) << bits {
			whole = append(whole, mixed[k]...)
		}
		_, _, err = spliceBlocks(chunkedOf(old, size), bits, []uint32{b}, func(uint32) []lease.Entry { return third[b] })
		names := blockNames("ns", bits)
		held := map[string]heldBlock{}
		for k, name := range names {
			held[name] = heldBlock{entries: mixed[uint32(k)], bits: bits}
		}
		_, wholeErr := tableOf(names, held, nil)
		if (err == nil) != (wholeErr == nil) {
			t.Fatalf("case %d: splicing block %d of another cut: %v; building the table whole: %v", i, b, err, wholeErr)
		}
		if err != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no block of another cut was refused: the check never ran")
	}
	t.Logf("%d of 3000 misfitting blocks refused", refused)
}

// checkChunked checks a chunked table's bookkeeping: every chunk holds
// arcs, its last end and first index are recorded, the count is right, and
// find gives the arc containing each arc's end, start + 1 and a point
// between, as a walk of the flat table does.
func checkChunked(t *testing.T, c *chunked) {
	t.Helper()
	n := 0
	for k, ch := range c.chunks {
		if len(ch) == 0 || c.lasts[k] != ch[len(ch)-1].Range.End || c.starts[k] != n {
			t.Fatalf("chunk %d of %d arcs: last %x, start %d (after %d arcs)", k, len(ch), c.lasts[k], c.starts[k], n)
		}
		n += len(ch)
	}
	if n != c.n || len(c.lasts) != len(c.chunks) || len(c.starts) != len(c.chunks) {
		t.Fatalf("%d arcs counted %d", n, c.n)
	}
	flat := c.flat()
	for k, e := range flat {
		if got := c.at(k); got != e {
			t.Fatalf("at(%d) = %v, want %v", k, got, e)
		}
		for _, h := range []uint64{e.Range.End, e.Range.Start + 1, e.Range.Start + (e.Range.End-e.Range.Start)/2} {
			want := flat[0] // every arc ends before h: the one across zero
			for _, f := range flat {
				if f.Range.End >= h {
					want = f
					break
				}
			}
			if got := *c.find(h); got != want {
				t.Fatalf("find(%x) = %v, want %v", h, got, want)
			}
		}
	}
}

// BenchmarkApplyPush measures what a Lookup does with a push at R = 65536
// of one leaving owner's arcs (131 of 500 owners' arcs, in as many blocks):
// changes applies the touched blocks as changes (spliceBlocks, then the
// core's changes), whole builds the table from every block and has the
// core diff it as a snapshot, as every push was applied before.
func BenchmarkApplyPush(b *testing.B) {
	const R = 65536
	bits := wire.BlockBits(R)
	step := uint64(1) << (64 - 16) // 2^64 / R
	es := make([]lease.Entry, R)
	for i := range es {
		o := fmt.Sprint("owner-", i%500)
		es[i] = lease.Entry{Range: ring.Range{Start: uint64(i) * step, End: uint64(i+1) * step}, Owner: o, Addr: o + ":80", Gen: 5}
	}
	es[R-1].Range.End = 0
	next := slices.Clone(es)
	var touched []uint32
	for i := 7; i < R; i += R / 131 {
		next[i].Owner, next[i].Addr, next[i].Gen = "heir", "heir:80", 9
		touched = append(touched, wire.BlockOf(next[i].Range.End, bits))
	}
	touched = slices.Compact(touched)
	// es ends at 0 in its last arc: sorted by end, it comes first.
	byEnd := func(t []lease.Entry) []lease.Entry {
		return append([]lease.Entry{t[len(t)-1]}, t[:len(t)-1]...)
	}
	es, next = byEnd(es), byEnd(next)
	blocks := blocksOf(next, bits)
	names := blockNames("ns", bits)
	held := map[string]heldBlock{}
	for k, name := range names {
		held[name] = heldBlock{entries: blocks[uint32(k)], bits: bits}
	}
	newCore := func(b *testing.B) *Core {
		c, err := NewCore(CoreConfig{Namespace: "ns"})
		if err != nil {
			b.Fatal(err)
		}
		c.Step(lease.LookupResponse{Namespace: "ns", ManagerNonce: 1, Snapshot: true, LSN: 1, Entries: es}, time.Time{})
		return c
	}
	esT := chunkedOf(es, chunkSize)
	b.Run("changes", func(b *testing.B) {
		c := newCore(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, changes, err := spliceBlocks(esT, bits, touched, func(k uint32) []lease.Entry { return blocks[k] })
			if err != nil {
				b.Fatal(err)
			}
			lsn := uint64(i) + 1
			for k := range changes {
				changes[k].LSN = lsn + 1
			}
			out := c.Step(lease.LookupResponse{Namespace: "ns", ManagerNonce: 1, FromLSN: lsn, LSN: lsn + 1, Changes: changes}, time.Time{})
			if i == 0 && len(out.Loss) == 0 {
				b.Fatal("no loss signalled")
			}
			b.StopTimer()
			c = newCore(b) // back to the old table, at the next LSN
			c.lsn = lsn + 1
			b.StartTimer()
		}
	})
	b.Run("whole", func(b *testing.B) {
		c := newCore(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t, err := tableOf(names, held, nil)
			if err != nil {
				b.Fatal(err)
			}
			out := c.Step(lease.LookupResponse{Namespace: "ns", ManagerNonce: 1, Snapshot: true, LSN: uint64(i) + 2, Entries: t}, time.Time{})
			if i == 0 && len(out.Loss) == 0 {
				b.Fatal("no loss signalled")
			}
			b.StopTimer()
			c = newCore(b)
			c.lsn = uint64(i) + 1
			b.StartTimer()
		}
	})
}
