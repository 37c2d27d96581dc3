package manager

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// checkLeasesOneByOne is checkLeases as it was, one Set per lease: the
// oracle.
func checkLeasesOneByOne(ls []lease.Lease) bool {
	t := ring.NewTable(false)
	for _, l := range ls {
		bad := false
		t.Span(l.Range, func(i int) { bad = bad || t.Value(i) })
		if bad {
			return false
		}
		t.Set(l.Range, true)
	}
	return true
}

func TestCheckLeasesIsOneByOne(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	point := func() uint64 {
		if rng.IntN(4) == 0 {
			return []uint64{0, 1, ^uint64(0)}[rng.IntN(3)]
		}
		return uint64(rng.IntN(16)) << 60
	}
	for iter := 0; iter < 20000; iter++ {
		var ls []lease.Lease
		for range rng.IntN(5) {
			ls = append(ls, lease.Lease{Range: ring.Range{Start: point(), End: point()}, Gen: 1})
		}
		if rng.IntN(2) == 0 { // also sorted, disjoint sets, as owners send
			ls = ls[:0]
			at := point()
			for range rng.IntN(5) {
				next := at + uint64(rng.IntN(3)+1)<<59
				ls = append(ls, lease.Lease{Range: ring.Range{Start: at, End: next}, Gen: 1})
				at = next + uint64(rng.IntN(2))<<59
			}
		}
		want := checkLeasesOneByOne(ls)
		if got := checkLeases(ls) == nil; got != want {
			t.Fatalf("checkLeases(%v) ok = %v, want %v", ls, got, want)
		}
	}
}
