package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// checkDiff compares Diff(a, b) with the rings themselves: the moves are
// maximal, ordered, disjoint, and at every boundary of either ring (and its
// neighbours) and at random points, a point is in a move exactly when its
// owner differs, with that move's From and To.
func checkDiff(t *testing.T, a, b *Ring, rng *rand.Rand, samples int) []Move {
	t.Helper()
	moves := Diff(a, b)
	for i, m := range moves {
		if m.From == m.To {
			t.Fatalf("move %d %v does not move (%q)", i, m.Range, m.From)
		}
		if i > 0 {
			p := moves[i-1]
			if p.Range.End == m.Range.Start && p.From == m.From && p.To == m.To {
				t.Fatalf("moves %d and %d are adjacent with the same owners", i-1, i)
			}
		}
	}
	if n := len(moves); n > 1 {
		f, l := moves[0], moves[n-1]
		if l.Range.End == f.Range.Start && l.From == f.From && l.To == f.To {
			t.Fatal("first and last moves meet at the wrap with the same owners")
		}
		// Clockwise order: walking from the first move's start (exclusive),
		// the moves' ends come in increasing distance; an end at the origin
		// itself is the farthest point.
		origin := f.Range.Start
		dist := func(x uint64) uint64 { return x - origin - 1 }
		for i := 1; i < n; i++ {
			if dist(moves[i].Range.End) <= dist(moves[i-1].Range.End) {
				t.Fatalf("moves not in clockwise order: %v then %v", moves[i-1].Range, moves[i].Range)
			}
		}
	}
	find := func(h uint64) *Move {
		var found *Move
		for i := range moves {
			if moves[i].Range.Contains(h) {
				if found != nil {
					t.Fatalf("point %#x in two moves", h)
				}
				found = &moves[i]
			}
		}
		return found
	}
	check := func(h uint64) {
		t.Helper()
		from, to := a.LookupOwner(h), b.LookupOwner(h)
		m := find(h)
		switch {
		case from == to && m != nil:
			t.Fatalf("point %#x stays with %q but is in move %+v", h, from, *m)
		case from != to && m == nil:
			t.Fatalf("point %#x moves %q -> %q, in no move", h, from, to)
		case m != nil && (m.From != from || m.To != to):
			t.Fatalf("point %#x moves %q -> %q, in move %+v", h, from, to, *m)
		}
	}
	for _, r := range []*Ring{a, b} {
		for _, e := range r.Entries() {
			check(e.Hash - 1)
			check(e.Hash)
			check(e.Hash + 1)
		}
	}
	check(0)
	check(math.MaxUint64)
	// Sampling also estimates the moved share.
	moved := 0
	for range samples {
		h := rng.Uint64()
		check(h)
		if a.LookupOwner(h) != b.LookupOwner(h) {
			moved++
		}
	}
	if samples > 0 {
		est, got := float64(moved)/float64(samples), MovedShare(moves)
		if tol := 5/math.Sqrt(float64(samples)) + 1e-9; math.Abs(est-got) > tol {
			t.Fatalf("MovedShare %v, sampled %v", got, est)
		}
	}
	return moves
}

func mustRing(t testing.TB, owners []Owner) *Ring {
	t.Helper()
	r, err := New(owners)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDiffRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 11))
	names := []string{"a", "b", "c", "d", "e", "f"}
	randRing := func() *Ring {
		var owners []Owner
		for _, n := range names[:1+rng.IntN(len(names))] {
			if rng.IntN(4) > 0 {
				owners = append(owners, Owner{n, rng.IntN(1 + rng.IntN(40))})
			}
		}
		return mustRing(t, owners)
	}
	for range 300 {
		a := randRing()
		b := randRing()
		if rng.IntN(3) == 0 {
			// b is a with a few virtual nodes moved: small, local diffs.
			owners := a.Owners()
			if len(owners) >= 2 && owners[0].VNodes > 0 {
				moved, err := MoveVNodes(owners, owners[0].Name, owners[1].Name, 1+rng.IntN(owners[0].VNodes))
				if err != nil {
					t.Fatal(err)
				}
				b = mustRing(t, moved)
			}
		}
		checkDiff(t, a, b, rng, 2000)
		if len(Diff(a, a)) != 0 {
			t.Fatal("a ring differs from itself")
		}
		// Reversed, every move swaps From and To.
		ab, ba := Diff(a, b), Diff(b, a)
		if len(ab) != len(ba) {
			t.Fatalf("Diff(a,b) has %d moves, Diff(b,a) %d", len(ab), len(ba))
		}
		for i := range ab {
			if ab[i].Range != ba[i].Range || ab[i].From != ba[i].To || ab[i].To != ba[i].From {
				t.Fatalf("move %d: %+v vs %+v", i, ab[i], ba[i])
			}
		}
	}
}

func TestDiffEdgeCases(t *testing.T) {
	empty := mustRing(t, nil)
	one := mustRing(t, []Owner{{"x", 1}})
	two := mustRing(t, []Owner{{"x", 3}, {"y", 2}})
	if Diff(empty, empty) != nil || Diff(nil, nil) != nil {
		t.Fatal("empty rings differ")
	}
	// From empty to one owner: the whole circle, as one full move.
	for _, m := range [][]Move{Diff(empty, one), Diff(nil, two)} {
		share := MovedShare(m)
		if share != 1 {
			t.Fatalf("empty -> ring moves %v of the circle: %+v", share, m)
		}
	}
	if m := Diff(empty, one); len(m) != 1 || !m[0].Range.IsFull() || m[0].From != "" || m[0].To != "x" {
		t.Fatalf("empty -> one: %+v", m)
	}
	// Two owners replaced by a third everywhere: one full move per (from,
	// to) run; from "x" and "y" the circle is cut into runs but covers 1.
	z := mustRing(t, []Owner{{"z", 4}})
	if s := MovedShare(Diff(two, z)); math.Abs(s-1) > 1e-12 {
		t.Fatalf("two -> z moves %v", s)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	checkDiff(t, two, z, rng, 1000)
	checkDiff(t, one, two, rng, 1000)
	checkDiff(t, two, empty, rng, 1000)
	// Same owner, other entries: x keeps the arcs its entries still own.
	checkDiff(t, one, mustRing(t, []Owner{{"x", 7}}), rng, 100)
	if Diff(one, mustRing(t, []Owner{{"x", 7}})) != nil {
		t.Fatal("a ring with one owner differs from another with the same owner")
	}
}

// movedShares measures the share of key space that changes owner when one
// owner joins a pool of n (and when one of n leaves), under Fuge's
// constant total R (Apportion), and under a classic ring with a fixed count
// per owner.
func movedShares(t *testing.T, n, size int) (join, leave, classic float64) {
	names := make([]string, n+1)
	for i := range names {
		names[i] = fmt.Sprintf("owner-%d", i)
	}
	ring := func(names []string) *Ring {
		owners, err := Apportion(names, size)
		if err != nil {
			t.Fatal(err)
		}
		return mustRing(t, owners)
	}
	before, after := ring(names[:n]), ring(names)
	join = MovedShare(Diff(before, after))
	// Leaving: owner-0 leaves the pool of n.
	leave = MovedShare(Diff(before, ring(names[1:n])))
	// Classic: every owner keeps size/n entries whatever the pool.
	fixed := func(names []string) *Ring {
		owners := make([]Owner, len(names))
		for i, name := range names {
			owners[i] = Owner{name, size / n}
		}
		return mustRing(t, owners)
	}
	cb, ca := fixed(names[:n]), fixed(names)
	moves := Diff(cb, ca)
	for _, m := range moves {
		if m.To != names[n] {
			t.Fatalf("classic ring moved %v from %q to %q, not to the newcomer", m.Range, m.From, m.To)
		}
	}
	classic = MovedShare(moves)
	return join, leave, classic
}

// TestMovedShareJoinLeave measures what DESIGN.md's "price of a constant
// total" says: with R = 4096, a join moves about 0.35, 0.16, 0.04 of the
// key space for N = 3, 10, 50, against about 1/(N+1) for a classic ring.
//
// Leaving (N to N-1 owners) costs about as much, from 1/N (the leaver's own
// share) up to about 2/N.
//
// Measured (owners "owner-0".."owner-N"): join 0.349, 0.165, 0.041; leave
// 0.414, 0.176, 0.039; classic join 0.246, 0.093, 0.024.
//
// The bands are ±25% relative around the documented numbers, not ±0.06
// absolute, which would accept 0 at N = 50. They are wider than the
// name-dependent noise (an owner's share with V entries spreads by about
// 1/sqrt(V): 3% at N = 3, 11% at N = 50), and narrow enough to catch real
// regressions: moving only the newcomer's share (1/(N+1) = 0.25, 0.091,
// 0.020, all below the band), or reassigning indices so that old owners'
// surviving entries change (which moves most of the key space). A join must
// also move between 1/(N+1) and about 2/(N+1).
func TestMovedShareJoinLeave(t *testing.T) {
	const size = 4096
	for _, c := range []struct {
		n         int
		wantJoin  float64
		wantLeave float64
	}{
		{3, 0.35, 0.41},
		{10, 0.16, 0.17},
		{50, 0.04, 0.04},
	} {
		join, leave, classic := movedShares(t, c.n, size)
		ideal := 1 / float64(c.n+1)
		t.Logf("N=%2d R=%d: join moves %.4f, leave moves %.4f; classic fixed-count join moves %.4f (1/(N+1) = %.4f, 2/(N+1) = %.4f)",
			c.n, size, join, leave, classic, ideal, 2*ideal)
		band := func(what string, got, want float64) {
			if got < 0.75*want || got > 1.25*want {
				t.Errorf("N=%d: %s moves %.4f, want %.4f ± 25%%", c.n, what, got, want)
			}
		}
		band("join", join, c.wantJoin)
		band("leave", leave, c.wantLeave)
		// The classic share is one owner's share of the ring, size/N
		// entries: its relative spread is about 1/sqrt(size/N), 11% at
		// N = 50, where it measures +21%; hence a wider band.
		if classic < 0.65*ideal || classic > 1.35*ideal {
			t.Errorf("N=%d: classic join moves %.4f, want 1/(N+1) = %.4f ± 35%%", c.n, classic, ideal)
		}
		if join < 0.9*ideal || join > 2.2*ideal {
			t.Errorf("N=%d: join moves %.4f, outside [1/(N+1), 2/(N+1)] = [%.4f, %.4f] (10%% slack)", c.n, join, ideal, 2*ideal)
		}
		if leave < 0.9/float64(c.n) || leave > 2.2/float64(c.n) {
			t.Errorf("N=%d: leave moves %.4f, outside [1/N, 2/N] (10%% slack)", c.n, leave)
		}
		if join <= classic {
			t.Errorf("N=%d: constant total moves %.4f, no more than classic %.4f", c.n, join, classic)
		}
	}
}
