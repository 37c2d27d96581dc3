//go:build !linux

package main

import "time"

// pace calls send(k) for k in [0, n) at start + k·every, as Go's timers
// allow (about a millisecond late, in bursts: see openLoop).
func pace(start time.Time, every time.Duration, n int, send func(k int)) {
	paceSleeping(start, every, n, send)
}
