package migration

import (
	"context"
	"testing"
	"time"
)

// TestDrainShort is make test's short form of make bench-migration: a small
// pool, drained with migration off and on. It asserts counts, never times.
func TestDrainShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, on := range []bool{false, true} {
		res, err := Drain(ctx, Config{Servers: 3, Devices: 300, Readers: 2, RingSize: 256, T: 2 * time.Second, Migration: on, Seed: 1, Logf: t.Logf})
		if err != nil {
			t.Fatalf("migration=%v: %v", on, err)
		}
		t.Log(res.Line())
		if res.OnDrained == 0 {
			t.Fatalf("migration=%v: the drained server held no device", on)
		}
		if res.Missing != 0 {
			t.Errorf("migration=%v: %d devices missing after the drain", on, res.Missing)
		}
		switch {
		case !on && res.Republished < res.OnDrained:
			t.Errorf("without migration %d devices republished, fewer than the %d the drained server held", res.Republished, res.OnDrained)
		case on && (res.Republished != 0 || res.LostReads != 0 || res.LossNotifications != 0):
			t.Errorf("with migration: %d republished, %d lost reads, %d loss notifications; want none", res.Republished, res.LostReads, res.LossNotifications)
		}
	}
}
