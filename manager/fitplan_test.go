package manager

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestFitPlanExact: the plan's loads after any sequence of gives (and
// rollbacks) are the model's loads of the ring with the resulting counts,
// computed from scratch (ring.New and each arc's load), and each hot key is
// where that ring puts it. Seeded; the seed is printed.
func TestFitPlanExact(t *testing.T) {
	seed := uint64(20261127)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for trial := range 20 {
		n := 2 + rng.IntN(7)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("owner-", i)
		}
		counts, _ := ring.Apportion(names, 256)
		r, _ := ring.New(counts)
		shares := groupShares(r)
		in := BalanceInput{RingSize: 256, Ring: r, MaxMoves: 16}
		for _, o := range r.Owners() {
			ol := OwnerLoad{Name: o.Name, VNodes: o.VNodes, Groups: make([]float64, lease.LoadGroups), Share: shares[o.Name]}
			for g := range ol.Groups {
				if shares[o.Name][g] > 0 {
					ol.Groups[g] = 100 * rng.Float64()
					ol.Load += ol.Groups[g]
				}
			}
			in.Owners = append(in.Owners, ol)
		}
		// Hot keys: some held by their reporter, one not (ignored).
		for range 5 {
			h := rng.Uint64()
			i := indexOf(in.Owners, r.LookupOwner(h))
			in.Owners[i].Hot = append(in.Owners[i].Hot, lease.HotKey{Hash: h, Rate: 50 + 500*rng.Float64()})
		}
		in.Owners[0].Hot = append(in.Owners[0].Hot, lease.HotKey{Hash: r.Entry(0).Hash + 1, Rate: 1e6})
		p := newFitPlan(in, 2*in.MaxMoves)
		check := func(when string) {
			t.Helper()
			cs := make([]ring.Owner, n)
			for i := range n {
				cs[i] = ring.Owner{Name: p.name[i], VNodes: p.v[i]}
			}
			r2, _ := ring.New(cs)
			want := make([]float64, n)
			for q := range r2.Len() {
				e, pe := r2.Entry(q), r2.Entry((q+r2.Len()-1)%r2.Len())
				o, po := indexOf(in.Owners, r2.Owners()[e.Owner].Name), indexOf(in.Owners, r2.Owners()[pe.Owner].Name)
				want[o] += p.arc(int(p.pos[po][pe.Index]), int(p.pos[o][e.Index]))
			}
			for i := range n {
				if math.Abs(want[i]-p.est[i]) > 1e-6*p.total {
					t.Fatalf("trial %d %s: owner %d: plan %v, from scratch %v", trial, when, i, p.est[i], want[i])
				}
			}
			for k, h := range p.hot {
				if got, want := p.name[p.owner[p.holder(k)]], r2.LookupOwner(h.hash); got != want {
					t.Fatalf("trial %d %s: hot key %d held by %s, the ring says %s", trial, when, k, got, want)
				}
			}
		}
		if len(p.hot) != 5 {
			t.Fatalf("trial %d: %d hot keys kept, want the 5 held by their reporter", trial, len(p.hot))
		}
		check("at the start")
		for step := range 30 {
			a, b, s := rng.IntN(n), rng.IntN(n), 1+rng.IntN(8)
			if a == b {
				continue
			}
			m := p.mark()
			if !p.give(a, b, s) {
				continue
			}
			check(fmt.Sprintf("step %d", step))
			if rng.IntN(3) == 0 {
				p.rollback(m)
				check(fmt.Sprintf("step %d rolled back", step))
			}
		}
	}
}

func indexOf(os []OwnerLoad, name string) int {
	for i, o := range os {
		if o.Name == name {
			return i
		}
	}
	return -1
}
