package xds

import (
	"fmt"
	"maps"
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
		set, del := randomUpdate(t, rnd, step, 40, 5, 0)
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

// BenchmarkWildcardVersions is the cache's map of every block's version,
// which each update's first Lookup answer needs, after an update of one
// block in a namespace of 16,384 blocks (R = 65536).
func BenchmarkWildcardVersions(b *testing.B) {
	c := newTypeCache(ArcBlockTypeURL, &frameIndex{}, realClock{})
	set := map[string]*resource{}
	for i := range 16384 {
		name := fmt.Sprintf("ns/block/%d", i)
		r, err := newResource(name, "1", &fugev1.Heartbeat{Namespace: "ns", Seq: 1})
		if err != nil {
			b.Fatal(err)
		}
		set[name] = r
	}
	c.update("1", set, nil)
	b.ReportAllocs()
	v := 1
	for b.Loop() {
		b.StopTimer()
		v++
		r, err := newResource("ns/block/7", fmt.Sprint(v), &fugev1.Heartbeat{Namespace: "ns", Seq: uint64(v)})
		if err != nil {
			b.Fatal(err)
		}
		c.update(fmt.Sprint(v), map[string]*resource{"ns/block/7": r}, nil)
		b.StartTimer()
		c.mu.Lock()
		m := c.wildcardVersions()
		c.mu.Unlock()
		if m["ns/block/7"] != fmt.Sprint(v) || len(m) != 16384 {
			b.Fatalf("versions: %d, block 7 at %q", len(m), m["ns/block/7"])
		}
	}
}

// TestWildcardVersionsMatchesWalk checks the map of every resource's
// version that wildcardVersions builds from the last one and the updates
// since against a walk of the resources, over random sets, deletions and
// explicit resources, asked for after gaps of 0 to 100 updates (some
// longer than the cache remembers, which walks).
func TestWildcardVersionsMatchesWalk(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	c := newTypeCache(ArcBlockTypeURL, &frameIndex{}, realClock{})
	next := 0
	for step := range 3000 {
		set, del := randomUpdate(t, rnd, step, 60, 4, 10)
		c.update(fmt.Sprint(step), set, del)
		if step < next {
			continue
		}
		next = step + []int{0, 1, 5, recentUpdates + 1, 100}[rnd.IntN(5)]
		c.mu.Lock()
		got := c.wildcardVersions()
		want := map[string]string{}
		for name, r := range c.res {
			if !r.explicit {
				want[name] = r.version
			}
		}
		c.mu.Unlock()
		if !maps.Equal(got, want) {
			t.Fatalf("step %d: wildcardVersions %v, the resources %v", step, got, want)
		}
	}
}

// randomUpdate is an update of step: up to three of blocks names, each
// deleted one time in delEvery, otherwise set at version step, and made
// explicit one time in explicitEvery (never if 0).
func randomUpdate(t *testing.T, rnd *rand.Rand, step, blocks, delEvery, explicitEvery int) (map[string]*resource, []string) {
	t.Helper()
	set := map[string]*resource{}
	var del []string
	for range rnd.IntN(4) {
		name := fmt.Sprintf("ns/block/%d", rnd.IntN(blocks))
		if rnd.IntN(delEvery) == 0 {
			del = append(del, name)
			continue
		}
		r, err := newResource(name, fmt.Sprint(step), &fugev1.Heartbeat{Namespace: "ns", Seq: uint64(step)})
		if err != nil {
			t.Fatal(err)
		}
		r.explicit = explicitEvery > 0 && rnd.IntN(explicitEvery) == 0
		set[name] = r
	}
	return set, del
}
