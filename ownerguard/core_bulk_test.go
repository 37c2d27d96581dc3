package ownerguard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// applyResponseOneByOne is applyResponse as it was, one Set per lease: the
// oracle for the bulk version.
func applyResponseOneByOne(cur *ring.Table[slot], resp lease.LeaseResponse, live bool) (*ring.Table[slot], *ring.Table[refusal]) {
	next := ring.NewTable(slot{})
	refused := ring.NewTable(refusal{})
	for _, l := range resp.Renew {
		cur.Span(l.Range, func(i int) {
			r, v := cur.At(i)
			if live && v.Held && v.Gen == l.Gen {
				next.Set(r, slot{Gen: l.Gen, Held: true})
			} else {
				refused.Set(r, refusal{On: true, Gen: l.Gen})
			}
		})
	}
	for _, l := range resp.Grant {
		if live {
			next.Set(l.Range, slot{Gen: l.Gen, Held: true})
			refused.Set(l.Range, refusal{})
		} else {
			refused.Set(l.Range, refusal{On: true, Gen: l.Gen})
		}
	}
	next.Compact()
	refused.Compact()
	return next, refused
}

// diffOneByOne is diff as it was, marking a pair table one held arc at a
// time: the oracle for the Walk version.
func diffOneByOne(a, b *ring.Table[slot]) (granted, revoked []ring.Range) {
	type held struct {
		Gen  lease.Gen
		Held bool
	}
	type pair struct{ A, B held }
	d := ring.NewTable(pair{})
	mark := func(t *ring.Table[slot], second bool) {
		t.Each(func(r ring.Range, v slot) {
			if !v.Held {
				return
			}
			d.Span(r, func(i int) {
				p := d.Value(i)
				if second {
					p.B = held{v.Gen, true}
				} else {
					p.A = held{v.Gen, true}
				}
				d.SetValue(i, p)
			})
		})
	}
	mark(a, false)
	mark(b, true)
	d.Compact()
	d.Each(func(r ring.Range, p pair) {
		if p.A == p.B {
			return
		}
		if p.A.Held {
			revoked = appendRange(revoked, r)
		}
		if p.B.Held {
			granted = appendRange(granted, r)
		}
	})
	return closeRanges(granted), closeRanges(revoked)
}

// bulkPoint draws from few distinct points, so that ranges share ends, with
// 0 and the maximum hash among them.
func bulkPoint(rng *rand.Rand) uint64 {
	if rng.IntN(4) == 0 {
		return []uint64{0, 1, ^uint64(0)}[rng.IntN(3)]
	}
	return uint64(rng.IntN(16)) << 60
}

// randLeases returns leases either in ring order without overlaps, as the
// manager sends them, or arbitrary (overlapping, whole-circle), as a broken
// manager might.
func randLeases(rng *rand.Rand) []lease.Lease {
	ps := make([]uint64, rng.IntN(10))
	for i := range ps {
		ps[i] = bulkPoint(rng)
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	var out []lease.Lease
	gen := func() lease.Gen { return lease.Gen(1 + rng.IntN(3)) }
	if rng.IntN(2) == 0 {
		for i := range ps {
			if len(ps) > 1 && rng.IntN(3) > 0 {
				out = append(out, lease.Lease{Range: ring.Range{Start: ps[(i+len(ps)-1)%len(ps)], End: ps[i]}, Gen: gen()})
			}
		}
		return out
	}
	for range len(ps) {
		out = append(out, lease.Lease{Range: ring.Range{Start: ps[rng.IntN(len(ps))], End: ps[rng.IntN(len(ps))]}, Gen: gen()})
	}
	return out
}

func randHeld(rng *rand.Rand) *ring.Table[slot] {
	t := ring.NewTable(slot{})
	for _, l := range randLeases(rng) {
		t.Set(l.Range, slot{Gen: l.Gen, Held: rng.IntN(4) > 0})
	}
	if rng.IntN(2) == 0 {
		t.Compact()
	}
	return t
}

type arcOf[V any] struct {
	R ring.Range
	V V
}

func arcs[V comparable](t *ring.Table[V]) []arcOf[V] {
	var out []arcOf[V]
	t.Each(func(r ring.Range, v V) { out = append(out, arcOf[V]{r, v}) })
	return out
}

// TestApplyResponseIsOneByOne checks applyResponse and diff against the
// one-Set-per-lease versions they replaced, on random held sets and
// responses, well-formed and not.
func TestApplyResponseIsOneByOne(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for iter := 0; iter < 3000; iter++ {
		cur := randHeld(rng)
		resp := lease.LeaseResponse{Renew: randLeases(rng), Grant: randLeases(rng)}
		live := rng.IntN(4) > 0
		curWant := cur.Clone()
		next, refused := applyResponse(cur, resp, live)
		nextWant, refusedWant := applyResponseOneByOne(curWant, resp, live)
		if !slices.Equal(arcs(cur), arcs(curWant)) || !slices.Equal(arcs(next), arcs(nextWant)) ||
			!slices.Equal(arcs(refused), arcs(refusedWant)) {
			t.Fatalf("held %v, response %+v, live %v:\nbulk:       cur %v next %v refused %v\none by one: cur %v next %v refused %v",
				arcs(curWant), resp, live, arcs(cur), arcs(next), arcs(refused), arcs(curWant), arcs(nextWant), arcs(refusedWant))
		}
		a, b := randHeld(rng), next
		if rng.IntN(2) == 0 {
			b = randHeld(rng)
		}
		g, r := diff(a, b)
		gw, rw := diffOneByOne(a, b)
		if !slices.Equal(g, gw) || !slices.Equal(r, rw) {
			t.Fatalf("diff(%v, %v):\nWalk:       granted %v revoked %v\none by one: granted %v revoked %v",
				arcs(a), arcs(b), g, r, gw, rw)
		}
	}
}

// leasesOf returns the leases, under generation 2, of the first of owners
// on a ring of size r among them: maximal runs of its entries, in ring
// order, as the manager sends them.
func leasesOf(tb testing.TB, r int, owners ...string) []lease.Lease {
	tb.Helper()
	os, err := ring.Apportion(owners, r)
	if err != nil {
		tb.Fatal(err)
	}
	rg, err := ring.New(os)
	if err != nil {
		tb.Fatal(err)
	}
	var out []lease.Lease
	es := rg.Entries()
	for i, e := range es {
		if rg.OwnerName(i) != owners[0] {
			continue
		}
		prev := es[(i+len(es)-1)%len(es)].Hash
		if k := len(out) - 1; k >= 0 && out[k].Range.End == prev {
			out[k].Range.End = e.Hash
		} else {
			out = append(out, lease.Lease{Range: ring.Range{Start: prev, End: e.Hash}, Gen: 2})
		}
	}
	return closeLeases(out)
}

// BenchmarkAccept measures an owner accepting the response that grants it
// its share of a ring of R entries among 3 owners ("grant", about R/3 arcs
// in R/4.5 ranges), the next one renewing the part it keeps when a fourth
// owner joins ("shrink"), or renewing them all ("renew").
func BenchmarkAccept(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		mine := leasesOf(b, r, "a", "b", "c")
		// After a fourth owner joins, "a" keeps a subset of its arcs, cut
		// at new boundaries where d's entries fall inside them.
		kept := leasesOf(b, r, "a", "b", "c", "d")
		// respond answers req and returns the request that follows.
		respond := func(c *Core, req *lease.LeaseRequest, renew, grant []lease.Lease) *lease.LeaseRequest {
			out := c.Step(lease.LeaseResponse{
				Namespace: testNS, Owner: testName,
				Header: lease.Header{Nonce: 1, Seq: req.Seq, PeerNonce: testInc, AckSeq: req.Seq},
				Renew:  renew, Grant: grant,
			}, at(time.Second))
			if out.Send == nil && len(grant) > 0 {
				b.Fatal("the grant was not taken")
			}
			return out.Send
		}
		b.Run(fmt.Sprintf("grant/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c := newCore(b, nil)
				req := c.Start(at(0)).Send
				b.StartTimer()
				respond(c, req, nil, mine)
			}
		})
		b.Run(fmt.Sprintf("shrink/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c := newCore(b, nil)
				req := c.Start(at(0)).Send
				req = respond(c, req, nil, mine)
				b.StartTimer()
				// Parts of kept that were b's or c's are refused, the rest
				// renewed.
				respond(c, req, kept, nil)
				b.StopTimer()
				if len(c.Held(at(time.Second))) < len(kept)/2 {
					b.Fatalf("holds %d leases after the recall, want about %d", len(c.Held(at(time.Second))), len(kept))
				}
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("renew/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c := newCore(b, nil)
				req := c.Start(at(0)).Send
				req = respond(c, req, nil, mine)
				renewed := c.Stats().Renewed
				b.StartTimer()
				respond(c, req, mine, nil)
				b.StopTimer()
				if len(c.Held(at(time.Second))) != len(mine) || c.Stats().Renewed != renewed+1 {
					b.Fatalf("holds %d leases after the renewal, want %d (fast path taken: %v)",
						len(c.Held(at(time.Second))), len(mine), c.Stats().Renewed > renewed)
				}
				b.StartTimer()
			}
		})
	}
}
