package ratelimit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fuge-project/fuge/ring"
)

// Limiter enforces one Limit at one proxy: a token bucket per key value,
// whose rate its Node sets each epoch. Allow is safe for concurrent use;
// everything else belongs to the Node.
type Limiter struct {
	cfg     Limit
	enforce bool
	window  int64 // Period in whole seconds, at least 1
	tab     atomic.Pointer[table]
	// fresh is the fraction of its base a new key starts with (float64
	// bits): the Node's current default share.
	fresh atomic.Uint64

	mu       sync.Mutex
	overflow *keyState // keys beyond MaxKeys share it
}

// NewLimiter validates l and returns its limiter, admitting 1/registered
// of each key's limit until a Node says otherwise (registered < 1 counts
// as 1).
func NewLimiter(l Limit, registered int) (*Limiter, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	l = l.WithDefaults()
	lim := &Limiter{cfg: l, enforce: l.Mode == Enforce, window: max(1, int64(math.Ceil(l.Period.Seconds())))}
	lim.tab.Store(newTable(min(64, l.MaxKeys)))
	lim.fresh.Store(math.Float64bits(1 / float64(max(1, registered))))
	lim.overflow = lim.newKey("", 0)
	return lim, nil
}

// Config returns the limit, with defaults filled in.
func (l *Limiter) Config() Limit { return l.cfg }

// Allow counts one request for key at now (ns, on the clock the Node's
// Tick reads) and decides it. It takes no lock and allocates nothing,
// except the first time it sees a key value.
func (l *Limiter) Allow(key []byte, now int64) Decision {
	h := ring.Hash(key)
	k := l.tab.Load().get(key, h)
	if k == nil {
		k = l.insert(key, h)
	}
	k.arrivals.Add(1)
	ok, rem, reset := k.allow(now)
	d := Decision{Allowed: ok, Quota: int64(k.base), Window: l.window, Remaining: rem}
	if !ok {
		k.limited.Add(1)
		d.Limited = true
		d.Reset = timeDuration(reset)
		d.Allowed = !l.enforce
	}
	return d
}

// insert adds key's state, or returns the overflow state when MaxKeys are
// tracked.
func (l *Limiter) insert(key []byte, h uint64) *keyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tab.Load()
	if k := t.get(key, h); k != nil {
		return k
	}
	if t.n >= l.cfg.MaxKeys || len(key) > MaxKeyLen {
		return l.overflow
	}
	k := l.newKey(string(key), h)
	if 2*(t.n+1) > len(t.slots) {
		nt := newTable(2 * (t.n + 1))
		t.each(nt.put)
		nt.put(k)
		l.tab.Store(nt)
		return k
	}
	t.put(k)
	return k
}

func (l *Limiter) newKey(key string, h uint64) *keyState {
	base := l.cfg.Requests
	if v, ok := l.cfg.Overrides[key]; ok && key != "" {
		base = v
	}
	k := &keyState{key: key, hash: h, base: base, burst: l.cfg.Burst * base / l.cfg.Requests, gossipID: -1}
	f := math.Float64frombits(l.fresh.Load())
	k.share = f
	l.apply(k, f)
	return k
}

// apply sets k's bucket to fraction f of its fleet-wide limit; +Inf admits
// everything, 0 refuses everything.
func (l *Limiter) apply(k *keyState, f float64) {
	rate := f * k.base / l.cfg.Period.Seconds()
	if math.IsInf(f, 1) {
		rate = f
	}
	k.setRate(rate, f*k.burst)
}

// evict drops keys idle for at least idle epochs once the table is three
// quarters full; it returns the dropped states.
func (l *Limiter) evict(idle int) []*keyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tab.Load()
	if 4*t.n < 3*l.cfg.MaxKeys {
		return nil
	}
	var gone []*keyState
	nt := newTable(t.n)
	t.each(func(k *keyState) {
		if k.idle >= idle {
			gone = append(gone, k)
			return
		}
		nt.put(k)
	})
	if len(gone) > 0 {
		l.tab.Store(nt)
	}
	return gone
}

// each calls f for every tracked key, then the overflow state.
func (l *Limiter) each(f func(*keyState)) {
	l.tab.Load().each(f)
	f(l.overflow)
}

// Keys returns the number of key values tracked.
func (l *Limiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tab.Load().n
}

func timeDuration(ns int64) time.Duration { return time.Duration(ns) }
