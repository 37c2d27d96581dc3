package lb

import (
	"fmt"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// ringEntries returns the lease table of a ring of size r among owners, one
// arc per ring entry, all under generation gen.
func ringEntries(tb testing.TB, r int, gen lease.Gen, owners ...string) (*ring.Ring, []lease.Entry) {
	tb.Helper()
	os, err := ring.Apportion(owners, r)
	if err != nil {
		tb.Fatal(err)
	}
	rg, err := ring.New(os)
	if err != nil {
		tb.Fatal(err)
	}
	es := rg.Entries()
	out := make([]lease.Entry, len(es))
	for i, e := range es {
		o := rg.OwnerName(i)
		out[i] = ent(es[(i+len(es)-1)%len(es)].Hash, e.Hash, o, gen)
	}
	return rg, out
}

// BenchmarkChanges applies the changes of a fourth owner joining 3 on a
// ring of R entries (every moved range under a new generation, about a
// quarter of the circle in R/8 or so ranges) to a lookup holding the
// 3-owner table: one manager push.
func BenchmarkChanges(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		r3, es := ringEntries(b, r, 1, "a", "b", "c")
		r4, _ := ringEntries(b, r, 1, "a", "b", "c", "d")
		var chs []lease.Change
		for _, m := range ring.Diff(r3, r4) {
			chs = append(chs, lease.Change{Entry: lease.Entry{Range: m.Range, Owner: m.To, Addr: m.To, Gen: 2}})
		}
		b.Run(fmt.Sprintf("R=%d/changes=%d", r, len(chs)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c := newCore(b)
				c.Start(t0)
				c.Step(snap(1, 1, es...), t0)
				b.StartTimer()
				if out := c.Step(delta(1, 1, 1+uint64(len(chs)), chs...), t0); len(out.Loss) == 0 {
					b.Fatal("no loss")
				}
			}
		})
	}
}
