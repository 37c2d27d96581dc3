package manager

import (
	"fmt"
	"slices"
	"testing"
)

// TestCountMoves: the moves that take counts from one vector to another
// leave every owner at its new count, move each virtual node once, and
// only from owners whose count fell to owners whose count rose.
func TestCountMoves(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	from, to := []int{10, 3, 7, 4}, []int{4, 8, 7, 5}
	got := slices.Clone(from)
	idx := map[string]int{"a": 0, "b": 1, "c": 2, "d": 3}
	moved := 0
	for _, mv := range countMoves(names, slices.Clone(from), to) {
		a, b := idx[mv.From], idx[mv.To]
		if to[a] >= from[a] || to[b] <= from[b] || mv.N <= 0 {
			t.Fatalf("move %+v: from an owner that does not fall or to one that does not rise", mv)
		}
		got[a] -= mv.N
		got[b] += mv.N
		moved += mv.N
	}
	if !slices.Equal(got, to) || moved != 6 {
		t.Fatalf("counts %v after %d moved, want %v after 6", got, moved, to)
	}
}

// TestStartWithin: the search's first point of a placement stays within
// its bounds and keeps the total; bounds that cannot hold it are refused.
func TestStartWithin(t *testing.T) {
	from := []int{100, 100, 100, 100}
	lo, hi := []int{1, 1, 150, 1}, []int{400, 30, 400, 400}
	w, ok := startWithin(from, from, lo, hi)
	if !ok {
		t.Fatal("refused feasible bounds")
	}
	sum := 0
	for i := range w {
		if w[i] < lo[i] || w[i] > hi[i] {
			t.Fatalf("owner %d at %d, outside [%d, %d]", i, w[i], lo[i], hi[i])
		}
		sum += w[i]
	}
	if sum != 400 {
		t.Fatalf("counts %v sum to %d, want 400", w, sum)
	}
	if _, ok := startWithin(from, from, []int{1, 1, 1, 1}, []int{50, 50, 50, 50}); ok {
		t.Fatal("accepted bounds whose highs sum below the total")
	}
	if _, ok := startWithin(from, from, []int{1, 60, 1, 1}, []int{400, 50, 400, 400}); ok {
		t.Fatal("accepted a low above its high")
	}
}

// BenchmarkFitSearch: the search an episode starts with, on bench/balance's
// Zipf 1.1 load (seed 1, first phase) with 5 and 6 owners.
func BenchmarkFitSearch(b *testing.B) {
	for _, owners := range []int{5, fitSearchOwners} {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			z := newZipfPoolOf(owners, 1.1, 100_000, 1)
			z.hot = true
			in, _ := z.round(0, true)
			for b.Loop() {
				searchPlan(in).search(fitSearchRounds * in.MaxMoves)
			}
		})
	}
}
