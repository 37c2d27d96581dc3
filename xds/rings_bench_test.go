package xds

import (
	"fmt"
	"testing"
)

// BenchmarkNamespaceRing is one ring change (an owner leaving or coming
// back) of a namespace of n owners at R = 8192, published once the
// coalescing interval has passed: "kept" while no Envoy or gRPC client has
// asked for the namespace (the ring is checked and kept), "published"
// once one has (its resources built, compared and marshalled).
func BenchmarkNamespaceRing(b *testing.B) {
	for _, wanted := range []bool{false, true} {
		for _, n := range []int{500, 5000} {
			b.Run(fmt.Sprintf("%s/owners=%d", map[bool]string{false: "kept", true: "published"}[wanted], n), func(b *testing.B) {
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprintf("owner-%04d", i)
				}
				all, less := apportioned(b, 8192, names...), apportioned(b, 8192, names[1:]...)
				fc := newFakeClock()
				lt := newLeaseTable(LeaseTableConfig{}, fc)
				lt.NamespaceView("ns", fourArcs(), 1)
				if wanted {
					mux{lt}.want(testNode("ns"), EndpointTypeURL)
				}
				b.ReportAllocs()
				version := uint64(2)
				for b.Loop() {
					v := all
					if version%2 == 1 {
						v = less
					}
					fc.Advance(FlushInterval)
					lt.NamespaceRing("ns", v, version)
					version++
				}
				if s := lt.Stats(); s.BadRings != 0 || wanted != (s.RingPushes > 0) {
					b.Fatalf("stats %+v", s)
				}
			})
		}
	}
}
