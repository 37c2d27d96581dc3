package manager_test

import (
	"context"
	"testing"
)

// TestStandbyServesLookups checks that a standby in contact with the
// leader admits Lookup streams and heartbeats its namespaces, and that the
// leader's standby loop does not heartbeat (its own loop does).
func TestStandbyServesLookups(t *testing.T) {
	a := startNode(t, "n1", "", nil)
	eventually(t, "leadership", a.IsLeader)
	_, _, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	eventually(t, "n2 to hear from the leader", b.ServesLookups)
	if err := b.CheckLookup(context.Background()); err != nil {
		t.Fatalf("standby refuses a Lookup: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	beats := func(s interface {
		RunStandbyHeartbeats(context.Context, func() []string, func(string))
	}) chan string {
		ch := make(chan string, 64)
		go s.RunStandbyHeartbeats(ctx, func() []string { return []string{"ns"} }, func(ns string) {
			select {
			case ch <- ns:
			default:
			}
		})
		return ch
	}
	fromA, fromB := beats(a), beats(b)
	select {
	case ns := <-fromB:
		if ns != "ns" {
			t.Errorf("standby heartbeat for %q", ns)
		}
	case <-ctx.Done():
		t.Fatal("no heartbeat from the standby")
	}
	// Two more of the standby's heartbeats: the leader's loop had as long.
	for range 2 {
		select {
		case <-fromB:
		case <-ctx.Done():
			t.Fatal("the standby's heartbeats stopped")
		}
	}
	select {
	case <-fromA:
		t.Error("the leader's standby loop heartbeats")
	default:
	}
}
