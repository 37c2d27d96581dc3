package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fuge-project/fuge/ring"
)

// TestFloorMaxMean: the floor's load per owner, for counts drawn at random
// (seeded), is the ring's: each key's load goes to ring.New's owner of its
// hash, so the search evaluates the same rings the manager builds.
func TestFloorMaxMean(t *testing.T) {
	const n, r, nkeys = 4, 64, 2000
	seed := uint64(7)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := make([]uint64, nkeys)
	for k := range keys {
		keys[k] = ring.HashString(fmt.Sprintf("k%d", rng.Uint64()))
	}
	cdf, _ := zipfCDF(nkeys, 1.1)
	f := newFloorRing(n, r, keys, cdf)
	for range 20 {
		v := make([]int, n)
		left := r
		for i := range n - 1 {
			v[i] = 1 + rng.IntN(left-(n-i))
			left -= v[i]
		}
		v[n-1] = left
		owners := make([]ring.Owner, n)
		for i := range owners {
			owners[i] = ring.Owner{Name: fmt.Sprintf("o%d", i), VNodes: v[i]}
		}
		rg, err := ring.New(owners)
		if err != nil {
			t.Fatal(err)
		}
		loads := map[string]float64{}
		prev := 0.0
		for k, h := range keys {
			loads[rg.LookupOwner(h)] += cdf[k] - prev
			prev = cdf[k]
		}
		want := 0.0
		for _, l := range loads {
			want = max(want, l*n)
		}
		if got, _ := f.maxMean(v); math.Abs(got-want) > 1e-9 {
			t.Fatalf("counts %v: floor's max/mean %v, the ring's %v", v, got, want)
		}
	}
	// The search never reports worse than even counts.
	even := []int{16, 16, 16, 16}
	e, _ := f.maxMean(even)
	if best, counts := f.search(); best > e+1e-9 || len(counts) != n {
		t.Fatalf("search: %v with %v, worse than even counts' %v", best, counts, e)
	}
}
