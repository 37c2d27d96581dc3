package ownerguard

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fuge-project/fuge/lease"
)

// DefaultLoadWindow is the default OwnerConfig.LoadWindow: the time
// constant of the exponentially weighted moving average of the admitted
// request rate that an Owner reports as its load. A step change of the rate
// shows 63% after one window, 95% after three.
const DefaultLoadWindow = 5 * time.Second

// Hot keys. CountRequest keeps the hash of every hotEvery-th request of a
// range group in that group's ring of hotSlots samples (one atomic store,
// no lock); when the session reports, the samples taken since the last
// report stand for that group's requests in between, so a key's share of
// them times the group's count is its count. The meter smooths the rates
// of up to hotTracked keys as it smooths the groups' and reports the
// lease.MaxHotKeys busiest. A key with a share p of a group's samples is
// measured to ±sqrt(p(1-p)/hotSlots) of the group's rate: ±4% for a key
// that carries 90% of its group, the case that matters (one key above the
// mean owner load).
const (
	hotEvery   = 16
	hotSlots   = 64
	hotTracked = 4 * lease.MaxHotKeys
)

// loadMeter counts admitted requests per range group (lock-free, from
// request goroutines) and turns the counts into a smoothed rate when the
// session reports (from the session goroutine).
type loadMeter struct {
	counts  [lease.LoadGroups]atomic.Uint64
	samples [lease.LoadGroups][hotSlots]atomic.Uint64 // key hashes, see hotEvery
	hot     map[uint64]float64                        // smoothed rates of the tracked keys
	seen    map[uint64]hotSeen                        // scratch of sample: the keys sampled since the last one

	mu       sync.Mutex
	fixed    *lease.LoadReport // SetLoad's figure, if any
	last     [lease.LoadGroups]uint64
	lastAt   time.Time
	ewma     [lease.LoadGroups]float64
	started  bool
	disabled bool // LoadWindow < 0: no reports
}

// CountRequest counts one request for the key with hash keyHash toward the
// load this Owner reports (the default load: the admitted request rate per
// second, per range group, smoothed over OwnerConfig.LoadWindow). The
// guards call it for every request they admit; an application that checks
// ownership itself (GetOwnershipHandle) may call it for each request it
// serves. It takes no lock and does not allocate.
func (o *Owner) CountRequest(keyHash uint64) {
	g := lease.LoadGroup(keyHash)
	if c := o.load.counts[g].Add(1); c%hotEvery == 0 {
		o.load.samples[g][c/hotEvery%hotSlots].Store(keyHash)
	}
}

// SetLoad makes the Owner report l as its load from its next request on,
// instead of its admitted request rate: an application's own figure (CPU,
// memory, queue length), in any unit, as long as every owner of the
// namespace reports the same kind. Groups may be empty (the manager then
// assumes the load is spread evenly over the owner's ranges) or have
// lease.LoadGroups figures. A report the manager would refuse is refused
// here, with the field named, and changes nothing. SetLoad(nil) goes back
// to the admitted request rate. OwnerConfig.LoadFunc, if set, takes
// precedence.
func (o *Owner) SetLoad(l *lease.LoadReport) error {
	if l != nil {
		if err := l.Validate(); err != nil {
			return err
		}
		c := *l
		c.Groups = append([]float64(nil), l.Groups...)
		l = &c
	}
	o.load.mu.Lock()
	o.load.fixed = l
	o.load.mu.Unlock()
	return nil
}

// Load returns the load the Owner would report now: what the last report
// carried, or SetLoad's figure. Nil when reports are off.
func (o *Owner) Load() *lease.LoadReport {
	o.load.mu.Lock()
	defer o.load.mu.Unlock()
	if o.load.disabled {
		return nil
	}
	if o.load.fixed != nil {
		c := *o.load.fixed
		return &c
	}
	return o.load.measured()
}

// loadReport is the report for a request the session sends at now.
func (o *Owner) loadReport(now time.Time) *lease.LoadReport {
	if o.cfg.LoadFunc != nil {
		l := o.cfg.LoadFunc()
		if l.Validate() != nil {
			return nil // the application's bug must not cost the session
		}
		return &l
	}
	m := &o.load
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.disabled {
		return nil
	}
	m.sample(now, o.cfg.LoadWindow)
	if m.fixed != nil {
		c := *m.fixed
		return &c
	}
	return m.measured()
}

// sample folds the counts since the last sample into the moving average:
// rate = Δcount/Δt, weight 1 - exp(-Δt/window).
func (m *loadMeter) sample(now time.Time, window time.Duration) {
	if !m.started {
		m.started, m.lastAt = true, now
		for g := range m.counts {
			m.last[g] = m.counts[g].Load()
		}
		return
	}
	dt := now.Sub(m.lastAt)
	if dt <= 0 {
		return
	}
	alpha := 1 - math.Exp(-float64(dt)/float64(window))
	if m.seen == nil {
		m.seen, m.hot = map[uint64]hotSeen{}, map[uint64]float64{}
	}
	clear(m.seen)
	for g := range m.counts {
		c := m.counts[g].Load()
		rate := float64(c-m.last[g]) / dt.Seconds()
		m.ewma[g] += alpha * (rate - m.ewma[g])
		// The samples taken since the last report: the latest
		// min(n, hotSlots), each standing for an equal part of the
		// group's requests in between.
		if n := c/hotEvery - m.last[g]/hotEvery; n > 0 {
			k := min(n, hotSlots)
			per := float64(c-m.last[g]) / float64(k)
			for s := c/hotEvery - k + 1; s <= c/hotEvery; s++ {
				h := m.samples[g][s%hotSlots].Load()
				x := m.seen[h]
				x.samples, x.count = x.samples+1, x.count+per
				m.seen[h] = x
			}
		}
		m.last[g] = c
	}
	m.lastAt = now
	for h, r := range m.hot {
		m.hot[h] = r + alpha*(m.seen[h].count/dt.Seconds()-r)
	}
	// A key starts being tracked when sampled twice in an interval: one
	// sample stands for up to 1/hotSlots of its group, which a cold key
	// in a busy group would otherwise be credited with.
	for h, x := range m.seen {
		if _, ok := m.hot[h]; !ok && x.samples >= 2 {
			m.hot[h] = alpha * x.count / dt.Seconds()
		}
	}
	if len(m.hot) > hotTracked {
		for _, k := range m.busiest(len(m.hot))[hotTracked:] {
			delete(m.hot, k.Hash)
		}
	}
}

// hotSeen is a key's samples since the last report and the requests they
// stand for.
type hotSeen struct {
	samples int
	count   float64
}

// busiest returns up to n tracked keys, the busiest first (ties by hash).
func (m *loadMeter) busiest(n int) []lease.HotKey {
	ks := make([]lease.HotKey, 0, len(m.hot))
	for h, r := range m.hot {
		ks = append(ks, lease.HotKey{Hash: h, Rate: min(max(r, 0), lease.MaxLoad)})
	}
	slices.SortFunc(ks, func(a, b lease.HotKey) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return cmp.Compare(a.Hash, b.Hash)
	})
	return ks[:min(n, len(ks))]
}

func (m *loadMeter) measured() *lease.LoadReport {
	l := &lease.LoadReport{Groups: make([]float64, lease.LoadGroups)}
	for g, r := range m.ewma {
		r = min(max(r, 0), lease.MaxLoad)
		l.Groups[g] = r
		l.Rate += r
	}
	l.Rate = min(l.Rate, lease.MaxLoad)
	for _, k := range m.busiest(lease.MaxHotKeys) {
		if k.Rate > 0 {
			l.Hot = append(l.Hot, k)
		}
	}
	return l
}
