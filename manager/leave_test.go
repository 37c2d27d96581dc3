package manager

import (
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
// is dropped as racing: nothing is released; the arcs expire as after a
// crash.
func TestRacingLeaveReleasesNothing(t *testing.T) {
	m := newTestManager(t, 64)
	a, b := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}
	exchange(t, m, t0, a, b)
	before, _ := m.Leases("ns")
	b.held = nil
	b.peerSq-- // it has not heard the manager's latest message
	req := b.request()
	req.Leaving = true
	out, err := m.Request(req, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Commits) != 0 {
		t.Errorf("a racing leave committed %+v", out.Commits)
	}
	after, _ := m.Leases("ns")
	if len(before) != len(after) {
		t.Fatalf("table changed: %d arcs -> %d", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("arc %v changed: %+v -> %+v", before[i].Range, before[i], after[i])
		}
	}
	if s := m.Stats(); s.Leaves != 0 || s.DroppedRacing != 1 {
		t.Errorf("stats = %+v, want no leave, one racing drop", s)
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
