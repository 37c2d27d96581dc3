package main

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const MB = 1 << 20
	for _, c := range []struct {
		name                  string
		base                  int
		live, stacks, globals uint64
		want                  int
	}{
		{"nothing live yet", 100, 0, 130 * MB, MB, 100},
		{"no stacks", 100, 100 * MB, 0, 0, 100},
		{"the 10x leader: goal twice the live heap", 100, 100 * MB, 133 * MB, 0, 42},
		{"globals count too", 100, 100 * MB, 0, 100 * MB, 50},
		{"stacks dwarf the heap: no lower than a quarter", 100, 10 * MB, 500 * MB, 0, 25},
		{"another base", 200, 100 * MB, 100 * MB, 0, 100},
		{"GC off stays off", -1, 100 * MB, 100 * MB, 0, -1},
	} {
		if got := gcPercentFor(c.base, c.live, c.stacks, c.globals); got != c.want {
			t.Errorf("%s: gcPercentFor(%d, %d, %d, %d) = %d, want %d", c.name, c.base, c.live, c.stacks, c.globals, got, c.want)
		}
	}
	// The goal that percent gives is the one GOGC=base gave before stacks
	// counted: live × (1 + base/100), within rounding.
	live, stacks := uint64(100<<20), uint64(133<<20)
	p := gcPercentFor(100, live, stacks, 0)
	goal := float64(live) + float64(live+stacks)*float64(p)/100
	if want := 2 * float64(live); goal > want || goal < 0.98*want {
		t.Errorf("goal at %d%%: %.0f MB, want about %.0f MB", p, goal/(1<<20), want/(1<<20))
	}
}

// TestGCGoalLoop drives the loop with a tick channel and fake metrics: it
// sets a percent when the stacks' share changes it by 5 or more, not for
// less, goes back to the base when stacks go, and restores the base when
// it ends.
func TestGCGoalLoop(t *testing.T) {
	const MB = 1 << 20
	type sample struct{ live, stacks uint64 }
	samples := make(chan sample)
	tick := make(chan time.Time)
	var sets []int
	setCalled := make(chan struct{}, 16)
	set := func(p int) int {
		sets = append(sets, p)
		setCalled <- struct{}{}
		return 0
	}
	read := func() (uint64, uint64, uint64) {
		s := <-samples
		return s.live, s.stacks, 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		gcGoal(ctx, 100, tick, read, set, slog.New(slog.DiscardHandler))
	}()
	step := func(s sample) {
		tick <- time.Time{}
		samples <- s
	}
	step(sample{100 * MB, 133 * MB}) // 42
	<-setCalled
	step(sample{100 * MB, 140 * MB}) // 41: within 5, not set
	step(sample{100 * MB, 300 * MB}) // 25
	<-setCalled
	step(sample{100 * MB, 0}) // back to 100
	<-setCalled
	step(sample{100 * MB, 1 * MB}) // 99: within 5 of 100, not set
	step(sample{100 * MB, 133 * MB})
	<-setCalled
	cancel()
	<-done // restores 100
	want := []int{42, 25, 100, 42, 100}
	if len(sets) != len(want) {
		t.Fatalf("percents set: %v, want %v", sets, want)
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("percents set: %v, want %v", sets, want)
		}
	}
}

// TestGCGoalLeavesGOGC: a GOGC the operator set, whatever its value, is
// left alone; without one the loop starts.
func TestGCGoalLeavesGOGC(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, gogc := range []string{"100", "50", "off"} {
		getenv := func(k string) string {
			if k == "GOGC" {
				return gogc
			}
			return ""
		}
		if startGCGoal(ctx, getenv, slog.New(slog.DiscardHandler)) {
			t.Errorf("GOGC=%s: the GC goal loop started", gogc)
		}
	}
	if !startGCGoal(ctx, func(string) string { return "" }, slog.New(slog.DiscardHandler)) {
		t.Error("GOGC unset: the GC goal loop did not start")
	}
}

// TestGCGoalReaderReadsTheRuntime: the metrics' names are the runtime's
// (a misspelt one reads as 0), and the reader can be called again.
func TestGCGoalReaderReadsTheRuntime(t *testing.T) {
	read := gcGoalReader()
	keep := make([][]byte, 64)
	for i := range keep {
		keep[i] = make([]byte, 64<<10)
	}
	runtime.GC()
	for range 2 {
		live, stacks, globals := read()
		if live < 4<<20 || stacks == 0 || globals == 0 {
			t.Fatalf("live heap %d, stacks %d, globals %d: want 4 MiB or more live and some of each", live, stacks, globals)
		}
	}
	runtime.KeepAlive(keep)
}
