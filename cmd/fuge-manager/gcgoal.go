package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Since Go 1.18 the GC's heap goal counts the goroutine stacks and globals
// it scans as well as the live heap: goal = live + (live + stacks +
// globals) × GOGC/100. A manager holds five goroutines per owner
// connection (gRPC's reader, writer and keepalive, the session's handler
// and receiver): as 5,000 owners joined a leader, its stacks took 138 MB
// of memory on top of the heap, and the part scanned was about a third of
// the live heap, so under GOGC=100 the heap grew to about 2.3 times its
// live size (measured 2026-11-29 with /debug/pprof/heap?debug=1 and
// go_gc_gogc_percent; the leader's peak RSS was 474-519 MiB in four runs
// of the ten-times-PRS benchmark, 442-493 MiB in five with gcGoal).
//
// gcGoal keeps the heap goal where GOGC=100 put it before Go 1.18, at
// twice the live heap, by lowering the GC percent by the share of the
// scanned memory that is not heap. It runs unless GOGC is set: a GOGC
// given explicitly (GOGC=100 included) is the operator's, and left alone.

// gcGoalMetrics are what gcGoal reads: the live heap and the scannable
// stacks and globals at the end of the last GC cycle.
var gcGoalMetrics = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// gcPercentFor is the GC percent at which the heap goal is live ×
// (1 + base/100): base × live / (live + stacks + globals), at least
// base/4 and at most base. With nothing live yet (before the first
// cycle) it is base.
func gcPercentFor(base int, live, stacks, globals uint64) int {
	if live == 0 || base <= 0 {
		return base
	}
	p := int(float64(base) * float64(live) / (float64(live) + float64(stacks) + float64(globals)))
	return max(min(p, base), max(base/4, 1))
}

// gcGoal adjusts the GC percent on every tick until ctx ends: read gives
// the live heap, stacks and globals, set sets the percent and returns the
// previous one (debug.SetGCPercent). It sets a new percent only when it
// differs from the one set by at least 5, and restores base when it
// returns.
func gcGoal(ctx context.Context, base int, tick <-chan time.Time, read func() (live, stacks, globals uint64), set func(int) int, log *slog.Logger) {
	cur := base
	defer func() {
		if cur != base {
			set(base)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		live, stacks, globals := read()
		p := gcPercentFor(base, live, stacks, globals)
		if d := p - cur; d == 0 || (-5 < d && d < 5 && p != base) {
			continue // unchanged, or a small move other than back to base
		}
		set(p)
		log.Debug("GC percent set so that stacks do not raise the heap goal",
			"percent", p, "live_heap", live, "stacks", stacks, "globals", globals)
		cur = p
	}
}

// gcGoalReader returns a function that reads gcGoalMetrics from the
// runtime, into samples it keeps from call to call.
func gcGoalReader() func() (live, stacks, globals uint64) {
	s := make([]metrics.Sample, len(gcGoalMetrics))
	for i, name := range gcGoalMetrics {
		s[i].Name = name
	}
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return func() (uint64, uint64, uint64) {
		metrics.Read(s)
		return v(0), v(1), v(2)
	}
}

// startGCGoal runs gcGoal every second, until ctx ends, unless GOGC is
// set; it reports whether it started it.
func startGCGoal(ctx context.Context, getenv func(string) string, log *slog.Logger) bool {
	if getenv("GOGC") != "" {
		return false
	}
	t := time.NewTicker(time.Second)
	go func() {
		defer t.Stop()
		gcGoal(ctx, 100, t.C, gcGoalReader(), debug.SetGCPercent, log)
	}()
	return true
}
