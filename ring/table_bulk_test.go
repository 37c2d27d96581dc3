package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// randTable is a table with a few random Sets applied: shared boundaries,
// wrapping arcs, 0 and the maximum hash all occur.
func randTable(rng *rand.Rand) *Table[int] {
	tb := NewTable(0)
	for range rng.IntN(10) {
		tb.Set(Range{Start: randPoint(rng), End: randPoint(rng)}, rng.IntN(4))
	}
	return tb
}

// randRanges returns ranges of one of three shapes: a partition of the
// circle in ring order (as a snapshot is), disjoint ranges in clockwise
// order from a random point (as one step's changes are), or arbitrary
// ranges that overlap, repeat and cover the whole circle. Sometimes several
// shapes are concatenated, as a lookup's catch-up concatenates steps.
func randRanges(rng *rand.Rand, tb *Table[int]) []Range {
	var rs []Range
	for range 1 + rng.IntN(3) {
		// Points: random ones, and existing boundaries.
		ps := make([]uint64, 1+rng.IntN(12))
		for i := range ps {
			if rng.IntN(3) == 0 {
				ps[i] = tb.ends[rng.IntN(tb.Len())]
			} else {
				ps[i] = randPoint(rng)
			}
		}
		slices.Sort(ps)
		ps = slices.Compact(ps)
		switch rng.IntN(3) {
		case 0: // a partition, wrapping arc first
			if len(ps) == 1 {
				rs = append(rs, Range{Start: ps[0], End: ps[0]})
				break
			}
			for i, p := range ps {
				rs = append(rs, Range{Start: ps[(i+len(ps)-1)%len(ps)], End: p})
			}
		case 1: // disjoint, clockwise from a rotation point, gaps allowed
			rot := rng.IntN(len(ps))
			ps = append(ps[rot:], ps[:rot]...)
			for i := 0; i+1 < len(ps); i++ {
				if rng.IntN(3) > 0 {
					rs = append(rs, Range{Start: ps[i], End: ps[i+1]})
				}
			}
		default: // arbitrary
			for range len(ps) {
				rs = append(rs, Range{Start: ps[rng.IntN(len(ps))], End: ps[rng.IntN(len(ps))]})
			}
		}
	}
	return rs
}

func checkSame(t *testing.T, what string, got, want *Table[int], detail func() string) {
	t.Helper()
	if !slices.Equal(got.ends, want.ends) || !slices.Equal(got.vals, want.vals) {
		t.Fatalf("%s:\n%s\nbulk:    %v %v\none by one: %v %v",
			what, detail(), got.ends, got.vals, want.ends, want.vals)
	}
}

// TestSetAllIsRepeatedSet checks SetAll against Set called once per
// assignment: the same ends and values, on random tables and ranges.
func TestSetAllIsRepeatedSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 11))
	for iter := 0; iter < 2000; iter++ {
		tb := randTable(rng)
		var as []Assignment[int]
		for _, r := range randRanges(rng, tb) {
			as = append(as, Assignment[int]{Range: r, Value: rng.IntN(6)})
		}
		want := tb.Clone()
		for _, a := range as {
			want.Set(a.Range, a.Value)
		}
		got := tb.Clone()
		got.SetAll(as)
		checkSame(t, "SetAll", got, want, func() string {
			return fmt.Sprintf("table ends %v vals %v, assignments %v", tb.ends, tb.vals, as)
		})
	}
}

// TestUpdateAllIsRepeatedSpan checks UpdateAll against Span and SetValue
// per range: the same table, and fn called with the same arguments in the
// same order.
func TestUpdateAllIsRepeatedSpan(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 13))
	type call struct {
		i   int
		r   Range
		old int
	}
	for iter := 0; iter < 2000; iter++ {
		tb := randTable(rng)
		rs := randRanges(rng, tb)
		// fn depends on the old value, the range index and the arc, so that
		// a difference in any of them shows in the table.
		fn := func(i int, r Range, old int) int { return old*7 + i + int(r.End%5) }

		want := tb.Clone()
		var wantCalls []call
		for i, r := range rs {
			want.Span(r, func(j int) {
				a, v := want.At(j)
				wantCalls = append(wantCalls, call{i, a, v})
				want.SetValue(j, fn(i, a, v))
			})
		}
		got := tb.Clone()
		var gotCalls []call
		got.UpdateAll(rs, func(i int, r Range, old int) int {
			gotCalls = append(gotCalls, call{i, r, old})
			return fn(i, r, old)
		})
		detail := func() string { return fmt.Sprintf("table ends %v vals %v, ranges %v", tb.ends, tb.vals, rs) }
		checkSame(t, "UpdateAll", got, want, detail)
		if !slices.Equal(gotCalls, wantCalls) {
			t.Fatalf("UpdateAll calls differ:\n%s\nbulk:       %v\none by one: %v", detail(), gotCalls, wantCalls)
		}
	}
}

// TestDisjointRun checks that every run disjointRun cuts is pairwise
// disjoint, and that a sorted partition and a clockwise list of disjoint
// ranges (what the callers pass) are one run: one merge pass.
func TestDisjointRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 17))
	overlap := func(a, b Range) bool {
		// Two arcs overlap when one contains the point just after the
		// other's start.
		return a.IsFull() || b.IsFull() || a.Contains(b.Start+1) || b.Contains(a.Start+1)
	}
	for iter := 0; iter < 2000; iter++ {
		rs := randRanges(rng, NewTable(0))
		at := func(i int) Range { return rs[i] }
		for lo := 0; lo < len(rs); {
			hi := disjointRun(lo, len(rs), at)
			if hi <= lo || hi > len(rs) {
				t.Fatalf("disjointRun(%d) = %d of %d", lo, hi, len(rs))
			}
			for i := lo; i < hi; i++ {
				for j := i + 1; j < hi; j++ {
					if overlap(rs[i], rs[j]) {
						t.Fatalf("run %v holds overlapping %v and %v", rs[lo:hi], rs[i], rs[j])
					}
				}
			}
			lo = hi
		}
	}
	// A partition with the wrapping arc first, as a snapshot sorted by End.
	ps := []uint64{0, 5, 1 << 62, 1 << 63, ^uint64(0)}
	var part []Range
	for i, p := range ps {
		part = append(part, Range{Start: ps[(i+len(ps)-1)%len(ps)], End: p})
	}
	if hi := disjointRun(0, len(part), func(i int) Range { return part[i] }); hi != len(part) {
		t.Errorf("partition %v cut at %d, want one run", part, hi)
	}
	// Disjoint ranges clockwise from 1<<63, with gaps, ending at the start.
	cw := []Range{{1 << 63, ^uint64(0)}, {0, 5}, {7, 9}, {1 << 62, 1 << 63}}
	if hi := disjointRun(0, len(cw), func(i int) Range { return cw[i] }); hi != len(cw) {
		t.Errorf("clockwise %v cut at %d, want one run", cw, hi)
	}
}

// BenchmarkSetAll applies a partition of n arcs over a table of n other
// arcs, against n calls of Set.
func BenchmarkSetAll(b *testing.B) {
	for _, n := range []int{4096, 65536} {
		rng := rand.New(rand.NewPCG(1, 2))
		base := NewTable(0)
		var as []Assignment[int]
		ps := make([]uint64, n)
		for i := range ps {
			ps[i] = rng.Uint64()
		}
		slices.Sort(ps)
		for i, p := range ps {
			as = append(as, Assignment[int]{Range: Range{Start: ps[(i+n-1)%n], End: p}, Value: i % 3})
		}
		base.SetAll(as)
		for i := range ps {
			ps[i] = rng.Uint64()
		}
		slices.Sort(ps)
		as = as[:0]
		for i, p := range ps {
			as = append(as, Assignment[int]{Range: Range{Start: ps[(i+n-1)%n], End: p}, Value: i % 5})
		}
		b.Run(fmt.Sprintf("SetAll/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				base.Clone().SetAll(as)
			}
		})
		b.Run(fmt.Sprintf("Set/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t := base.Clone()
				for _, a := range as {
					t.Set(a.Range, a.Value)
				}
			}
		})
	}
}
