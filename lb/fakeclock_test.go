package lb

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a TimerClock whose time moves only when Advance is called,
// which fires the timers that fall due.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced when a timer is made
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

var _ TimerClock = (*fakeClock)(nil)

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, changed: make(chan struct{})}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t.c, func() bool { return false }
	}
	f.timers = append(f.timers, t)
	close(f.changed)
	f.changed = make(chan struct{})
	return t.c, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := len(f.timers)
		f.timers = slices.DeleteFunc(f.timers, func(x *fakeTimer) bool { return x == t })
		return len(f.timers) < n
	}
}

// Advance moves the clock by d and fires the timers due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.timers = slices.DeleteFunc(f.timers, func(t *fakeTimer) bool {
		if t.at.After(f.now) {
			return false
		}
		t.c <- f.now
		return true
	})
}

// waitSettled waits until a timer is pending after now. The Lookup keeps
// one protocol timer, so after an Advance that fired it, this returns only
// once the Lookup has handled it and armed the next: what the handling did
// is then visible.
func (f *fakeClock) waitSettled(t *testing.T) time.Time {
	t.Helper()
	deadline := time.NewTimer(defaultTestTimeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		var next time.Time
		for _, x := range f.timers {
			if x.at.After(f.now) && (next.IsZero() || x.at.Before(next)) {
				next = x.at
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if !next.IsZero() {
			return next
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatal("timed out waiting for the Lookup to arm its timer")
		}
	}
}
