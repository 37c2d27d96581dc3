package manager_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fuge-project/fuge/manager"
)

// BenchmarkApply measures the replicated state machine's side of the
// convergence BenchmarkConverge runs: NamespaceState.Apply of every commit
// with changes made while 3 owners take a ring of R entries from nothing
// and a fourth joins, recorded once and replayed onto a fresh state.
func BenchmarkApply(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		c := newCluster(b, r)
		for i, name := range []string{"a", "b", "c"} {
			c.addOwner(name, uint64(i+1))
			c.run(10 * time.Minute)
		}
		c.addOwner("d", 4)
		c.run(10 * time.Minute)
		nc := manager.NamespaceConfig{Name: benchNS, RingSize: r}
		changes := 0
		for _, cm := range c.commits {
			changes += len(cm.Changes)
		}
		b.Run(fmt.Sprintf("R=%d/commits=%d/changes=%d", r, len(c.commits), changes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := manager.NewNamespaceState(nc, manager.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				for _, cm := range c.commits {
					if err := st.Apply(cm, time.Hour); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
