package ring

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSplitSortedIsRepeatedSplit checks SplitSorted against Split called
// once per point, on random tables and sorted point lists with duplicates,
// existing ends, 0 and the maximum hash.
func TestSplitSortedIsRepeatedSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	for iter := 0; iter < 500; iter++ {
		tb := NewTable(0)
		for range rng.IntN(8) {
			tb.Set(Range{Start: randPoint(rng), End: randPoint(rng)}, rng.IntN(4))
		}
		xs := make([]uint64, rng.IntN(12))
		for i := range xs {
			if i > 0 && rng.IntN(4) == 0 {
				xs[i] = xs[i-1]
			} else if rng.IntN(4) == 0 {
				xs[i] = tb.ends[rng.IntN(tb.Len())]
			} else {
				xs[i] = randPoint(rng)
			}
		}
		slices.Sort(xs)
		want := tb.Clone()
		for _, x := range xs {
			want.Split(x)
		}
		got := tb.Clone()
		got.SplitSorted(xs)
		if !slices.Equal(got.ends, want.ends) || !slices.Equal(got.vals, want.vals) {
			t.Fatalf("table ends %v vals %v, points %v:\nSplitSorted: %v %v\nSplit:       %v %v",
				tb.ends, tb.vals, xs, got.ends, got.vals, want.ends, want.vals)
		}
	}
}
