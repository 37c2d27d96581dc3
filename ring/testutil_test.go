package ring

import (
	"flag"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("ring.seed", 0, "seed for randomized tests (0: time-based)")

// testSeed returns the seed for a randomized test and logs it, so that a
// failure can be replayed with -ring.seed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -ring.seed=%d)", s, s)
	return s
}
