package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fuge-project/fuge/api/fugev1"
)

// TestLookupChangesMatchesFull checks the incremental comparison a Lookup
// stream gets (lookupChanges, from the names updated since the epoch its
// versions are of) against the full one (changes), over random updates
// and streams that acknowledge at random, some falling further behind
// than the cache remembers.
func TestLookupChangesMatchesFull(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	c := newTypeCache(ArcBlockTypeURL, &frameIndex{}, realClock{})
	subs := make([]*lookupSub, 20)
	for i := range subs {
		subs[i] = &lookupSub{returned: map[string]string{}}
	}
	for step := range 2000 {
		set := map[string]*resource{}
		var del []string
		for range rnd.IntN(4) {
			name := fmt.Sprintf("ns/block/%d", rnd.IntN(40))
			if rnd.IntN(5) == 0 {
				del = append(del, name)
				continue
			}
			r, err := newResource(name, fmt.Sprint(step), &fugev1.Heartbeat{Namespace: "ns", Seq: uint64(step)})
			if err != nil {
				t.Fatal(err)
			}
			set[name] = r
		}
		c.update(fmt.Sprint(step), set, del)
		c.mu.Lock()
		for i, sub := range subs {
			fc, fr := c.changes(sub)
			lc, lr := c.lookupChanges(sub)
			if !slices.Equal(fc, lc) || !slices.Equal(fr, lr) {
				t.Fatalf("step %d, sub at epoch %d of %d: incremental %v %v, full %v %v", step, sub.epoch, c.epoch, lc, lr, fc, fr)
			}
			// Acknowledged at random, some streams seldom (further behind
			// than the cache remembers): the stream then holds the
			// cache's versions as of now.
			if rnd.IntN(1+i%4*60) == 0 {
				sub.returned, sub.epoch = c.wildcardVersions(), c.epoch
			}
		}
		c.mu.Unlock()
	}
	if n := len(c.recent); n != recentUpdates {
		t.Errorf("the cache remembers %d updates, want %d", n, recentUpdates)
	}
}
