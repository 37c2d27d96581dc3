package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

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
		b.Run(fmt.Sprintf("update/R=%d", r), func(b *testing.B) {
			// A join and the leave that undoes it, each with its Moves,
			// in place: what the manager's desired ring does.
			cur := old.Clone()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cur.Update(after); err != nil {
					b.Fatal(err)
				}
				if _, err := cur.Update(before); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("withdiff/R=%d", r), func(b *testing.B) {
			// The same join and leave as With and Diff: what the manager
			// did before Update.
			cur := old
			b.ReportAllocs()
			for b.Loop() {
				next, err := cur.With(after)
				if err != nil {
					b.Fatal(err)
				}
				Diff(cur, next)
				back, err := next.With(before)
				if err != nil {
					b.Fatal(err)
				}
				Diff(next, back)
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

// TestUpdateIsNewAndDiff checks Ring.Update on random sequences of
// membership and count changes (joins, leaves, counts that grow and
// shrink, rings of one entry, rings emptied): the ring it leaves is New's,
// field for field, and the Moves it returns are Diff's between the ring
// before and after. The copy taken before (Clone) must not change, and
// With from it gives New's ring too.
func TestUpdateIsNewAndDiff(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 23))
	cur, _ := New(nil)
	for iter := 0; iter < 400; iter++ {
		counts := map[string]int{}
		for step := 0; step < 15; step++ {
			for range 1 + rng.IntN(3) {
				name := fmt.Sprintf("o%d", rng.IntN(10))
				switch rng.IntN(6) {
				case 0:
					delete(counts, name)
				case 1:
					counts[name] = rng.IntN(3) // rings of a few entries
				case 2:
					clear(counts)
				default:
					counts[name] = rng.IntN(200)
				}
			}
			owners, want := ownersAndRing(t, counts)
			before := cur.Clone()
			beforeEntries := slices.Clone(cur.Entries())
			moves, err := cur.Update(owners)
			if err != nil {
				t.Fatal(err)
			}
			if !sameRing(cur, want) {
				t.Fatalf("iteration %d step %d: Update differs from New for %v", iter, step, owners)
			}
			if wantMoves := Diff(before, want); !slices.Equal(moves, wantMoves) {
				t.Fatalf("iteration %d step %d: Update's moves\n%v\nDiff's\n%v", iter, step, moves, wantMoves)
			}
			// With, from the ring before (a copy: it must not change it)
			// or from nothing, gives the same ring.
			for _, from := range []*Ring{before, nil} {
				w, err := from.With(owners)
				if err != nil {
					t.Fatal(err)
				}
				if !sameRing(w, want) {
					t.Fatalf("iteration %d step %d: With differs from New for %v", iter, step, owners)
				}
			}
			for range 10 {
				if h := rng.Uint64(); cur.LookupOwner(h) != want.LookupOwner(h) {
					t.Fatalf("iteration %d step %d: LookupOwner(%x) differs", iter, step, h)
				}
			}
			if !slices.Equal(before.Entries(), beforeEntries) {
				t.Fatalf("iteration %d step %d: Update changed a Clone taken before it", iter, step)
			}
		}
	}
	dup := []Owner{{Name: "a", VNodes: 1}, {Name: "a", VNodes: 2}}
	if _, err := cur.Update(dup); err == nil {
		t.Fatal("Update took a duplicate name")
	}
	if _, err := (*Ring)(nil).With(dup); err == nil {
		t.Fatal("With took a duplicate name")
	}
}

// sameRing reports whether two rings are equal field for field.
func sameRing(a, b *Ring) bool {
	return slices.Equal(a.Entries(), b.Entries()) && slices.Equal(a.Owners(), b.Owners()) &&
		slices.Equal(a.hashes, b.hashes) && slices.Equal(a.index, b.index) && a.shift == b.shift
}

// TestUpdateEqualHashes plants entries with equal hashes (which xxhash
// gives with odds of 2^-64, so they are written by hand): an entry that
// goes beside one of its hash, and one that comes onto the hash of an
// entry already there. Update must not take its incremental path for
// either (plan refuses), and rebuilds the ring as New, diffing it whole.
func TestUpdateEqualHashes(t *testing.T) {
	// a_1 and b_0 share hash 50; b leaves.
	tied := func() *Ring {
		own := []Owner{{Name: "a", VNodes: 2}, {Name: "b", VNodes: 1}}
		return build(own, []Entry{{Hash: 10, Owner: 0, Index: 0}, {Hash: 50, Owner: 0, Index: 1}, {Hash: 50, Owner: 1, Index: 0}})
	}
	// a's one entry sits where c_0 will hash; c joins.
	onto := func() *Ring {
		return build([]Owner{{Name: "a", VNodes: 1}}, []Entry{{Hash: xxhash.Sum64String("c_0"), Owner: 0, Index: 0}})
	}
	for _, tc := range []struct {
		name   string
		ring   func() *Ring
		owners []Owner
	}{
		{"an entry leaves its twin", tied, []Owner{{Name: "a", VNodes: 2}}},
		{"an entry comes onto another", onto, []Owner{{Name: "a", VNodes: 1}, {Name: "c", VNodes: 1}}},
	} {
		r := tc.ring()
		own, _, err := sortedOwners(tc.owners)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.plan(own); ok {
			t.Fatalf("%s: plan took the incremental path", tc.name)
		}
		want, _ := New(tc.owners)
		moves, err := r.Update(tc.owners)
		if err != nil {
			t.Fatal(err)
		}
		if !sameRing(r, want) {
			t.Fatalf("%s: Update differs from New", tc.name)
		}
		if wantMoves := Diff(tc.ring(), want); !slices.Equal(moves, wantMoves) {
			t.Fatalf("%s: moves %v, want %v", tc.name, moves, wantMoves)
		}
	}
}

// ownersAndRing returns the owners of counts (in map order) and New's ring
// of them.
func ownersAndRing(t *testing.T, counts map[string]int) ([]Owner, *Ring) {
	t.Helper()
	var owners []Owner
	for name, v := range counts {
		owners = append(owners, Owner{Name: name, VNodes: v})
	}
	r, err := New(owners)
	if err != nil {
		t.Fatal(err)
	}
	return owners, r
}

// TestUpdateApportioned checks Update as the manager uses it: a ring of
// R = 65536 apportioned among a few hundred owners, owners joining and
// leaving one at a time, so that every count changes by about one and the
// index keeps its buckets. Each step is compared with New and Diff.
func TestUpdateApportioned(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 29))
	const r = 65536
	var names []string
	for i := range 300 {
		names = append(names, fmt.Sprintf("owner-%04d", i))
	}
	in := map[string]bool{}
	for _, n := range names[:200] {
		in[n] = true
	}
	apportioned := func() []Owner {
		var live []string
		for _, n := range names {
			if in[n] {
				live = append(live, n)
			}
		}
		owners, err := Apportion(live, r)
		if err != nil {
			t.Fatal(err)
		}
		return owners
	}
	cur, _ := New(apportioned())
	for step := range 30 {
		n := names[rng.IntN(len(names))]
		in[n] = !in[n]
		owners := apportioned()
		want, _ := New(owners)
		before := cur.Clone()
		moves, err := cur.Update(owners)
		if err != nil {
			t.Fatal(err)
		}
		if !sameRing(cur, want) {
			t.Fatalf("step %d (%s in: %v): Update differs from New", step, n, in[n])
		}
		if wantMoves := Diff(before, want); !slices.Equal(moves, wantMoves) {
			t.Fatalf("step %d (%s in: %v): %d moves, Diff has %d", step, n, in[n], len(moves), len(wantMoves))
		}
	}
}
