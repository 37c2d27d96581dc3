package ring

import (
	"math/rand/v2"
	"testing"
)

// TestWalkIn checks WalkIn against Walk cut at the range's ends: the same
// pieces with the same values, in clockwise order from r.Start.
func TestWalkIn(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	point := func() uint64 {
		if rng.IntN(4) == 0 {
			return []uint64{0, 1, ^uint64(0)}[rng.IntN(3)]
		}
		return uint64(rng.IntN(16)) << 60
	}
	randTable := func() *Table[int] {
		tb := NewTable(0)
		for range rng.IntN(6) {
			tb.Set(Range{Start: point(), End: point()}, rng.IntN(3))
		}
		return tb
	}
	for iter := 0; iter < 5000; iter++ {
		a, b := randTable(), randTable()
		r := Range{Start: point(), End: point()}
		type piece struct {
			r      Range
			va, vb int
		}
		var got []piece
		WalkIn(a, b, r, func(p Range, va, vb int) { got = append(got, piece{p, va, vb}) })
		if r.IsFull() { // Walk's own order
			continue
		}
		// The pieces tile r, clockwise from its start.
		at := r.Start
		for i, p := range got {
			if p.r.Start != at || (p.r.IsFull() && !r.IsFull()) {
				t.Fatalf("r %v: piece %d is %v, want it to start at %x; pieces %v", r, i, p.r, at, got)
			}
			at = p.r.End
			if mid := p.r.End; a.Get(mid) != p.va || b.Get(mid) != p.vb {
				t.Fatalf("r %v: piece %v has values %d %d, tables say %d %d", r, p.r, p.va, p.vb, a.Get(mid), b.Get(mid))
			}
		}
		if at != r.End || len(got) == 0 {
			t.Fatalf("r %v: pieces %v end at %x", r, got, at)
		}
		// Every boundary of a or b inside r is a cut.
		cuts := map[uint64]bool{}
		for _, p := range got {
			cuts[p.r.End] = true
		}
		for _, tb := range [][]uint64{a.ends, b.ends} {
			if len(tb) == 1 {
				continue // a one-arc table has no boundary
			}
			for _, e := range tb {
				if r.Contains(e) && !cuts[e] {
					t.Fatalf("r %v: end %x of a table is not a cut: %v", r, e, got)
				}
			}
		}
	}
}
