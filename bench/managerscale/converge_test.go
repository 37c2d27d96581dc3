package main

import (
	"strings"
	"testing"
	"time"
)

// The convergence line names the CPU a change cost each side when it was
// measured, and says nothing of CPU when it was not.
func TestConvergenceNamesCPUPerChange(t *testing.T) {
	c := convergence{changes: 4, p50: 50 * time.Millisecond, p99: 120 * time.Millisecond, slowest: 121 * time.Millisecond}
	if s := c.String(); strings.Contains(s, "CPU") {
		t.Fatalf("CPU named without a measurement: %q", s)
	}
	c.mgrCPU, c.genCPU = 88*time.Millisecond+400*time.Microsecond, 93*time.Millisecond
	want := "p99 120ms, slowest 121ms (leave 0s, return 0s); CPU a change: managers 88ms, generator 93ms"
	if s := c.String(); !strings.Contains(s, want) {
		t.Fatalf("got %q, want it to contain %q", s, want)
	}
	if s := c.String(); strings.Contains(s, "table updates") {
		t.Fatalf("table updates named without lookups: %q", s)
	}
	c.lookups, c.updates, c.heartbeats = 2000, 12000, 10
	want = "; table updates a change 1.50 a lookup, heartbeats meanwhile 10"
	if s := c.String(); !strings.HasSuffix(s, want) {
		t.Fatalf("got %q, want it to end with %q", s, want)
	}
}
