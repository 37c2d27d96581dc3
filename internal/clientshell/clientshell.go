// Package clientshell holds the pieces shared by the shells of the network
// client libraries (lb and ownerguard): the ordered upcall queue, the
// reconnect backoff and the monotonic clock.
package clientshell

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Upcalls is a queue of upcalls made in order, one at a time, on a goroutine
// of their own, so that a slow callback does not delay the caller that
// queues them. Its zero value is ready to use; Push may come before Start.
type Upcalls[T any] struct {
	mu   sync.Mutex
	q    []T
	stop bool
	wake chan struct{}
	done chan struct{} // closed when the goroutine has ended; nil before Start
}

// Start starts the goroutine that calls fn on every queued value, in order,
// until Stop. Call it at most once.
func (u *Upcalls[T]) Start(fn func(T)) {
	u.mu.Lock()
	u.wake = make(chan struct{}, 1)
	u.done = make(chan struct{})
	wake, done := u.wake, u.done
	u.mu.Unlock()
	go u.run(fn, wake, done)
}

// Push queues v for the upcall goroutine.
func (u *Upcalls[T]) Push(v T) {
	u.mu.Lock()
	u.q = append(u.q, v)
	wake := u.wake
	u.mu.Unlock()
	poke(wake)
}

// Stop lets the goroutine finish the queue, then waits for it to end. It
// returns at once if Start was never called.
func (u *Upcalls[T]) Stop() {
	u.mu.Lock()
	u.stop = true
	wake, done := u.wake, u.done
	u.mu.Unlock()
	if done == nil {
		return
	}
	poke(wake)
	<-done
}

func (u *Upcalls[T]) run(fn func(T), wake, done chan struct{}) {
	defer close(done)
	for {
		u.mu.Lock()
		q, stop := u.q, u.stop
		u.q = nil
		u.mu.Unlock()
		for _, v := range q {
			fn(v)
		}
		if len(q) == 0 {
			if stop {
				return
			}
			<-wake
		}
	}
}

// poke wakes the goroutine waiting on wake, if any, without blocking.
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Defaults of Backoff.
const (
	DefaultBackoffBase   = 50 * time.Millisecond
	DefaultBackoffMax    = 2 * time.Second
	DefaultBackoffJitter = 0.2
)

// BackoffRule is the rule Backoff.Check enforces, for the packages' errors.
const BackoffRule = "backoff must satisfy 0 < base <= max and 0 <= jitter <= 1"

// Backoff paces reconnection after a failed stream, as grpc-go does: attempt
// k (from 0) waits min(Max, Base·2^k), scaled by a random factor in
// [1-Jitter, 1+Jitter].
type Backoff struct {
	Base   time.Duration // zero means DefaultBackoffBase (50 ms)
	Max    time.Duration // zero means DefaultBackoffMax (2 s)
	Jitter float64       // zero means DefaultBackoffJitter (0.2); negative means none
}

// WithDefaults returns b with zero fields set to the defaults and a negative
// Jitter set to zero.
func (b Backoff) WithDefaults() Backoff {
	if b.Base == 0 {
		b.Base = DefaultBackoffBase
	}
	if b.Max == 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Jitter == 0 {
		b.Jitter = DefaultBackoffJitter
	} else if b.Jitter < 0 {
		b.Jitter = 0
	}
	return b
}

// Check returns nil if b (after defaults) satisfies BackoffRule, and
// otherwise an error wrapping sentinel that shows b.
func (b Backoff) Check(sentinel error) error {
	if b.Base <= 0 || b.Max < b.Base || b.Jitter > 1 {
		return fmt.Errorf("%w: %+v", sentinel, b)
	}
	return nil
}

// Delay is the wait before attempt k, given r uniform in [0, 1).
func (b Backoff) Delay(k int, r float64) time.Duration {
	d := b.Max
	if k < 32 && b.Base<<k > 0 && b.Base<<k < b.Max {
		d = b.Base << k
	}
	return time.Duration(float64(d) * (1 + b.Jitter*(2*r-1)))
}

// MonoClock reads the monotonic clock, expressed as wall time since its
// base, so that its times (and their UnixNano) never jump when the wall
// clock is stepped. Use NewMonoClock: the zero MonoClock is not a clock.
type MonoClock struct {
	base     time.Time
	baseNano int64 // base.UnixNano()
}

// NewMonoClock returns a MonoClock based at the current time.
func NewMonoClock() MonoClock {
	base := time.Now()
	return MonoClock{base: base, baseNano: base.UnixNano()}
}

// Now returns the base plus the monotonic time elapsed since it.
func (c MonoClock) Now() time.Time { return c.base.Add(time.Since(c.base)) }

// UnixNano returns Now().UnixNano(), reading the clock the same way (one
// monotonic read, no wall-clock read) but without building a time.Time:
// the ownership checks call it on every request.
func (c MonoClock) UnixNano() int64 { return c.baseNano + int64(time.Since(c.base)) }

// RateClock is a clock that runs at Rate times real time from its start
// (0 freezes it): fault testing injects clock-rate faults through it. The
// lease protocol assumes every party's clock runs within 60:65 of the
// others'; a RateClock outside that breaks the assumption on purpose.
type RateClock struct {
	start time.Time // real, with a monotonic reading
	rate  float64
}

// NewRateClock returns a RateClock at rate, starting now.
func NewRateClock(rate float64) RateClock { return RateClock{start: time.Now(), rate: rate} }

// Now returns start + rate · (real time since start), with a monotonic
// reading so that durations between its readings are exact.
func (c RateClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.rate))
}

// SystemMonotonic returns CLOCK_MONOTONIC in nanoseconds: one clock that
// every process on the machine shares and that never steps, unlike the wall
// clock. Fault-testing histories written by several processes use it.
func SystemMonotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // never on Linux
	}
	return ts.Nano()
}
