package ratelimit

import (
	"flag"
	"fmt"
	"math"
	"testing"
)

var long = flag.Bool("long", false, "run the long form of the harness (500 limiters, three seeds, three loss rates)")

// checkHarness is the checker: within the goal after the view change,
// steady admitted within tol of the limit, and the limiters outside the
// view held to their panic share.
func checkHarness(r HarnessResult, goal int, tol float64) []string {
	var bad []string
	if r.Converged < 0 || r.Converged > goal {
		bad = append(bad, fmt.Sprintf("converged in %d epochs after the view change (-1: never), goal %d", r.Converged, goal))
	}
	if math.Abs(r.Steady-1) > tol {
		bad = append(bad, fmt.Sprintf("steady admitted/limit %.3f, want within ±%.2f", r.Steady, tol))
	}
	if r.Outside > 1.02 {
		bad = append(bad, fmt.Sprintf("outside the view admitted/share %.3f, want <= 1", r.Outside))
	}
	return bad
}

func mustPass(t *testing.T, bad []string) {
	t.Helper()
	for _, b := range bad {
		t.Error(b)
	}
}

func runHarness(t *testing.T, cfg HarnessConfig) HarnessResult {
	t.Helper()
	r, err := RunHarness(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("n=%d drop %.2f dup %.2f reorder %.2f seed %d: %v", cfg.Nodes, cfg.Drop, cfg.Duplicate, cfg.Reorder, cfg.Seed, r)
	return r
}

// TestHarnessQuick is the short form that make test runs: a view change
// under a lossy, duplicating, reordering transport, for 50 and 500
// limiters.
func TestHarnessQuick(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  HarnessConfig
		goal int
		tol  float64
	}{
		{"n50-loss5", HarnessConfig{Nodes: 50, Seed: 1, Epochs: 50, ChangeAt: 20, Leave: 0.1, Drop: 0.05, Duplicate: 0.05, Reorder: 0.1}, 12, 0.05},
		{"n50-loss20", HarnessConfig{Nodes: 50, Seed: 2, Epochs: 50, ChangeAt: 20, Leave: 0.1, Drop: 0.2, Duplicate: 0.05, Reorder: 0.1}, 12, 0.10},
		{"n500-loss5", HarnessConfig{Nodes: 500, Seed: 3, Epochs: 40, ChangeAt: 20, Leave: 0.05, Drop: 0.05, Duplicate: 0.05, Reorder: 0.1}, 16, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustPass(t, checkHarness(runHarness(t, tc.cfg), tc.goal, tc.tol))
		})
	}
}

// TestHarnessPlainIsBiased is the negative control: the same checker
// rejects plain push-sum (no running sums, no acknowledgements) under the
// same lossy transport.
func TestHarnessPlainIsBiased(t *testing.T) {
	cfg := HarnessConfig{Nodes: 50, Seed: 2, Epochs: 50, ChangeAt: 20, Leave: 0.1, Drop: 0.2, Duplicate: 0.05, Reorder: 0.1, Plain: true}
	r := runHarness(t, cfg)
	bad := checkHarness(r, 12, 0.10)
	if len(bad) == 0 {
		t.Fatalf("the checker passed plain push-sum under 20%% loss: %v", r)
	}
	t.Logf("the checker caught it: %q", bad)
}

func TestHarnessLong(t *testing.T) {
	if !*long {
		t.Skip("the long form runs with -long (make test runs TestHarnessQuick)")
	}
	for _, drop := range []float64{0, 0.05, 0.2} {
		for seed := uint64(1); seed <= 3; seed++ {
			cfg := HarnessConfig{Nodes: 500, Seed: seed, Epochs: 60, ChangeAt: 20, Leave: 0.05, Drop: drop, Duplicate: 0.05, Reorder: 0.1}
			tol := 0.05
			if drop > 0.05 {
				tol = 0.10
			}
			mustPass(t, checkHarness(runHarness(t, cfg), 16, tol))
		}
	}
}
