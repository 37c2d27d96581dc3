package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// blockResources are n ArcBlock resources of namespace ns at version v,
// block b holding one arc owned by owner.
func blockResources(t *testing.T, n int, v, owner string) map[string]*resource {
	t.Helper()
	set := map[string]*resource{}
	for b := range uint32(n) {
		end := uint64(b)<<(64-testBits) | 1
		es := []lease.Entry{{Range: ring.Range{Start: end - 1, End: end}, Owner: owner, Addr: owner + ":1", Gen: 7}}
		name := wire.BlockName("ns", b)
		r, err := newResource(name, v, wire.ArcBlock("ns", testBits, b, es))
		if err != nil {
			t.Fatal(err)
		}
		set[name] = r
	}
	return set
}

// answerOf opens a Lookup watch on c for sub and returns what it delivers,
// as sent at once (a lateAnswer taken).
func answerOf(t *testing.T, c *typeCache, sub *lookupSub) []*deltaResponse {
	t.Helper()
	var got []*deltaResponse
	req := &cache.DeltaRequest{TypeUrl: c.typeURL}
	if _, err := c.createLookupWatch(req, sub, func(r *deltaResponse) { got = append(got, r) }, 0); err != nil {
		t.Fatal(err)
	}
	return sent(got)
}

// sent is what a Lookup stream's sender sends of responses delivered to
// it: each lateAnswer taken as it is reached.
func sent(delivered []*deltaResponse) []*deltaResponse {
	var out []*deltaResponse
	for _, r := range delivered {
		if r.late != nil {
			out = append(out, r.late.take(r.req)...)
		} else {
			out = append(out, r)
		}
	}
	return out
}

// TestLookupAnswersShared: Lookup streams that hold the same versions (none,
// or one epoch's) are sent one shared list of resources, encoded once (the
// codec sends a response of it as its head and the shared bytes), and the
// bytes decode to the response; a stream that subscribed with versions of
// its own is answered on its own; an update forgets the shared encodings,
// and a response still carrying them is then encoded resource by
// resource, to the same message.
func TestLookupAnswersShared(t *testing.T) {
	var idx frameIndex
	c := newTypeCache(ArcBlockTypeURL, &idx, realClock{})
	c.update("1", blockResources(t, 8, "1", "a"), nil)

	a1, a2 := answerOf(t, c, &lookupSub{returned: map[string]string{}}), answerOf(t, c, &lookupSub{returned: map[string]string{}})
	if len(a1) != 1 || len(a2) != 1 || len(a1[0].resp.Resources) != 8 {
		t.Fatalf("fresh answers: %d and %d responses, want 1 of 8 blocks each", len(a1), len(a2))
	}
	if &a1[0].resp.Resources[0] != &a2[0].resp.Resources[0] || a1[0].resp == a2[0].resp {
		t.Fatal("two fresh Lookups: want one shared list of resources in two responses of their own")
	}
	own := answerOf(t, c, &lookupSub{returned: map[string]string{wire.BlockName("ns", 0): "1"}})
	if len(own) != 1 || len(own[0].resp.Resources) != 7 {
		t.Fatalf("a Lookup holding block 0: %d responses, want 1 of 7 blocks", len(own))
	}

	a1[0].resp.Nonce = "5"
	data, ok := marshalDelta(a1[0].resp, &idx)
	if !ok || len(data) != 2 {
		t.Fatalf("shared answer encoded in %d pieces (ok %v), want the head and the shared body", len(data), ok)
	}
	checkDecodes(t, data, a1[0].resp, new(discovery.DeltaDiscoveryResponse))
	if body := idx.body(a2[0].resp.Resources); &data[1].ReadOnlyData()[0] != &body[0] {
		t.Fatal("the body sent is not the shared one")
	}

	// Streams now at epoch 1 are brought up to date with one shared
	// answer of the blocks changed since.
	s1, s2 := &lookupSub{returned: map[string]string{}}, &lookupSub{returned: map[string]string{}}
	answerOf(t, c, s1)
	answerOf(t, c, s2)
	changed := blockResources(t, 3, "2", "b")
	c.update("2", changed, nil)
	if got := idx.body(a1[0].resp.Resources); got != nil {
		t.Fatal("an update kept the previous epoch's shared encoding")
	}
	if data, ok = marshalDelta(a1[0].resp, &idx); ok { // declined: gRPC's codec marshals it
		checkDecodes(t, data, a1[0].resp, new(discovery.DeltaDiscoveryResponse))
	}
	u1, u2 := answerOf(t, c, s1), answerOf(t, c, s2)
	if len(u1) != 1 || len(u1[0].resp.Resources) != 3 || &u1[0].resp.Resources[0] != &u2[0].resp.Resources[0] {
		t.Fatalf("streams of one epoch: want one shared answer of the 3 changed blocks, got %d responses", len(u1))
	}
	for _, r := range u1[0].resp.Resources {
		if r.Version != "2" || changed[r.Name] == nil {
			t.Errorf("sent %s at version %s", r.Name, r.Version)
		}
	}
	u1[0].resp.Nonce = "6"
	data, _ = marshalDelta(u1[0].resp, &idx)
	checkDecodes(t, data, u1[0].resp, new(discovery.DeltaDiscoveryResponse))
}

// TestLookupAnswerParts: a shared answer larger than
// wire.MaxLookupResponseBytes comes in parts, each encoded once, all but
// the last marked, and together they are every block.
func TestLookupAnswerParts(t *testing.T) {
	var idx frameIndex
	c := newTypeCache(ArcBlockTypeURL, &idx, realClock{})
	set := map[string]*resource{}
	for b := range uint32(64) {
		var es []lease.Entry
		for i := range 1000 { // about 30 KB a block
			end := uint64(b)<<(64-testBits) | uint64(i+1)<<8
			es = append(es, lease.Entry{Range: ring.Range{Start: end - 1<<8, End: end}, Owner: fmt.Sprint("owner-", i), Addr: "a:1", Gen: 7})
		}
		name := wire.BlockName("ns", b)
		r, err := newResource(name, "1", wire.ArcBlock("ns", testBits, b, es))
		if err != nil {
			t.Fatal(err)
		}
		set[name] = r
	}
	c.update("1", set, nil)
	parts := answerOf(t, c, &lookupSub{returned: map[string]string{}})
	if len(parts) < 2 {
		t.Fatalf("%d parts", len(parts))
	}
	seen := map[string]bool{}
	for i, p := range parts {
		last := i == len(parts)-1
		if want := map[bool]string{true: "1", false: "1" + wire.MorePartsSuffix}[last]; p.resp.SystemVersionInfo != want {
			t.Errorf("part %d: version %q, want %q", i, p.resp.SystemVersionInfo, want)
		}
		p.resp.Nonce = fmt.Sprint(i + 1)
		data, ok := marshalDelta(p.resp, &idx)
		if !ok || len(data) != 2 {
			t.Fatalf("part %d: %d pieces, want the head and the shared body", i, len(data))
		}
		checkDecodes(t, data, p.resp, new(discovery.DeltaDiscoveryResponse))
		size := 0
		for _, r := range p.resp.Resources {
			seen[r.Name] = true
			size += set[r.Name].wireSize()
		}
		if size > wire.MaxLookupResponseBytes && len(p.resp.Resources) > 1 {
			t.Errorf("part %d: %d bytes of resources", i, size)
		}
	}
	if len(seen) != 64 {
		t.Fatalf("%d blocks in the parts, want 64", len(seen))
	}
}

// TestLookupAnswersConverge: Lookup streams that acknowledge at random
// times while the cache is updated at random each end, once it is quiet,
// holding exactly the cache's resources at their versions, whether their
// answers were shared or their own.
func TestLookupAnswersConverge(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	for round := range 200 {
		var idx frameIndex
		c := newTypeCache(ArcBlockTypeURL, &idx, realClock{})
		const blocks = 16
		c.update("1", blockResources(t, blocks, "1", "a"), nil)
		type stream struct {
			sub     *lookupSub
			held    map[string]string // what the client holds
			pending []*deltaResponse  // delivered, not yet taken in
			open    bool              // a watch is open
			acks    int
		}
		var ss []*stream
		for range 2 + rnd.IntN(6) {
			s := &stream{held: map[string]string{}}
			s.sub = &lookupSub{returned: map[string]string{}}
			if rnd.IntN(3) == 0 { // reconnects holding some blocks
				for b := range blocks {
					if rnd.IntN(2) == 0 {
						s.held[wire.BlockName("ns", uint32(b))] = "1"
					}
				}
				s.sub.returned = maps.Clone(s.held)
			}
			ss = append(ss, s)
		}
		open := func(s *stream) {
			req := &cache.DeltaRequest{TypeUrl: c.typeURL}
			if s.acks++; s.acks > 1 {
				req.ResponseNonce = fmt.Sprint(s.acks) // an ack; the first request is answered at once
			}
			stop, err := c.createLookupWatch(req, s.sub, func(r *deltaResponse) { s.pending, s.open = append(s.pending, r), false }, 0)
			if err != nil {
				t.Fatal(err)
			}
			s.open = stop != nil
		}
		take := func(s *stream) {
			for _, r := range sent(s.pending) {
				for _, res := range r.resp.Resources {
					s.held[res.Name] = res.Version
				}
				for _, name := range r.resp.RemovedResources {
					delete(s.held, name)
				}
			}
			s.pending = nil
		}
		for _, s := range ss {
			open(s)
		}
		version := 1
		for range 30 {
			switch rnd.IntN(3) {
			case 0:
				version++
				v := fmt.Sprint(version)
				set := map[string]*resource{}
				for name, r := range blockResources(t, blocks, v, fmt.Sprint("o", version)) {
					if rnd.IntN(4) == 0 {
						set[name] = r
					}
				}
				c.update(v, set, nil)
			default:
				s := ss[rnd.IntN(len(ss))]
				if !s.open && len(s.pending) > 0 { // the ack of what it took in opens the next watch
					take(s)
					open(s)
				}
			}
		}
		for i, s := range ss { // quiet: every stream catches up
			for k := 0; !s.open && len(s.pending) > 0; k++ {
				if k == 100 {
					t.Fatalf("round %d stream %d: still answered after 100 acknowledgements of a quiet cache", round, i)
				}
				take(s)
				open(s)
			}
		}
		for i, s := range ss {
			if len(s.held) != len(c.res) {
				t.Fatalf("round %d stream %d holds %d blocks, the cache %d", round, i, len(s.held), len(c.res))
			}
			for name, r := range c.res {
				if s.held[name] != r.version {
					t.Fatalf("round %d stream %d holds %s at %q, the cache at %q", round, i, name, s.held[name], r.version)
				}
			}
		}
	}
}

// TestLateAnswer: a change due to a Lookup stream that holds an epoch's
// versions is computed when its sender reaches it, so it carries what was
// updated after it fell due (two updates, one response); a second request
// of the same stream gets a response of its own, empty once the first
// brought the stream up to date, since only a response acknowledged opens
// the stream's next watch.
func TestLateAnswer(t *testing.T) {
	var idx frameIndex
	c := newTypeCache(ArcBlockTypeURL, &idx, realClock{})
	c.update("1", blockResources(t, 8, "1", "a"), nil)
	sub := &lookupSub{returned: map[string]string{}}
	if first := answerOf(t, c, sub); len(first) != 1 || len(first[0].resp.Resources) != 8 || sub.epoch != 1 {
		t.Fatalf("first answer: %d responses, epoch %d; want the 8 blocks, epoch 1", len(first), sub.epoch)
	}

	var due []*deltaResponse
	ack := &cache.DeltaRequest{TypeUrl: c.typeURL, ResponseNonce: "1"}
	for range 2 { // the acknowledgement, and the same request again
		if _, err := c.createLookupWatch(ack, sub, func(r *deltaResponse) { due = append(due, r) }, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.update("2", blockResources(t, 1, "2", "b"), nil) // block 0
	later := blockResources(t, 2, "3", "c")
	delete(later, wire.BlockName("ns", 0))
	c.update("3", later, nil) // block 1, after the change fell due
	if len(due) != 2 || due[0].late == nil || due[1].late == nil || sub.epoch != 1 {
		t.Fatalf("due: %d responses (late %v), stream at epoch %d; want 2 late ones, still at epoch 1", len(due), len(due) > 0 && due[0].late != nil, sub.epoch)
	}

	got := due[0].late.take(due[0].req)
	if len(got) != 1 || got[0].resp.SystemVersionInfo != "3" || sub.epoch != c.epoch {
		t.Fatalf("taken: %d responses; want 1 at version 3, the stream at the cache's epoch %d (is %d)", len(got), c.epoch, sub.epoch)
	}
	want := map[string]string{wire.BlockName("ns", 0): "2", wire.BlockName("ns", 1): "3"}
	if len(got[0].resp.Resources) != len(want) {
		t.Fatalf("taken: %d blocks, want blocks 0 at 2 and 1 at 3", len(got[0].resp.Resources))
	}
	for _, r := range got[0].resp.Resources {
		if want[r.Name] != r.Version {
			t.Errorf("sent %s at %s, want %v", r.Name, r.Version, want)
		}
	}
	if again := due[1].late.take(due[1].req); len(again) != 1 || len(again[0].resp.Resources) != 0 || len(again[0].resp.RemovedResources) != 0 {
		t.Fatalf("the second request's answer: %d responses; want 1 that carries nothing", len(again))
	}
}
