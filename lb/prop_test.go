package lb

import (
	"flag"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

var propSeed = flag.Uint64("lb.seed", 0, "replay TestDeltasMatchSnapshot with this seed only")

// TestDeltasMatchSnapshot applies random changes once as deltas (with
// duplicated pushes mixed in) and once as one snapshot, and checks both
// cores against a naive oracle that replays the changes point by point.
func TestDeltasMatchSnapshot(t *testing.T) {
	seeds := make([]uint64, 300)
	for i := range seeds {
		seeds[i] = uint64(i) + 1
	}
	if *propSeed != 0 {
		seeds = []uint64{*propSeed}
	}
	for _, seed := range seeds {
		if !runProp(t, seed) {
			t.Logf("failed with seed %d (replay: go test ./lb -run TestDeltasMatchSnapshot -lb.seed=%d)", seed, seed)
			return
		}
	}
	t.Logf("seeds 1..%d passed", len(seeds))
}

type point struct {
	h    uint64
	cur  lease.Entry // Range unused
	gen0 lease.Gen
	lost bool // a non-clean change gave it a different generation
}

func runProp(t *testing.T, seed uint64) bool {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, seed^0x5eed))
	// A small pool of positions makes boundaries meet, wrap and repeat.
	pool := []uint64{0, 1, q, 2 * q, 3 * q, math.MaxUint64, math.MaxUint64 - 1}
	for range 6 {
		pool = append(pool, rnd.Uint64())
	}
	pick := func() uint64 { return pool[rnd.IntN(len(pool))] }
	owners := []string{"", "a", "b", "c"}
	nextGen := lease.Gen(1)
	fresh := func() lease.Gen { nextGen++; return nextGen }

	// Initial snapshot: a random partition.
	cuts := make([]uint64, 1+rnd.IntN(5))
	for i := range cuts {
		cuts[i] = pick()
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var initial []lease.Entry
	for i, e := range cuts {
		initial = append(initial, ent(cuts[(i+len(cuts)-1)%len(cuts)], e, owners[rnd.IntN(len(owners))], fresh()))
	}
	rnd.Shuffle(len(initial), func(i, j int) { initial[i], initial[j] = initial[j], initial[i] })

	model := ring.NewTable(value{})
	for _, e := range initial {
		model.Set(e.Range, value{e.Owner, e.Addr, e.Gen, 0})
	}
	var pts []*point
	for _, p := range pool {
		for _, h := range []uint64{p - 1, p, p + 1} {
			pts = append(pts, &point{h: h})
		}
	}
	for range 20 {
		pts = append(pts, &point{h: rnd.Uint64()})
	}
	for _, p := range pts {
		for _, e := range initial {
			if e.Range.Contains(p.h) {
				p.cur, p.gen0 = e, e.Gen
			}
		}
	}

	// Random changes, generations only growing per point.
	var changes []lease.Change
	for range rnd.IntN(12) {
		r := rg(pick(), pick())
		o := owners[rnd.IntN(len(owners))]
		g := fresh()
		if rnd.IntN(4) == 0 { // keep the highest generation in r
			g = 0
			model.Span(r, func(i int) { g = max(g, model.Value(i).gen) })
		}
		e := lease.Entry{Range: r, Owner: o, Addr: ent(0, 0, o, 0).Addr, Gen: g}
		ch := lease.Change{Entry: e, Clean: rnd.IntN(5) == 0}
		changes = append(changes, ch)
		model.Set(r, value{e.Owner, e.Addr, e.Gen, 0})
		for _, p := range pts {
			if r.Contains(p.h) {
				if p.cur.Gen != g && !ch.Clean {
					p.lost = true
				}
				p.cur = e
			}
		}
	}

	// Core A: the changes as deltas in random batches, with old pushes re-sent.
	a := newCore(t)
	a.Start(at(0))
	a.Step(snap(7, 100, initial...), at(1))
	var sent []lease.LookupResponse
	var lossA []ring.Range
	lsn := uint64(100)
	for i := 0; i < len(changes); {
		n := 1 + rnd.IntN(3)
		n = min(n, len(changes)-i)
		batch := slices.Clone(changes[i : i+n])
		for k := range batch {
			batch[k].LSN = lsn + uint64(k) + 1
		}
		resp := delta(7, lsn, lsn+uint64(n), batch...)
		out := a.Step(resp, at(2))
		if !checkMerged(t, seed, out.Loss) || out.Send != nil {
			return false
		}
		lossA = append(lossA, out.Loss...)
		sent = append(sent, resp)
		if rnd.IntN(3) == 0 {
			if out := a.Step(sent[rnd.IntN(len(sent))], at(2)); out.Loss != nil || out.Send != nil {
				t.Errorf("seed %d: an old push was not dropped silently: %+v", seed, out)
				return false
			}
		}
		lsn += uint64(n)
		i += n
	}

	// Core B: one snapshot of the model.
	b := newCore(t)
	b.Start(at(0))
	b.Step(snap(7, 100, initial...), at(1))
	var final []lease.Entry
	model.Each(func(r ring.Range, v value) {
		final = append(final, lease.Entry{Range: r, Owner: v.owner, Addr: v.addr, Gen: v.gen})
	})
	rnd.Shuffle(len(final), func(i, j int) { final[i], final[j] = final[j], final[i] })
	outB := b.Step(snap(7, lsn, final...), at(2))
	if !checkMerged(t, seed, outB.Loss) {
		return false
	}

	ea, eb := a.Entries(), b.Entries()
	if !slices.Equal(ea, eb) {
		t.Errorf("seed %d: deltas and snapshot disagree:\n%v\n%v", seed, ea, eb)
		return false
	}
	if a.LSN() != lsn || b.LSN() != lsn {
		t.Errorf("seed %d: LSN %d %d, want %d", seed, a.LSN(), b.LSN(), lsn)
		return false
	}
	ok := true
	for _, p := range pts {
		for _, c := range []*Core{a, b} {
			addr, _, gen, owned := c.Lookup(p.h)
			if addr != p.cur.Addr || gen != p.cur.Gen || owned != (p.cur.Owner != "") || c.Owner(p.h) != p.cur.Owner {
				t.Errorf("seed %d: Lookup(%x) = %q %d %v, oracle %+v", seed, p.h, addr, gen, owned, p.cur)
				ok = false
			}
		}
		if got := covers(lossA, p.h); got != p.lost {
			t.Errorf("seed %d: delta loss at %x = %v, oracle %v (loss %v)", seed, p.h, got, p.lost, lossA)
			ok = false
		}
		if got, want := covers(outB.Loss, p.h), p.cur.Gen != p.gen0; got != want {
			t.Errorf("seed %d: snapshot loss at %x = %v, oracle %v (loss %v)", seed, p.h, got, want, outB.Loss)
			ok = false
		}
	}
	return ok
}

func covers(rs []ring.Range, h uint64) bool {
	return slices.ContainsFunc(rs, func(r ring.Range) bool { return r.Contains(h) })
}

// checkMerged checks that loss ranges are in ring order (ascending End, so
// only the first may wrap past zero), neither touch nor overlap, and that the
// full circle comes alone as ring.Full().
func checkMerged(t *testing.T, seed uint64, rs []ring.Range) bool {
	t.Helper()
	n := len(rs)
	bad := false
	for i, r := range rs {
		switch {
		case r.IsFull():
			bad = bad || n > 1 || r != ring.Full()
		case i > 0:
			bad = bad || r.Start > r.End || rs[i-1].End >= r.Start
		}
	}
	if n > 1 && rs[0].Start > rs[0].End && rs[n-1].End >= rs[0].Start {
		bad = true
	}
	if bad {
		t.Errorf("seed %d: loss ranges not merged or out of order: %v", seed, rs)
	}
	return !bad
}
