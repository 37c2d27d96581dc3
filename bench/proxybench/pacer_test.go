package main

import (
	"testing"
	"time"
)

// The pacer sends every request once, in order, and none before it is
// due (a timer may fire late, never early). Both the timerfd pacer and the
// fallback on Go's timers.
func TestPace(t *testing.T) {
	for name, pacer := range map[string]func(time.Time, time.Duration, int, func(int)){"pace": pace, "paceSleeping": paceSleeping} {
		const n = 500
		every := 100 * time.Microsecond
		start := time.Now().Add(2 * time.Millisecond)
		next := 0
		pacer(start, every, n, func(k int) {
			if k != next {
				t.Fatalf("%s: sent %d, want %d", name, k, next)
			}
			if due := start.Add(time.Duration(k) * every); time.Now().Before(due) {
				t.Fatalf("%s: request %d sent %v before it was due", name, k, time.Until(due))
			}
			next++
		})
		if next != n {
			t.Fatalf("%s: sent %d of %d", name, next, n)
		}
	}
}
