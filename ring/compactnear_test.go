package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCompactNearIsCompact changes a compact table in random ranges (Set)
// and splits it at random points, then checks CompactNear of those ranges
// and points against Compact: the same ends and values.
func TestCompactNearIsCompact(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 23))
	for iter := 0; iter < 3000; iter++ {
		tb := bigTable(rng)
		if rng.IntN(2) == 0 {
			tb = randTable(rng)
			tb.Compact()
		}
		if tb.Len() == 1 {
			continue // CompactNear needs a table of several arcs
		}
		var rs []Range
		var xs []uint64
		for _, r := range randRanges(rng, tb) {
			if rng.IntN(3) == 0 {
				x := randPoint(rng)
				tb.Split(x)
				xs = append(xs, x)
				continue
			}
			tb.Set(r, rng.IntN(5))
			rs = append(rs, r)
		}
		want := tb.Clone()
		want.Compact()
		got := tb.Clone()
		got.CompactNear(rs, xs)
		checkSame(t, "CompactNear", got, want, func() string {
			return fmt.Sprintf("ranges %v, points %v", rs, xs)
		})
	}
}
