package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// benchOwners is the pool size the benchmarks apportion the ring among.
const benchOwners = 50

// benchSizes runs fn as one sub-benchmark per ring size, with a ring of R
// entries apportioned among benchOwners owners and a fixed set of random
// probe hashes; fn's setup is untimed when it uses b.Loop.
func benchSizes(b *testing.B, sizes []int, fn func(b *testing.B, owners []Owner, r *Ring, probes []uint64)) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("R=%d", size), func(b *testing.B) {
			owners := benchPool(b, size)
			r, err := New(owners)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(size)))
			probes := make([]uint64, 1<<16)
			for i := range probes {
				probes[i] = rng.Uint64()
			}
			b.ReportAllocs()
			fn(b, owners, r, probes)
		})
	}
}

func benchPool(b *testing.B, size int) []Owner {
	names := make([]string, benchOwners)
	for i := range names {
		names[i] = fmt.Sprintf("10.0.%d.%d:7000", i/256, i%256)
	}
	owners, err := Apportion(names, size)
	if err != nil {
		b.Fatal(err)
	}
	return owners
}

var sink int

func BenchmarkLookup(b *testing.B) {
	benchSizes(b, []int{4096, 65536}, func(b *testing.B, _ []Owner, r *Ring, probes []uint64) {
		s, i := 0, 0
		for b.Loop() {
			s += r.Lookup(probes[i&(len(probes)-1)])
			i++
		}
		sink = s
	})
}

func BenchmarkTableFind(b *testing.B) {
	benchSizes(b, []int{4096, 65536}, func(b *testing.B, _ []Owner, r *Ring, probes []uint64) {
		t := NewTable("")
		for p := range r.Len() {
			t.Set(r.Arc(p), r.OwnerName(p))
		}
		t.Compact()
		s, i := 0, 0
		for b.Loop() {
			s += t.Find(probes[i&(len(probes)-1)])
			i++
		}
		sink = s
	})
}

func BenchmarkBuild(b *testing.B) {
	benchSizes(b, []int{4096}, func(b *testing.B, owners []Owner, _ *Ring, _ []uint64) {
		for b.Loop() {
			r, err := New(owners)
			if err != nil {
				b.Fatal(err)
			}
			sink += r.Len()
		}
	})
}

// BenchmarkApportion measures dividing R = 8192 among n owners, as the
// manager does on every join and leave (twice: the new names, and the old
// ones to tell whether the counts were an even split).
func BenchmarkApportion(b *testing.B) {
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprintf("owners=%d", n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("10.0.%d.%d:7000", i/256, i%256)
			}
			for _, order := range []string{"unsorted", "sorted"} {
				if order == "sorted" {
					slices.Sort(names)
				}
				b.Run(order, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := Apportion(names, 8192); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkDiff measures the moves between a ring and the ring after one
// owner of n joined, at R entries (even splits), as the manager's
// updateDesired does on every join.
func BenchmarkDiff(b *testing.B) {
	for _, tc := range []struct{ r, n int }{{4096, 500}, {8192, 5000}, {65536, 500}} {
		b.Run(fmt.Sprintf("R=%d/owners=%d", tc.r, tc.n), func(b *testing.B) {
			names := make([]string, tc.n+1)
			for i := range names {
				names[i] = fmt.Sprintf("owner-%04d", i)
			}
			before, err := Apportion(names[:tc.n], tc.r)
			if err != nil {
				b.Fatal(err)
			}
			after, err := Apportion(names, tc.r)
			if err != nil {
				b.Fatal(err)
			}
			x, y := mustRing(b, before), mustRing(b, after)
			b.ReportAllocs()
			for b.Loop() {
				sink += len(Diff(x, y))
			}
		})
	}
}
