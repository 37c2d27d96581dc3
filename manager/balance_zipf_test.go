package manager

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// zipfPool is bench/balance's namespace as fit sees it, without the I/O:
// 8 owners at R = 4096, keys "user-<phase>-<n>" with Zipf popularity, the
// owners' per-group reports computed from the keys they hold (expected
// rates at 8000 requests/s, plus the noise of a count over 5 s).
type zipfPool struct {
	names  []string
	counts []ring.Owner
	keys   [2][]uint64
	w      []float64 // requests/s by rank
	noise  *rand.Rand
	hot    bool // owners report their busiest keys, as ownerguard's do
}

func newZipfPool(alpha float64, nkeys int, seed uint64) *zipfPool {
	return newZipfPoolOf(8, alpha, nkeys, seed)
}

// newZipfPoolOf is newZipfPool with owners o0 to o<owners-1>.
func newZipfPoolOf(owners int, alpha float64, nkeys int, seed uint64) *zipfPool {
	z := &zipfPool{noise: rand.New(rand.NewPCG(seed, 99))}
	for i := range owners {
		z.names = append(z.names, fmt.Sprintf("o%d", i))
	}
	z.counts, _ = ring.Apportion(z.names, 4096)
	rng := rand.New(rand.NewPCG(seed, math.Float64bits(alpha)))
	for ph := range 2 {
		perm := rng.Perm(nkeys)
		z.keys[ph] = make([]uint64, nkeys)
		for k := range nkeys {
			z.keys[ph][k] = ring.HashString(fmt.Sprintf("user-%d-%d", ph, perm[k]))
		}
	}
	var sum float64
	z.w = make([]float64, nkeys)
	for k := range z.w {
		z.w[k] = math.Pow(float64(k+1), -alpha)
		sum += z.w[k]
	}
	for k := range z.w {
		z.w[k] *= 8000 / sum
	}
	return z
}

// round builds the ring of the current counts and the owners' reports in
// phase ph; it returns the input and the true max/mean.
func (z *zipfPool) round(ph int, noisy bool) (BalanceInput, float64) {
	r, err := ring.New(z.counts)
	if err != nil {
		panic(err)
	}
	idx := map[string]int{}
	for i, o := range r.Owners() {
		idx[o.Name] = i
	}
	groups := make([][]float64, len(z.counts))
	for i := range groups {
		groups[i] = make([]float64, lease.LoadGroups)
	}
	hot := make([][]lease.HotKey, len(z.counts))
	for k, h := range z.keys[ph] {
		i := idx[r.LookupOwner(h)]
		groups[i][lease.LoadGroup(h)] += z.w[k]
		if len(hot[i]) < lease.MaxHotKeys { // ranks come in order: an owner's first keys are its busiest
			rate := z.w[k]
			if noisy {
				rate = max(0, rate+z.noise.NormFloat64()*math.Sqrt(rate/5)) // a count over 5 s, as the groups
			}
			hot[i] = append(hot[i], lease.HotKey{Hash: h, Rate: rate})
		}
	}
	shares := groupShares(r)
	in := BalanceInput{RingSize: 4096, Ring: r, MaxMoves: DefaultBalanceMaxMoves}
	var total, mx float64
	for i, o := range r.Owners() {
		var l, truth float64
		for g := range groups[i] {
			truth += groups[i][g]
			if noisy { // a Poisson count over 5 s, as a rate
				groups[i][g] = max(0, groups[i][g]+z.noise.NormFloat64()*math.Sqrt(groups[i][g]/5))
			}
			l += groups[i][g]
		}
		total += truth
		mx = max(mx, truth)
		ol := OwnerLoad{Name: o.Name, VNodes: o.VNodes, Load: l, Groups: groups[i], Share: shares[o.Name]}
		if z.hot {
			ol.Hot = hot[i]
		}
		in.Owners = append(in.Owners, ol)
	}
	return in, mx / (total / float64(len(z.counts)))
}

func (z *zipfPool) apply(t *testing.T, ms []VNodeMove) int {
	n := 0
	for _, mv := range ms {
		var err error
		if z.counts, err = ring.MoveVNodes(z.counts, mv.From, mv.To, mv.N); err != nil {
			t.Fatal(err)
		}
		n += mv.N
	}
	return n
}

// TestFitZipf runs fit round after round on bench/balance's load (seed 1
// gives the keys of its Zipf namespaces; more seeds are other draws), Zipf
// 0.8 and 1.1, with a shift of the popular keys halfway and noisy reports
// (seeded; the seeds are printed), the owners reporting their busiest keys
// as ownerguard's do: each phase must end at or below its bound and then
// stop moving (no oscillation). With 5 owners (bench/balance's default)
// the bound is the issue's: 1.10 at Zipf 0.8 and 1.25 at 1.1, after 4
// rounds (the bench's 60 s). With 8 owners at 1.1 it is what the ring
// allows with these draws: the top key alone is 13.5% of the load, more
// than the mean share of 8 owners, its holder keeps every entry up to the
// one that holds the key, and which entries can hold it is fixed by the
// names (see fitPolicy); a search over the counts on the true loads found
// no better than 1.34 for seed 1's first phase.
func TestFitZipf(t *testing.T) {
	const rounds = 14
	for _, c := range []struct {
		owners int
		alpha  float64
		at4    float64 // max/mean after 4 rounds (the bench's 60 s) in each phase
		end    float64 // at the end of each phase
	}{{5, 0.8, 1.10, 1.10}, {5, 1.1, 1.25, 1.25}, {8, 0.8, 1.10, 1.10}, {8, 1.1, 1.90, 1.70}} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%d/%g/seed%d", c.owners, c.alpha, seed), func(t *testing.T) {
				t.Logf("seed %d", seed)
				z := newZipfPoolOf(c.owners, c.alpha, 100_000, seed)
				z.hot = true
				p := &fitPolicy{}
				for ph := range 2 {
					var hist []float64
					var moved []int
					for range rounds {
						in, mm := z.round(ph, true)
						hist = append(hist, math.Round(mm*1000)/1000)
						moved = append(moved, z.apply(t, p.Plan(in)))
					}
					_, mm := z.round(ph, false)
					t.Logf("phase %d: max/mean by round %v, end %.3f; vnodes moved %v", ph, hist, mm, moved)
					if hist[4] > c.at4 || mm > c.end {
						t.Errorf("phase %d: max/mean %.3f after 4 rounds, %.3f at the end; want at most %.2f and %.2f", ph, hist[4], mm, c.at4, c.end)
					}
					for _, m := range moved[rounds-5:] {
						if m != 0 {
							t.Errorf("phase %d still moves in its last 5 rounds: %v", ph, moved)
							break
						}
					}
				}
			})
		}
	}
}

// TestFitRenewsAfterUnfinishedRelay replays a draw of report noise
// (bench/balance's Zipf 1.1 keys, seed 1) in which the round after a relay's
// preparation finds the relay no longer feasible within the episode's rule:
// settling there left the pool at the 1.84 it started from, as make bench
// did on 2026-11-28 (08:16, "zipf=1.1 policy=fit: max/mean 1.82 at 60s").
// Begun again once from the prepared ring, fit hands the key on.
func TestFitRenewsAfterUnfinishedRelay(t *testing.T) {
	z := newZipfPool(1.1, 100_000, 1)
	z.noise = rand.New(rand.NewPCG(1013, 99))
	z.hot = true
	p := &fitPolicy{}
	var hist []float64
	for range 8 {
		in, mm := z.round(0, true)
		hist = append(hist, math.Round(mm*1000)/1000)
		z.apply(t, p.Plan(in))
	}
	_, mm := z.round(0, false)
	t.Logf("max/mean by round %v, end %.3f", hist, mm)
	if mm > 1.5 {
		t.Errorf("max/mean %.3f after 8 rounds; want at most 1.5 (the relay finished)", mm)
	}
}
