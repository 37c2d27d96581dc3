package main

import (
	"strings"
	"testing"
)

// shortSeeds is the simulator's share of make test; make sim runs thousands.
const shortSeeds = 50

func TestSimulatorShortRun(t *testing.T) {
	sum := runSeeds(1, shortSeeds, 2, nil)
	t.Logf("seeds=%d events=%d violations=%d", shortSeeds, sum.events, sum.violations)
	for _, r := range sum.failed {
		t.Errorf("seed %d: %d violations, first: %s (replay: make sim SEED=%d)", r.Seed, len(r.Violations), r.Violations[0], r.Seed)
	}
	if sum.events < shortSeeds*1000 {
		t.Errorf("only %d events: the schedule is not exercising the protocol", sum.events)
	}
	// The balancing policy moves virtual nodes under the faults in most
	// seeds, or the run proves nothing about balancing.
	t.Logf("balancing: %d virtual nodes moved in %d moving rounds, in %d of %d seeds", sum.vnodesMoved, sum.movingRounds, sum.balanced, shortSeeds)
	if sum.balanced < shortSeeds/2 {
		t.Errorf("the policy moved virtual nodes in only %d of %d seeds", sum.balanced, shortSeeds)
	}
}

func TestSeedReplaysExactly(t *testing.T) {
	for _, seed := range []uint64{3, 11} {
		a, b := run(paramsFor(seed), nil), run(paramsFor(seed), nil)
		if a.Events != b.Events || strings.Join(a.Violations, "\n") != strings.Join(b.Violations, "\n") {
			t.Errorf("seed %d: runs differ: %d vs %d events", seed, a.Events, b.Events)
		}
	}
}

// negativeControl runs seeds with a planted fault until the checker reports
// a violation whose text contains want, and fails if none does.
func negativeControl(t *testing.T, seeds int, want string, plant func(*Params)) {
	t.Helper()
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		p := paramsFor(seed)
		plant(&p)
		r := run(p, nil)
		for _, v := range r.Violations {
			if strings.Contains(v, want) {
				t.Logf("seed %d: detected after %d events: %s", seed, r.Events, v)
				return
			}
		}
	}
	t.Fatalf("no %q violation in %d seeds: the checker misses the planted bug", want, seeds)
}

// An owner clock running at 0.90 of the manager's rate breaks the 65/60
// margin: the owner believes past the manager's hold, and the manager
// regrants to another owner meanwhile.
func TestNegativeControlSlowOwnerClock(t *testing.T) {
	negativeControl(t, 200, "I1:", func(p *Params) {
		p.OwnerRates = [2]float64{0.90, 0.90}
	})
}

// Without the sequence-number race filter, a recall acknowledgement and a
// grant that cross in flight give one range to two owners.
func TestNegativeControlRaceFilter(t *testing.T) {
	negativeControl(t, 200, "I1:", func(p *Params) {
		p.DisableRaceFilter = true
	})
}

// A lookup that reports only the first range of each loss notification
// leaves the other losses unsignalled: I4 must catch it.
func TestNegativeControlTruncatedLossNotification(t *testing.T) {
	negativeControl(t, 200, "I4:", func(p *Params) {
		p.TruncateLoss = true
	})
}

// An owner that tells the manager it is leaving but goes on believing what
// it held breaks the clean leave's safety argument (stop believing, then
// tell): the manager regrants at once, and two owners hold one key.
func TestNegativeControlLeaveKeepsBelief(t *testing.T) {
	negativeControl(t, 200, "I1:", func(p *Params) {
		p.LeaveKeepsBelief = true
	})
}

// A balancing move that hands arcs to their new owner without recalling
// them from the old one: the old owner believes them until the manager's
// next message reaches it, while the new one already serves them.
func TestNegativeControlBalanceNoRecall(t *testing.T) {
	negativeControl(t, 200, "I1:", func(p *Params) {
		p.UnsafeBalanceNoRecall = true
	})
}

// A new incarnation under a live owner's name (the old process cut off from
// the manager, not dead) must not be granted its predecessor's ranges before
// they expire. The manager as it was before issue 10 did so at once: two
// processes of one name served the same keys.
func TestNegativeControlSecondIncarnation(t *testing.T) {
	negativeControl(t, 200, "I1:", func(p *Params) {
		p.UnsafeReplace = true
	})
}

// An owner that serves a range granted as an import before its state
// arrived (the planted bug) serves migrated state it does not have: the M
// check must catch it.
func TestNegativeControlServeBeforeImport(t *testing.T) {
	negativeControl(t, 200, "M:", func(p *Params) {
		p.UnsafeServeImports = true
	})
}

// Migration must actually run in the fault mix: some seeds hand ranges
// over with their state, and some transfers fall back.
func TestSimulatorMigrates(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		p := paramsFor(seed)
		if !p.Migration {
			continue
		}
		w := newWorld(p, nil)
		r := runWorld(w)
		st := w.mgr.core.Stats()
		if len(r.Violations) > 0 {
			t.Fatalf("seed %d: %s", seed, r.Violations[0])
		}
		if st.MigrationsGranted > 0 {
			t.Logf("seed %d: %d arcs migrated, %d released as migrated, %d fell back", seed, st.MigrationsGranted, st.MigrationsReleased, st.MigrationsFallenBack)
			return
		}
	}
	t.Fatal("no seed migrated anything")
}
