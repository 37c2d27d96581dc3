package manager

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// migOwner is the unit tests' owner (core_test.go) that serves
// MigrationService: it follows migration orders the way ownerguard's Core
// does (release what MigrateOut names as migrated), and records what it
// was told.
type migOwner struct {
	owner
	migAddr string
	// refuseExport: release recalled ranges plainly even when ordered to
	// migrate them (an owner whose application cannot export).
	refuseExport bool
	out, in      []lease.Migration // the last accepted orders
	migrated     []ring.Range      // to list in the next request
	handover     bool
}

func newMigOwner(name string, nonce uint64) *migOwner {
	return &migOwner{owner: owner{name: name, nonce: nonce}, migAddr: "127.0.0.1:" + map[string]string{"a": "901", "b": "902", "c": "903"}[name]}
}

func (o *migOwner) req() lease.LeaseRequest {
	r := o.request(o.migrated...)
	o.migrated = nil
	r.MigrationAddr, r.Handover = o.migAddr, o.handover
	return r
}

// take applies the owner's response in out, if any: keep renewals and
// grants, and list what MigrateOut named as migrated.
func (o *migOwner) take(out Output) bool {
	got := false
	for _, r := range out.Send {
		if r.Owner != o.name {
			continue
		}
		got = true
		o.peer, o.peerSq = r.Nonce, r.Seq
		o.held = append(append([]lease.Lease(nil), r.Renew...), r.Grant...)
		o.out, o.in = r.MigrateOut, r.MigrateIn
		if !o.refuseExport {
			for _, m := range r.MigrateOut {
				o.migrated = append(o.migrated, m.Range)
			}
		}
	}
	return got
}

func migExchange(t *testing.T, m *Manager, now time.Time, os ...*migOwner) []lease.Change {
	t.Helper()
	var changes []lease.Change
	for range 6 {
		for _, o := range os {
			out, err := m.Request(o.req(), now)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range out.Commits {
				changes = append(changes, c.Changes...)
			}
			for _, p := range os {
				p.take(out)
			}
		}
	}
	return changes
}

func TestMigrationDrainHandsOverWithState(t *testing.T) {
	m := newTestManager(t, 16)
	a, b := newMigOwner("a", 1), newMigOwner("b", 2)
	migExchange(t, m, t0, a, b)
	aHeld := append([]lease.Lease(nil), a.held...)
	out, err := m.Drain("ns", "a", t0)
	if err != nil {
		t.Fatal(err)
	}
	if !a.take(out) || len(a.out) == 0 {
		t.Fatalf("drain sent a no migration orders: %+v", out.Send)
	}
	for _, mo := range a.out {
		if mo.Peer != "b" || mo.PeerAddr != b.migAddr {
			t.Errorf("order %+v does not name b at %s", mo, b.migAddr)
		}
	}
	if b.take(out) && len(b.in) > 0 {
		t.Fatalf("b was told to import before a released anything: %+v", b.in)
	}
	// Never two owners: nothing of a's was granted to b before a released.
	for _, r := range out.Send {
		if r.Owner == "b" && len(r.Grant) > 0 {
			t.Fatalf("b granted %v while a still holds it", r.Grant)
		}
	}
	// a releases everything as migrated.
	a.held = nil
	out, err = m.Request(a.req(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if !b.take(out) || len(b.in) == 0 {
		t.Fatalf("b got no import orders: %+v", out.Send)
	}
	for _, mi := range b.in {
		if mi.Peer != "a" || mi.PeerAddr != a.migAddr {
			t.Errorf("import %+v does not name a at %s", mi, a.migAddr)
		}
	}
	var ch []lease.Change
	for _, c := range out.Commits {
		ch = append(ch, c.Changes...)
	}
	if len(ch) == 0 {
		t.Fatal("release committed nothing")
	}
	for _, c := range ch {
		if c.Entry.Owner != "b" || !c.Clean || c.Entry.MigratedFrom == 0 || c.Entry.MigratedFrom >= c.Entry.Gen {
			t.Errorf("change %+v: want b's, clean, migrated from an older generation", c)
		}
		if g, ok := genOf(aHeld, c.Entry.Range.End); !ok || g != c.Entry.MigratedFrom {
			t.Errorf("change %+v migrated from %d, a held it under %d", c, c.Entry.MigratedFrom, g)
		}
	}
	// Once b lists them, they are renewals, and the order is gone.
	migExchange(t, m, t0, b)
	if len(b.in) != 0 {
		t.Errorf("import orders repeated after b confirmed: %+v", b.in)
	}
	if s := m.Stats(); s.MigrationsGranted == 0 || s.MigrationsFallenBack != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func genOf(ls []lease.Lease, h uint64) (lease.Gen, bool) {
	for _, l := range ls {
		if l.Range.Contains(h) {
			return l.Gen, true
		}
	}
	return 0, false
}

// An owner that releases without being asked to migrate, or that cannot
// export, hands over plainly: nobody imports, so lookups must notify.
func TestMigrationUnorderedOrRefusedIsPlain(t *testing.T) {
	t.Run("unordered", func(t *testing.T) {
		m := newTestManager(t, 8)
		a := newMigOwner("a", 1)
		migExchange(t, m, t0, a)
		a.held = nil
		a.migrated = []ring.Range{ring.Full()}
		out, err := m.Request(a.req(), t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range out.Commits[0].Changes {
			if c.Clean || c.Entry.MigratedFrom != 0 {
				t.Errorf("change %+v after an unordered migrated release is clean", c)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		m := newTestManager(t, 16)
		a, b := newMigOwner("a", 1), newMigOwner("b", 2)
		migExchange(t, m, t0, a, b)
		a.refuseExport = true
		out, _ := m.Drain("ns", "a", t0)
		a.take(out)
		a.held = nil
		out, err := m.Request(a.req(), t0)
		if err != nil {
			t.Fatal(err)
		}
		b.take(out)
		if len(b.in) != 0 {
			t.Errorf("b told to import what a released plainly: %+v", b.in)
		}
		for _, c := range out.Commits[0].Changes {
			if c.Clean || c.Entry.MigratedFrom != 0 {
				t.Errorf("change %+v is clean", c)
			}
		}
	})
	t.Run("no migration address", func(t *testing.T) {
		m := newTestManager(t, 16)
		a, b := newMigOwner("a", 1), newMigOwner("b", 2)
		b.migAddr = ""
		migExchange(t, m, t0, a, b)
		out, _ := m.Drain("ns", "a", t0)
		a.take(out)
		if len(a.out) != 0 {
			t.Errorf("recall to an owner without MigrationService flagged: %+v", a.out)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		m := newTestManager(t, 16)
		m.cfg.DisableMigration = true
		a, b := newMigOwner("a", 1), newMigOwner("b", 2)
		migExchange(t, m, t0, a, b)
		out, _ := m.Drain("ns", "a", t0)
		a.take(out)
		if len(a.out) != 0 {
			t.Errorf("DisableMigration: recall flagged: %+v", a.out)
		}
	})
}

// A migration recall the old owner never answers (it crashed) expires like
// any other: the arcs are freed plainly and granted without an import.
func TestMigrationRecallExpiryIsPlain(t *testing.T) {
	m := newTestManager(t, 16)
	a, b := newMigOwner("a", 1), newMigOwner("b", 2)
	migExchange(t, m, t0, a, b)
	out, _ := m.Drain("ns", "a", t0)
	a.take(out)
	if len(a.out) == 0 {
		t.Fatal("no migration recall")
	}
	// b keeps renewing; a is silent.
	now := t0
	var changes []lease.Change
	for now.Before(t0.Add(70 * time.Second)) {
		now = now.Add(15 * time.Second)
		changes = append(changes, migExchange(t, m, now, b)...)
		out := m.Tick(now)
		for _, c := range out.Commits {
			changes = append(changes, c.Changes...)
		}
		b.take(out)
		if len(b.in) != 0 {
			t.Fatalf("b told to import from a crashed owner: %+v", b.in)
		}
	}
	lost := false
	for _, c := range changes {
		if c.Clean || c.Entry.MigratedFrom != 0 {
			t.Errorf("change %+v after a crash is clean", c)
		}
		lost = lost || c.Entry.Owner == "b"
	}
	if !lost {
		t.Error("a's arcs never went to b")
	}
}

// A new owner whose import failed releases the range plainly: the manager
// regrants it under a new generation that continues nothing, which
// lookups notify.
func TestMigrationImportFailureRegrantsWithLoss(t *testing.T) {
	m := newTestManager(t, 16)
	a, b := newMigOwner("a", 1), newMigOwner("b", 2)
	migExchange(t, m, t0, a, b)
	out, _ := m.Drain("ns", "a", t0)
	a.take(out)
	a.held = nil
	out, _ = m.Request(a.req(), t0)
	b.take(out)
	if len(b.in) == 0 {
		t.Fatal("no import")
	}
	failed := b.in[0]
	// b took it (its next request lists it, which confirms the grant),
	// then its import failed.
	out, err := m.Request(b.req(), t0)
	if err != nil {
		t.Fatal(err)
	}
	b.take(out)
	var kept []lease.Lease
	for _, l := range b.held {
		if l.Range != failed.Range {
			kept = append(kept, l)
		}
	}
	b.held = kept
	out, err = m.Request(b.req(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Commits) == 0 {
		t.Fatal("failed import changed nothing")
	}
	for _, c := range out.Commits[0].Changes {
		if c.Clean || c.Entry.MigratedFrom != 0 || c.Entry.Gen <= failed.Gen {
			t.Errorf("change %+v after a failed import: want a newer generation, not clean", c)
		}
	}
	b.take(out)
	if len(b.in) != 0 {
		t.Errorf("regrant is an import again: %+v", b.in)
	}
}

// An owner that asks for a handover (Owner.Close with a Migrator) is
// drained with migration orders.
func TestMigrationHandoverRequest(t *testing.T) {
	m := newTestManager(t, 16)
	a, b := newMigOwner("a", 1), newMigOwner("b", 2)
	migExchange(t, m, t0, a, b)
	a.handover = true
	out, err := m.Request(a.req(), t0)
	if err != nil {
		t.Fatal(err)
	}
	a.take(out)
	if len(a.out) == 0 || len(a.held) != 0 {
		t.Fatalf("handover: orders %+v, still held %+v", a.out, a.held)
	}
	if ow, _ := m.Owners("ns"); len(ow) != 2 || !ow[0].Draining {
		t.Errorf("owners after handover = %+v", ow)
	}
}

// An import grant the new owner never took (it dropped the response as
// racing, and its next request, acknowledging that response, omits it)
// stays granted and is sent again, rather than regranted under a new
// generation with a loss notification.
func TestMigrationUntakenImportIsKept(t *testing.T) {
	m := newTestManager(t, 16)
	a, b := newMigOwner("a", 1), newMigOwner("b", 2)
	migExchange(t, m, t0, a, b)
	out, _ := m.Drain("ns", "a", t0)
	a.take(out)
	a.held = nil
	out, _ = m.Request(a.req(), t0)
	var grant lease.LeaseResponse
	for _, r := range out.Send {
		if r.Owner == "b" {
			grant = r
		}
	}
	if len(grant.MigrateIn) == 0 {
		t.Fatal("no import")
	}
	// b drops it as racing but acknowledges it: its request omits it.
	b.peer, b.peerSq = grant.Nonce, grant.Seq
	out, err := m.Request(b.req(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Commits) != 0 {
		t.Fatalf("an untaken import was regranted: %+v", out.Commits)
	}
	if !b.take(out) || len(b.in) != len(grant.MigrateIn) || b.in[0] != grant.MigrateIn[0] {
		t.Fatalf("the import is not sent again: %+v", b.in)
	}
	// A draining owner releases even an untaken import.
	m2 := newTestManager(t, 16)
	a2, b2, c2 := newMigOwner("a", 1), newMigOwner("b", 2), newMigOwner("c", 3)
	migExchange(t, m2, t0, a2, b2, c2)
	out, _ = m2.Drain("ns", "a", t0)
	a2.take(out)
	if b2.take(out) {
		// b answers the recall the drain sent it (the manager holds
		// its next message, the import, until b does: deferMessage).
		out, _ = m2.Request(b2.req(), t0)
		b2.take(out)
	}
	a2.held = nil
	out, _ = m2.Request(a2.req(), t0)
	b2.take(out)
	if len(b2.in) == 0 {
		t.Fatal("no import to b")
	}
	if _, err := m2.Drain("ns", "b", t0); err != nil {
		t.Fatal(err)
	}
	b2.held = nil
	out, err = m2.Request(b2.req(), t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Send {
		if r.Owner == "b" && (len(r.Grant) > 0 || len(r.Renew) > 0) {
			t.Errorf("a draining owner keeps %v %v", r.Grant, r.Renew)
		}
	}
}
