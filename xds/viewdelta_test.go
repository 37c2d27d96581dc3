package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestViewChangedMatchesWholeView checks the publication by change
// (NamespaceViewChanged, which compares only the blocks the changes reach)
// against the publication of the whole view (NamespaceView) on random
// views and commit sequences, coalesced or not: after every flush both
// tables hold the same blocks at the same LSN, and those are the view's.
func TestViewChangedMatchesWholeView(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 3))
	for iter := range 60 {
		R := []int{256, 1024, 4096}[rnd.IntN(3)]
		bits := wire.BlockBits(R)
		ca, cb := newFakeClock(), newFakeClock()
		a, b := newLeaseTable(LeaseTableConfig{}, ca), newLeaseTable(LeaseTableConfig{}, cb)
		a.NamespaceRing("ns", ringOf(R), 1)
		b.NamespaceRing("ns", ringOf(R), 1)
		gen := lease.Gen(1)
		randEntry := func(r ring.Range) lease.Entry {
			gen++
			if rnd.IntN(4) == 0 {
				return arcEntry(r.Start, r.End, "", gen)
			}
			return arcEntry(r.Start, r.End, fmt.Sprintf("o%d", rnd.IntN(6)), gen)
		}
		// A first view: one range, or arcs between random points.
		var es []lease.Entry
		if rnd.IntN(5) == 0 {
			es = []lease.Entry{randEntry(ring.Full())}
		} else {
			ps := make([]uint64, 2+rnd.IntN(R))
			for i := range ps {
				ps[i] = rnd.Uint64()
			}
			slices.Sort(ps)
			ps = slices.Compact(ps)
			for i, p := range ps {
				es = append(es, randEntry(ring.Range{Start: ps[(i+len(ps)-1)%len(ps)], End: p}))
			}
		}
		v := lease.NewView(es)
		lsn := uint64(1)
		a.NamespaceViewChanged("ns", v, nil, lsn)
		b.NamespaceView("ns", v.Entries(), lsn)
		for step := range 40 {
			// A commit: a few ranges between existing ends and random
			// points, sometimes the whole circle, sometimes many.
			cur := v.Entries()
			point := func() uint64 {
				if rnd.IntN(2) == 0 {
					return cur[rnd.IntN(len(cur))].Range.End
				}
				return rnd.Uint64()
			}
			var changes []lease.Change
			var ranges []ring.Range
			k := 1 + rnd.IntN(4)
			if rnd.IntN(10) == 0 {
				k = 50 + rnd.IntN(200)
			}
			for range k {
				r := ring.Range{Start: point(), End: point()}
				if r.IsFull() && rnd.IntN(8) != 0 {
					continue
				}
				lsn++
				changes = append(changes, lease.Change{LSN: lsn, Entry: randEntry(r)})
				ranges = append(ranges, r)
			}
			if len(changes) == 0 {
				continue
			}
			v = v.With(changes)
			a.NamespaceViewChanged("ns", v, ranges, lsn)
			b.NamespaceView("ns", v.Entries(), lsn)
			if rnd.IntN(3) > 0 {
				ca.Advance(FlushInterval)
				cb.Advance(FlushInterval)
				checkSameBlocks(t, seed, iter, step, a, b, v, bits)
			}
		}
		ca.Advance(time.Second)
		cb.Advance(time.Second)
		checkSameBlocks(t, seed, iter, -1, a, b, v, bits)
	}
}

func checkSameBlocks(t *testing.T, seed uint64, iter, step int, a, b *LeaseTable, v lease.View, bits uint32) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	sa, sb := a.spaces["ns"], b.spaces["ns"]
	if sa.lsn != sb.lsn || sa.bits != sb.bits || len(sa.blocks) != len(sb.blocks) || sa.bits != bits {
		t.Fatalf("seed %d iteration %d step %d: by change LSN %d bits %d (%d blocks), whole LSN %d bits %d (%d blocks)",
			seed, iter, step, sa.lsn, sa.bits, len(sa.blocks), sb.lsn, sb.bits, len(sb.blocks))
	}
	for i := range sa.blocks {
		if !slices.Equal(sa.blocks[i], sb.blocks[i]) {
			t.Fatalf("seed %d iteration %d step %d: block %d by change %v, whole %v", seed, iter, step, i, sa.blocks[i], sb.blocks[i])
		}
	}
	// And they are the view's, as of the last flush, when nothing is kept.
	if sa.pending == nil {
		for i := range sa.blocks {
			if want := blockOf(v, uint32(i), bits); !slices.Equal(sa.blocks[i], want) {
				t.Fatalf("seed %d iteration %d step %d: block %d is %v, the view's %v", seed, iter, step, i, sa.blocks[i], want)
			}
		}
	}
	// Each block's resource is at the same version in both caches.
	ra, rb := sa.caches[ArcBlockTypeURL], sb.caches[ArcBlockTypeURL]
	ra.mu.Lock()
	defer ra.mu.Unlock()
	rb.mu.Lock()
	defer rb.mu.Unlock()
	for name, r := range ra.res {
		if s := rb.res[name]; s == nil || s.version != r.version {
			t.Fatalf("seed %d iteration %d step %d: %s at version %s by change, %v whole", seed, iter, step, name, r.version, s)
		}
	}
	if len(ra.res) != len(rb.res) {
		t.Fatalf("seed %d iteration %d step %d: %d resources by change, %d whole", seed, iter, step, len(ra.res), len(rb.res))
	}
}
