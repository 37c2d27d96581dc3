package e2e

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/xds"
)

// commitLog records, on the leader, when each view was committed.
type commitLog struct {
	mu      sync.Mutex
	commits []commitAt
	inner   interface {
		NamespaceView(string, []lease.Entry, uint64)
		NamespaceDeleted(string)
	}
}

type commitAt struct {
	at      time.Time
	entries []lease.Entry
}

func (c *commitLog) NamespaceView(ns string, es []lease.Entry, v uint64) {
	c.mu.Lock()
	c.commits = append(c.commits, commitAt{at: time.Now(), entries: slices.Clone(es)})
	c.mu.Unlock()
	c.inner.NamespaceView(ns, es, v)
}

func (c *commitLog) NamespaceDeleted(ns string) { c.inner.NamespaceDeleted(ns) }

// TestLookupConvergence measures, for every commit of the lease table, the
// time until each lookup's table equals it (or a later commit), while
// owners join and are drained: every commit reaches every lookup. The
// times are logged, not asserted (speed goals live in benchmarks:
// BenchmarkConverge in manager, make bench-manager's convergence line).
func TestLookupConvergence(t *testing.T) {
	c := newCluster(t, 1, 3*time.Second)
	nd := c.nodes[0]
	log := &commitLog{}
	// Restart the node with the recording observer in front of its table.
	c.kill(nd)
	startWith(t, c, nd, func(lt *xds.LeaseTable) manager.Observer { log.inner = lt; return log })
	c.waitLeader()

	rec := newRecorder()
	var lookups []*lb.Lookup
	for i := range 3 {
		lookups = append(lookups, startLookup(t, c, fmt.Sprintf("l%d", i+1), rec))
	}
	var mu sync.Mutex
	var lat []time.Duration
	seen := make([]int, len(lookups)) // commits accounted for, per lookup
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range lookups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ch := l.Updated()
				select {
				case <-done:
					return
				case <-ch:
				}
				now := time.Now()
				es := l.Entries()
				log.mu.Lock()
				match := -1
				for k := len(log.commits) - 1; k >= seen[i]; k-- {
					if slices.Equal(log.commits[k].entries, es) {
						match = k
						break
					}
				}
				if match >= 0 {
					mu.Lock()
					for k := seen[i]; k <= match; k++ {
						lat = append(lat, now.Sub(log.commits[k].at))
					}
					mu.Unlock()
					seen[i] = match + 1
				}
				log.mu.Unlock()
			}
		}()
	}
	owners := map[string]*ownerguard.Owner{}
	for i := range 6 {
		name := fmt.Sprintf("o%d", i+1)
		owners[name] = startOwner(t, c, name, rec)
		eventually(t, "convergence after "+name+" joined", func() bool { return converged(c, owners, lookups) })
	}
	for _, name := range []string{"o6", "o5", "o4"} {
		post(t, c.leader().cfg.HTTPAddr, "/v1/namespaces/"+testNS+"/owners/"+name+"/drain")
		drained := owners[name]
		delete(owners, name)
		eventually(t, "convergence after draining "+name, func() bool {
			return len(drained.Held()) == 0 && converged(c, owners, lookups)
		})
	}
	eventually(t, "every commit to reach every lookup", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for i := range seen {
			if seen[i] < len(log.commits) {
				return false
			}
		}
		return true
	})
	close(done)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	t.Logf("lookup convergence over %d commit×lookup samples: p50=%v p99=%v max=%v",
		len(lat), p(0.50).Round(time.Microsecond), p(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	if len(lat) < 30 {
		t.Fatalf("only %d samples", len(lat))
	}
}
