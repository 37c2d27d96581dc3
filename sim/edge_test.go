package main

import "testing"

// At 0.93 of the manager's rate the owner clock is still inside the 65/60
// margin (60/65 ≈ 0.923): no seed may find a violation. Together with the
// 0.90 negative control this brackets the margin from both sides.
func TestOwnerClockAtTheMargin(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		p := paramsFor(seed)
		p.OwnerRates = [2]float64{0.93, 0.93}
		if r := run(p, nil); len(r.Violations) > 0 {
			t.Fatalf("seed %d: %s", seed, r.Violations[0])
		}
	}
}
