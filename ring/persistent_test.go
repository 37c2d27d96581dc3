package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// bigTable is a compact table of up to a few thousand arcs (many chunks),
// or a small one from randTable.
func bigTable(rng *rand.Rand) *Table[int] {
	if rng.IntN(3) == 0 {
		tb := randTable(rng)
		tb.Compact()
		return tb
	}
	n := 1 + rng.IntN(3000)
	ends := make([]uint64, n)
	for i := range ends {
		ends[i] = randPoint(rng)
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	tb := &Table[int]{ends: ends, vals: make([]int, len(ends))}
	for i := range tb.vals {
		tb.vals[i] = rng.IntN(5)
	}
	tb.Compact()
	return tb
}

type arcOf struct {
	r Range
	v int
}

func arcsOfTable(t *Table[int]) []arcOf {
	var out []arcOf
	t.Each(func(r Range, v int) { out = append(out, arcOf{r, v}) })
	return out
}

func arcsOfPersistent(p Persistent[int]) []arcOf {
	var out []arcOf
	p.Each(func(r Range, v int) { out = append(out, arcOf{r, v}) })
	return out
}

// TestPersistentWithIsSetAll checks With against SetAll and Compact on a
// copy: the same arcs and values, on random compact tables of up to a few
// thousand arcs and random assignments (a few, applied in place, or many,
// applied in one merge pass); the Persistent edited is unchanged, and Get
// and Walk agree with the table.
func TestPersistentWithIsSetAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 17))
	for iter := 0; iter < 500; iter++ {
		tb := bigTable(rng)
		p := tb.Persistent()
		before := arcsOfPersistent(p)
		if !slices.Equal(before, arcsOfTable(tb)) {
			t.Fatalf("Persistent of a table differs from it")
		}
		// Several rounds of edits, each on the result of the last, as the
		// replicated view takes commit after commit.
		for round := range 1 + rng.IntN(4) {
			var as []Assignment[int]
			for range 1 + rng.IntN(1+rng.IntN(3)*40) {
				for _, r := range randRanges(rng, tb) {
					as = append(as, Assignment[int]{Range: r, Value: rng.IntN(5)})
				}
			}
			want := tb.Clone()
			want.SetAll(as)
			want.Compact()
			got := p.With(as)
			if g, w := arcsOfPersistent(got), arcsOfTable(want); !slices.Equal(g, w) {
				t.Fatalf("iteration %d round %d: With differs from SetAll+Compact\ntable %v %v\nassignments %v\ngot  %v\nwant %v",
					iter, round, tb.ends, tb.vals, as, g, w)
			}
			if got.Len() != want.Len() {
				t.Fatalf("iteration %d round %d: Len %d, want %d", iter, round, got.Len(), want.Len())
			}
			if g := arcsOfPersistent(p); !slices.Equal(g, before) {
				t.Fatalf("iteration %d round %d: With changed the Persistent it edited", iter, round)
			}
			for range 20 {
				h := randPoint(rng)
				if rng.IntN(3) == 0 {
					h = want.ends[rng.IntN(want.Len())]
				}
				if g, w := got.Get(h), want.Get(h); g != w {
					t.Fatalf("Get(%x) = %d, want %d", h, g, w)
				}
				checkWalk(t, got, want, h, rng.IntN(5))
			}
			for _, c := range got.chunks {
				if len(c.ends) == 0 || len(c.ends) > chunkMax {
					t.Fatalf("a chunk of %d arcs", len(c.ends))
				}
			}
			tb, p, before = want, got, arcsOfTable(want)
		}
	}
}

// checkWalk checks Walk from h against the table's arcs from the one
// containing h, clockwise, stopping after k+1 arcs (or all of them).
func checkWalk(t *testing.T, p Persistent[int], tb *Table[int], h uint64, k int) {
	t.Helper()
	var got []arcOf
	p.Walk(h, func(r Range, v int) bool {
		got = append(got, arcOf{r, v})
		return len(got) <= k
	})
	var want []arcOf
	i := tb.Find(h)
	for range min(k+1, tb.Len()) {
		r, v := tb.At(i)
		want = append(want, arcOf{r, v})
		i = (i + 1) % tb.Len()
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Walk(%x) = %v, want %v", h, got, want)
	}
}

// TestPersistentEdgeCases covers the whole circle, one arc, and ranges
// ending at 0 and at the maximum hash.
func TestPersistentEdgeCases(t *testing.T) {
	const max = ^uint64(0)
	for _, tc := range []struct {
		table []Assignment[int]
		as    []Assignment[int]
	}{
		{nil, []Assignment[int]{{Range{5, 5}, 1}}},
		{nil, []Assignment[int]{{Range{5, 9}, 0}}},
		{nil, []Assignment[int]{{Range{5, 9}, 1}, {Range{9, 5}, 1}}},
		{nil, []Assignment[int]{{Range{max, 0}, 2}}},
		{nil, []Assignment[int]{{Range{0, max}, 2}, {Range{max, 0}, 3}}},
		{[]Assignment[int]{{Range{10, 20}, 1}}, []Assignment[int]{{Range{20, 10}, 1}}},
		{[]Assignment[int]{{Range{10, 20}, 1}}, []Assignment[int]{{Range{15, 10}, 0}}},
		{[]Assignment[int]{{Range{10, 20}, 1}, {Range{max - 1, 3}, 2}}, []Assignment[int]{{Range{max, 1}, 1}}},
	} {
		tb := NewTable(0)
		tb.SetAll(tc.table)
		tb.Compact()
		want := tb.Clone()
		want.SetAll(tc.as)
		want.Compact()
		got := tb.Persistent().With(tc.as)
		if g, w := arcsOfPersistent(got), arcsOfTable(want); !slices.Equal(g, w) {
			t.Errorf("%v then %v: got %v, want %v", tc.table, tc.as, g, w)
		}
	}
}

// BenchmarkPersistentWith measures one commit's worth of changes (k arcs
// set, in ring order) on a view of n arcs, against SetAll on a copy.
func BenchmarkPersistentWith(b *testing.B) {
	for _, n := range []int{4096, 65536} {
		rng := rand.New(rand.NewPCG(1, 2))
		ends := make([]uint64, n)
		for i := range ends {
			ends[i] = rng.Uint64()
		}
		slices.Sort(ends)
		tb := &Table[int]{ends: ends, vals: make([]int, n)}
		for i := range tb.vals {
			tb.vals[i] = i
		}
		p := tb.Persistent()
		for _, k := range []int{1, 132} {
			var as []Assignment[int]
			for j := range k {
				i := (j * (n / k)) + 1
				as = append(as, Assignment[int]{Range: Range{Start: ends[i-1], End: ends[i]}, Value: -j})
			}
			b.Run(fmt.Sprintf("with/n=%d/k=%d", n, k), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.With(as)
				}
			})
			b.Run(fmt.Sprintf("rebuild/n=%d/k=%d", n, k), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					t := tb.Clone()
					t.SetAll(as)
					t.Compact()
				}
			})
		}
	}
}
