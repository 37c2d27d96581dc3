package ring

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// linearLookup is the oracle for Ring.Lookup: the first position whose hash
// is >= h, scanning, else 0; -1 for no entries.
func linearLookup(hashes []uint64, h uint64) int {
	if len(hashes) == 0 {
		return -1
	}
	for p, x := range hashes {
		if x >= h {
			return p
		}
	}
	return 0
}

// checkRing verifies the ring's invariants and compares Lookup with the
// linear scan at 0, MaxUint64, every entry hash and its neighbours, and n
// random points.
func checkRing(t *testing.T, r *Ring, rng *rand.Rand, n int) {
	t.Helper()
	hs := make([]uint64, r.Len())
	for p, e := range r.Entries() {
		hs[p] = e.Hash
		if p > 0 && hs[p-1] > e.Hash {
			t.Fatalf("entries not sorted at %d", p)
		}
	}
	probe := func(h uint64) {
		t.Helper()
		if got, want := r.Lookup(h), linearLookup(hs, h); got != want {
			t.Fatalf("Lookup(%#x) = %d, want %d (ring of %d)", h, got, want, r.Len())
		}
	}
	probe(0)
	probe(math.MaxUint64)
	for _, x := range hs {
		probe(x)
		probe(x - 1)
		probe(x + 1)
	}
	for range n {
		probe(rng.Uint64())
	}
}

func TestLookupProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 2))
	for iter := 0; iter < 200; iter++ {
		n := rng.IntN(20)
		owners := make([]Owner, n)
		for i := range owners {
			owners[i] = Owner{Name: fmt.Sprintf("o%d-%d", iter, i), VNodes: rng.IntN(1 + rng.IntN(300))}
		}
		r, err := New(owners)
		if err != nil {
			t.Fatal(err)
		}
		checkRing(t, r, rng, 500)
	}
}

// TestLookupCraftedHashes drives Lookup's bucket index with hashes New would
// practically never produce: clustered in one bucket, duplicated, at 0 and
// MaxUint64, all in the top or bottom half.
func TestLookupCraftedHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	gens := map[string]func() uint64{
		"uniform":  rng.Uint64,
		"cluster":  func() uint64 { return 0x1234_5678_0000_0000 + rng.Uint64N(1<<20) },
		"few":      func() uint64 { return []uint64{0, 1, 1 << 63, math.MaxUint64}[rng.IntN(4)] },
		"top":      func() uint64 { return math.MaxUint64 - rng.Uint64N(1000) },
		"bottom":   func() uint64 { return rng.Uint64N(1000) },
		"bitsOnly": func() uint64 { return 1 << rng.IntN(64) },
	}
	for name, gen := range gens {
		for _, n := range []int{1, 2, 3, 7, 64, 65, 1000, 5000} {
			own := []Owner{{Name: "a"}, {Name: "b"}}
			entries := make([]Entry, n)
			for i := range entries {
				entries[i] = Entry{Hash: gen(), Owner: int32(i % 2), Index: int32(i / 2)}
				own[i%2].VNodes++
			}
			// build wants (owner, index) order.
			slices.SortFunc(entries, func(x, y Entry) int {
				if x.Owner != y.Owner {
					return int(x.Owner - y.Owner)
				}
				return int(x.Index - y.Index)
			})
			r := build(own, entries)
			for p := 1; p < r.Len(); p++ {
				x, y := r.Entry(p-1), r.Entry(p)
				if x.Hash == y.Hash && (x.Owner > y.Owner || x.Owner == y.Owner && x.Index > y.Index) {
					t.Fatalf("%s/%d: ties not in (owner, index) order at %d: %+v %+v", name, n, p, x, y)
				}
			}
			checkRing(t, r, rng, 200)
		}
	}
}

func TestNewIndependentOfOrder(t *testing.T) {
	owners := []Owner{{"c", 30}, {"a", 10}, {"b", 0}, {"d", 100}}
	r1, err := New(owners)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(owners)
	r2, err := New(owners)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r1.Entries(), r2.Entries()) || !slices.Equal(r1.Owners(), r2.Owners()) {
		t.Fatal("ring depends on owner order")
	}
	if r1.Len() != 140 || len(r1.Owners()) != 4 || r1.Owners()[1].Name != "b" {
		t.Fatalf("Len %d, owners %v", r1.Len(), r1.Owners())
	}
	if owners[0].Name != "d" {
		t.Fatal("New modified its argument")
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		owners []Owner
		want   error
	}{
		{[]Owner{{"", 1}}, ErrEmptyName},
		{[]Owner{{"a", 1}, {"b", 2}, {"a", 3}}, ErrDuplicateName},
		{[]Owner{{"a", -1}}, ErrNegative},
		{[]Owner{{"a", math.MaxInt}, {"b", math.MaxInt}}, ErrTooMany},
	} {
		if _, err := New(c.owners); !errors.Is(err, c.want) {
			t.Errorf("New(%v) = %v, want %v", c.owners, err, c.want)
		}
	}
}

func TestEmptyAndSingleRing(t *testing.T) {
	for _, owners := range [][]Owner{nil, {{"a", 0}}} {
		r, err := New(owners)
		if err != nil {
			t.Fatal(err)
		}
		if r.Lookup(0) != -1 || r.Lookup(math.MaxUint64) != -1 || r.LookupOwner(42) != "" {
			t.Fatal("empty ring found an entry")
		}
	}
	var zero Ring
	if zero.Lookup(7) != -1 {
		t.Fatal("zero Ring found an entry")
	}
	r, err := New([]Owner{{"solo", 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Arc(0).IsFull() {
		t.Fatalf("single entry arc %v, want the full circle", r.Arc(0))
	}
	for _, h := range []uint64{0, 1, r.Entry(0).Hash, r.Entry(0).Hash + 1, math.MaxUint64} {
		if r.LookupOwner(h) != "solo" {
			t.Fatalf("LookupOwner(%d) = %q", h, r.LookupOwner(h))
		}
	}
}

// TestArcs checks that the arcs of the entries partition the circle and that
// each arc's points look up to its entry.
func TestArcs(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 4))
	owners, err := Apportion([]string{"x", "y", "z"}, 64)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(owners)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for p := range r.Len() {
		a := r.Arc(p)
		total += a.Share()
		if p > 0 && a.Start != r.Arc(p-1).End {
			t.Fatalf("arc %d does not follow arc %d", p, p-1)
		}
		n, _ := a.Size()
		for _, h := range []uint64{a.Start + 1, a.End, a.Start + 1 + rng.Uint64N(n)} {
			if !a.Contains(h) || r.Lookup(h) != p {
				t.Fatalf("arc %d %v: point %#x looks up to %d", p, a, h, r.Lookup(h))
			}
		}
		if a.Contains(a.Start) {
			t.Fatalf("arc %v contains its start", a)
		}
	}
	if math.Abs(total-1) > 1e-9 {
		t.Fatalf("arcs cover %v of the circle", total)
	}
}

// FuzzLookup builds a ring from fuzzed owner names (comma-separated) and
// counts, and compares Lookup with the linear scan.
func FuzzLookup(f *testing.F) {
	f.Add("a,b,c", []byte{3, 1, 4}, uint64(0))
	f.Add("127.0.0.1:90,127.0.0.1:91", []byte{2, 2}, uint64(math.MaxUint64))
	f.Add("solo", []byte{1}, uint64(3551244743356806947))
	f.Add("x,,y", []byte{0, 5, 200}, uint64(1)<<63)
	f.Add("", []byte{}, uint64(12345))
	f.Fuzz(func(t *testing.T, names string, counts []byte, probe uint64) {
		var owners []Owner
		if names != "" {
			for i, n := range strings.Split(names, ",") {
				c := 0
				if i < len(counts) {
					c = int(counts[i])
				}
				owners = append(owners, Owner{Name: n, VNodes: c})
			}
		}
		r, err := New(owners)
		if err != nil {
			if !errors.Is(err, ErrEmptyName) && !errors.Is(err, ErrDuplicateName) {
				t.Fatalf("New: %v", err)
			}
			return
		}
		hs := make([]uint64, r.Len())
		for p, e := range r.Entries() {
			hs[p] = e.Hash
		}
		for _, h := range []uint64{probe, 0, math.MaxUint64, probe ^ 1<<63} {
			if got, want := r.Lookup(h), linearLookup(hs, h); got != want {
				t.Fatalf("Lookup(%#x) = %d, want %d", h, got, want)
			}
		}
		for _, x := range hs {
			for _, h := range []uint64{x - 1, x, x + 1} {
				if got, want := r.Lookup(h), linearLookup(hs, h); got != want {
					t.Fatalf("Lookup(%#x) = %d, want %d", h, got, want)
				}
			}
		}
	})
}

func TestAppendHashesIn(t *testing.T) {
	r, err := New([]Owner{{Name: "a", VNodes: 8}, {Name: "b", VNodes: 8}})
	if err != nil {
		t.Fatal(err)
	}
	hs := r.hashes
	for _, rg := range []Range{Full(), {hs[2], hs[5]}, {hs[5], hs[2]}, {hs[3], hs[3] + 1}, {hs[15], hs[0]}, {hs[0] - 1, hs[0]}} {
		var want []uint64
		for _, h := range hs {
			if rg.Contains(h) {
				want = append(want, h)
			}
		}
		got := r.AppendHashesIn(nil, rg)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("AppendHashesIn(%v) = %x, want %x", rg, got, want)
		}
	}
}
