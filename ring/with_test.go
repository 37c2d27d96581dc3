package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWithIsNew checks Ring.With against New on random sequences of
// membership and count changes (joins, leaves, counts that grow and
// shrink, renamed sets): the same entries, in the same order, and owners.
func TestWithIsNew(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 19))
	for iter := 0; iter < 300; iter++ {
		var cur *Ring
		counts := map[string]int{}
		for step := 0; step < 15; step++ {
			for range 1 + rng.IntN(4) {
				name := fmt.Sprintf("o%d", rng.IntN(12))
				switch rng.IntN(4) {
				case 0:
					delete(counts, name)
				default:
					counts[name] = rng.IntN(300)
				}
			}
			var owners []Owner
			for name, v := range counts {
				owners = append(owners, Owner{Name: name, VNodes: v})
			}
			want, err := New(owners)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cur.With(owners)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Entries(), want.Entries()) || !slices.Equal(got.Owners(), want.Owners()) ||
				!slices.Equal(got.hashes, want.hashes) || !slices.Equal(got.index, want.index) || got.shift != want.shift {
				t.Fatalf("iteration %d step %d: With differs from New for %v", iter, step, owners)
			}
			for range 10 {
				h := rng.Uint64()
				if got.LookupOwner(h) != want.LookupOwner(h) {
					t.Fatalf("LookupOwner(%x) differs", h)
				}
			}
			cur = got
		}
	}
	if _, err := (*Ring)(nil).With([]Owner{{Name: "a", VNodes: 1}, {Name: "a", VNodes: 2}}); err == nil {
		t.Fatal("With took a duplicate name")
	}
}

// BenchmarkRingWith measures a join to a ring of 500 owners at R = 65536
// (every count changes by one or so), With against New.
func BenchmarkRingWith(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		names := make([]string, 501)
		for i := range names {
			names[i] = fmt.Sprintf("owner-%04d", i)
		}
		before, _ := Apportion(names[:500], r)
		after, _ := Apportion(names, r)
		old, _ := New(before)
		b.Run(fmt.Sprintf("with/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := old.With(after); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("new/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(after); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
