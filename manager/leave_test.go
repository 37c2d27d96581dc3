package manager

import (
	"slices"
	"testing"
	"time"
)

// A leaving request frees the owner's arcs and grants them to the others in
// the one Output that accepts it: committed first, then told.
func TestLeaveRegrantsInOneStep(t *testing.T) {
	m := newTestManager(t, 64)
	a, b := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}
	exchange(t, m, t0, a, b)
	if len(b.held) == 0 {
		t.Fatal("b holds nothing before it leaves")
	}
	now := t0.Add(10 * time.Second)
	b.held = nil
	req := b.request()
	req.Leaving = true
	out, err := m.Request(req, now)
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]bool{}
	for _, c := range out.Commits {
		for _, ch := range c.Changes {
			committed[ch.Entry.Owner] = true
		}
	}
	if !committed["a"] || committed["b"] || committed[""] {
		t.Errorf("commits %+v, want every change to a (none free, none to b)", out.Commits)
	}
	var toA bool
	for _, r := range out.Send {
		toA = toA || (r.Owner == "a" && len(r.Grant) > 0)
	}
	if !toA {
		t.Errorf("sends %+v, want a grant to a in the same output", out.Send)
	}
	arcs, _ := m.Leases("ns")
	for _, x := range arcs {
		if x.State != Granted || x.Owner != "a" {
			t.Fatalf("arc %v: %v by %q, want granted to a", x.Range, x.State, x.Owner)
		}
	}
	owners, _ := m.Owners("ns")
	if len(owners) != 2 || !owners[1].Draining || owners[1].VNodes != 0 || owners[0].VNodes != 64 {
		t.Errorf("owners = %+v, want b draining with no share", owners)
	}
	if s := m.Stats(); s.Leaves != 1 || s.DroppedRacing != 0 {
		t.Errorf("stats = %+v, want one leave, no racing drop", s)
	}
}

// A leaving request that does not acknowledge the manager's latest message
// is taken as a leave all the same (a leaving owner believes nothing, so
// its empty Held is true whatever it has not seen), and as nothing more:
// the ranges it lists as Migrated are plain releases, under new
// generations that continue nothing. The same request without Leaving is
// dropped as racing and changes nothing.
func TestRacingLeaveIsALeave(t *testing.T) {
	m := newTestManager(t, 64)
	a, b := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}
	exchange(t, m, t0, a, b)
	if len(b.held) == 0 {
		t.Fatal("b holds nothing before it leaves")
	}
	migrated := b.held[0].Range
	before, _ := m.Leases("ns")
	b.held = nil
	b.peerSq-- // it has not heard the manager's latest message

	// Not leaving: dropped, nothing changes.
	out, err := m.Request(b.request(), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Commits) != 0 {
		t.Errorf("a racing renewal committed %+v", out.Commits)
	}
	if after, _ := m.Leases("ns"); !slices.Equal(before, after) {
		t.Fatalf("a racing renewal changed the table: %+v -> %+v", before, after)
	}
	if s := m.Stats(); s.Leaves != 0 || s.DroppedRacing != 1 {
		t.Errorf("stats = %+v, want no leave, one racing drop", s)
	}

	// Leaving, listing a range as migrated, still racing: a leave.
	req := b.request(migrated)
	req.Leaving = true
	out, err = m.Request(req, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var changes int
	for _, c := range out.Commits {
		for _, ch := range c.Changes {
			changes++
			if ch.Entry.Owner != "a" || ch.Entry.MigratedFrom != 0 || ch.Clean {
				t.Errorf("change %+v, want a plain grant to a", ch)
			}
		}
	}
	if changes == 0 {
		t.Error("a racing leave committed nothing")
	}
	arcs, _ := m.Leases("ns")
	for _, x := range arcs {
		if x.State != Granted || x.Owner != "a" {
			t.Fatalf("arc %v: %v by %q, want granted to a", x.Range, x.State, x.Owner)
		}
	}
	owners, _ := m.Owners("ns")
	if len(owners) != 2 || !owners[1].Draining || owners[1].VNodes != 0 {
		t.Errorf("owners = %+v, want b draining with no share", owners)
	}
	if s := m.Stats(); s.Leaves != 1 || s.AcceptedRacingLeaves != 1 || s.DroppedRacing != 1 || s.MigrationsReleased != 0 {
		t.Errorf("stats = %+v, want one leave (racing), one racing drop (the renewal), no migration", s)
	}
}

// A new incarnation of a drained (or departed) owner is not draining: it
// gets its share back.
func TestRestartAfterDrainRejoins(t *testing.T) {
	m := newTestManager(t, 64)
	a, b := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}
	exchange(t, m, t0, a, b)
	out, err := m.Drain("ns", "b", t0)
	if err != nil {
		t.Fatal(err)
	}
	a.accept(out)
	b.accept(out)
	exchange(t, m, t0, a, b)
	if len(b.held) != 0 {
		t.Fatalf("drained b holds %v", b.held)
	}
	b2 := &owner{name: "b", nonce: 3}
	exchange(t, m, t0.Add(time.Second), a, b2)
	owners, _ := m.Owners("ns")
	if len(owners) != 2 || owners[1].Draining || owners[1].VNodes == 0 {
		t.Errorf("owners = %+v, want the new b in the ring", owners)
	}
	if len(b2.held) == 0 {
		t.Error("the new incarnation of b holds nothing")
	}
}
