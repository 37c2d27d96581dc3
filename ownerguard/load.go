package ownerguard

import (
	"math"
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

// loadMeter counts admitted requests per range group (lock-free, from
// request goroutines) and turns the counts into a smoothed rate when the
// session reports (from the session goroutine).
type loadMeter struct {
	counts [lease.LoadGroups]atomic.Uint64

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
	o.load.counts[lease.LoadGroup(keyHash)].Add(1)
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
	for g := range m.counts {
		c := m.counts[g].Load()
		rate := float64(c-m.last[g]) / dt.Seconds()
		m.ewma[g] += alpha * (rate - m.ewma[g])
		m.last[g] = c
	}
	m.lastAt = now
}

func (m *loadMeter) measured() *lease.LoadReport {
	l := &lease.LoadReport{Groups: make([]float64, lease.LoadGroups)}
	for g, r := range m.ewma {
		r = min(max(r, 0), lease.MaxLoad)
		l.Groups[g] = r
		l.Rate += r
	}
	l.Rate = min(l.Rate, lease.MaxLoad)
	return l
}
