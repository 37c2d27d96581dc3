package ratelimit

import (
	"math"
	"sync/atomic"
	"time"
)

// Decision is the verdict on one request.
type Decision struct {
	// Allowed says whether to admit the request: false only for a request
	// over its share under Enforce.
	Allowed bool
	// Limited says the request was over its share (refused under Enforce,
	// counted under Shadow).
	Limited bool
	// Quota is the key's fleet-wide limit per Period, and Window the
	// Period in whole seconds (at least 1), for the RateLimit-Policy header.
	Quota  int64
	Window int64
	// Remaining is the number of requests this limiter would admit now,
	// for the RateLimit header.
	Remaining int64
	// Reset is the time until a request would be admitted again (0 when
	// one would be now): Retry-After for a refused request.
	Reset time.Duration
}

// The special GCRA intervals.
const (
	intervalOpen   = 0  // admit everything (fail_open)
	intervalClosed = -1 // refuse everything (fail_closed)
)

// keyState is one key value's token bucket, kept as GCRA's theoretical
// arrival time (one atomic word: a token bucket with no separate refill
// step), and its demand counters. The atomics are shared with Allow; the
// plain fields belong to whoever calls Tick.
type keyState struct {
	key  string
	hash uint64
	tat  atomic.Int64 // theoretical arrival time, ns on the caller's clock
	// interval is the ns per token (or intervalOpen, intervalClosed);
	// window is the burst times the interval: a request is admitted if it
	// leaves tat - now <= window.
	interval atomic.Int64
	window   atomic.Int64
	arrivals atomic.Uint64
	limited  atomic.Uint64

	base     float64 // the key's fleet-wide Requests per Period
	burst    float64 // the key's fleet-wide Burst
	seen     uint64  // arrivals at the previous Tick
	demand   float64 // smoothed arrivals per second
	share    float64 // smoothed fraction of base this limiter admits
	idle     int     // epochs without arrivals
	gossipID int32   // index in the Node's push-sum keys, -1 if none
}

// setRate sets the bucket to rate tokens per second with a depth of burst
// tokens (at least minBurst). rate <= 0 refuses everything; +Inf admits
// everything.
func (k *keyState) setRate(rate, burst float64) {
	switch {
	case math.IsInf(rate, 1):
		k.interval.Store(intervalOpen)
		return
	case !(rate > 0):
		k.interval.Store(intervalClosed)
		return
	}
	iv := 1e9 / rate
	if iv > math.MaxInt64/4 {
		iv = math.MaxInt64 / 4
	}
	in := max(int64(iv), minIntervalNano)
	burst = max(minBurst, burst)
	w := burst * float64(in)
	if w > math.MaxInt64/4 {
		w = math.MaxInt64 / 4
	}
	// The window first: a request between the two stores sees the old
	// interval with the new window, which errs by one token at most.
	k.window.Store(int64(w))
	k.interval.Store(in)
}

// allow takes one token at now (ns) if there is one.
func (k *keyState) allow(now int64) (ok bool, remaining int64, reset int64) {
	for {
		in := k.interval.Load()
		switch in {
		case intervalOpen:
			return true, 1 << 31, 0
		case intervalClosed:
			return false, 0, int64(time.Second)
		}
		win := k.window.Load()
		tat := k.tat.Load()
		t := max(tat, now)
		next := t + in
		if next-now > win {
			return false, 0, next - now - win
		}
		if k.tat.CompareAndSwap(tat, next) {
			return true, (win - (next - now)) / in, 0
		}
	}
}

// minBurst is the least bucket depth of one limiter, in tokens: with one
// token a request arriving a little after the bucket refilled wastes the
// gap, which costs a limiter with a small share up to a quarter of it.
const minBurst = 2
