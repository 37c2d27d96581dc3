package main

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// loadModel is the simulated request load: a uniform base spread over the
// circle plus hot keys (Zipf-like weights at random points), which swing
// (move to new points, with a new skew) from time to time during the fault
// phase, so that the balancing policy keeps moving virtual nodes while
// owners crash, leave, join and drain. Owners report the load of what they
// hold on every lease request, as ownerguard does, per range group.
type loadModel struct {
	rnd   *rand.Rand // its own source: the fault schedule's draws are unchanged
	base  float64    // load of the whole circle spread evenly
	keys  []uint64   // hot keys' hashes
	w     []float64  // their loads
	swing int        // swings so far
}

const hotKeys = 64

func newLoadModel(seed uint64) *loadModel {
	m := &loadModel{rnd: rand.New(rand.NewPCG(seed, 0x6c6f6164)), base: 1000}
	m.reshape()
	return m
}

// reshape draws new hot keys: positions and a skew α in [0.6, 1.4]; the
// hot keys carry as much load as the base.
func (m *loadModel) reshape() {
	alpha := 0.6 + 0.8*m.rnd.Float64()
	m.keys, m.w = m.keys[:0], m.w[:0]
	var sum float64
	for k := range hotKeys {
		m.keys = append(m.keys, m.rnd.Uint64())
		x := math.Pow(float64(k+1), -alpha)
		m.w = append(m.w, x)
		sum += x
	}
	for k := range m.w {
		m.w[k] *= m.base / sum
	}
}

// report is the load of the leases ls.
func (m *loadModel) report(ls []lease.Lease) *lease.LoadReport {
	l := &lease.LoadReport{Groups: make([]float64, lease.LoadGroups)}
	for _, le := range ls {
		groupShares(le.Range, func(g int, share float64) { l.Groups[g] += m.base * share })
		for k, h := range m.keys {
			if le.Range.Contains(h) {
				l.Groups[lease.LoadGroup(h)] += m.w[k]
				// The busiest keys held, as ownerguard samples them (the
				// keys come by weight, the heaviest first, but leases in
				// any order: keep the heaviest MaxHotKeys).
				l.Hot = append(l.Hot, lease.HotKey{Hash: h, Rate: m.w[k]})
			}
		}
	}
	slices.SortFunc(l.Hot, func(a, b lease.HotKey) int { return cmp.Compare(b.Rate, a.Rate) })
	l.Hot = l.Hot[:min(len(l.Hot), lease.MaxHotKeys)]
	for _, g := range l.Groups {
		l.Rate += g
	}
	return l
}

// groupShares calls fn with each range group r meets and the fraction of
// the circle they share.
func groupShares(r ring.Range, fn func(g int, share float64)) {
	if r.IsFull() {
		for g := range lease.LoadGroups {
			fn(g, 1.0/lease.LoadGroups)
		}
		return
	}
	x, n := r.Start, r.End-r.Start
	for n > 0 {
		g := lease.LoadGroup(x + 1)
		last := uint64(g+1)<<58 - 1
		step := min(last-x, n)
		fn(g, float64(step)/math.Exp2(64))
		x += step
		n -= step
	}
}

// scheduleSwings swings the load every 10 to 40 s of the fault phase.
func (w *world) scheduleSwings() {
	var next func()
	next = func() {
		if !w.faults {
			return
		}
		w.load.reshape()
		w.load.swing++
		w.logf("load swing %d", w.load.swing)
		w.s.after(time.Duration(10+w.load.rnd.IntN(30))*time.Second, next)
	}
	w.s.after(time.Duration(5+w.load.rnd.IntN(20))*time.Second, next)
}
