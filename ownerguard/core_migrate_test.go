package ownerguard

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

const testMigAddr = "10.0.0.1:9090"

func withMigration(c *CoreConfig) { c.MigrationAddr = testMigAddr }

func order(r ring.Range, g lease.Gen, peer string) lease.Migration {
	return lease.Migration{Range: r, Gen: g, Peer: peer, PeerAddr: "10.0.0.2:9090"}
}

// The old owner: a migration recall drops the range at once (the checks
// fail before anything is exported), offers it to the named owner, lists
// it as Migrated, and defers its revocation upcall to the shell.
func TestMigrationRecallOffersAfterDropping(t *testing.T) {
	c, m, req := granted(t, withMigration, leaseA, leaseB)
	if req.MigrationAddr != testMigAddr {
		t.Fatalf("request does not name the MigrationService: %+v", req)
	}
	resp := m.reply(req, []lease.Lease{leaseB}, nil)
	resp.MigrateOut = []lease.Migration{order(rangeA, leaseA.Gen, "owner-b")}
	out := c.Step(resp, at(2*time.Second))
	if _, ok := c.GetOwnershipHandle(150, at(2*time.Second)); ok {
		t.Fatal("a range recalled for export is still served")
	}
	if len(out.Offers) != 1 || out.Offers[0].Range != rangeA || out.Offers[0].Gen != leaseA.Gen || out.Offers[0].Peer != "owner-b" {
		t.Fatalf("offers = %+v", out.Offers)
	}
	if want := at(2*time.Second + c.Config().ExportTimeout); !out.Offers[0].Deadline.Equal(want) {
		t.Errorf("offer deadline %v, want %v", out.Offers[0].Deadline, want)
	}
	if len(out.Revoked) != 0 {
		t.Errorf("revoked %v at once; the shell reports it after the export", out.Revoked)
	}
	if out.Send == nil || !eqRanges(out.Send.Migrated, []ring.Range{rangeA}) || !eqLeases(out.Send.Held, []lease.Lease{leaseB}) {
		t.Fatalf("release request = %+v", out.Send)
	}
	// Until a response is accepted, a re-sent request still lists it.
	if again := c.Resend(at(3 * time.Second)).Send; !eqRanges(again.Migrated, []ring.Range{rangeA}) {
		t.Errorf("re-sent request lost Migrated: %+v", again)
	}
}

// A recall naming a range this owner does not hold whole, served, under
// that generation is not offered: there is nothing to export.
func TestMigrationRecallOfWhatIsNotHeldIsPlain(t *testing.T) {
	for name, o := range map[string]lease.Migration{
		"other generation": order(rangeA, leaseA.Gen+1, "owner-b"),
		"wider":            order(rg(50, 200), leaseA.Gen, "owner-b"),
	} {
		c, m, req := granted(t, withMigration, leaseA, leaseB)
		resp := m.reply(req, []lease.Lease{leaseB}, nil)
		resp.MigrateOut = []lease.Migration{o}
		out := c.Step(resp, at(2*time.Second))
		if len(out.Offers) != 0 || len(out.Send.Migrated) != 0 || !eqRanges(out.Revoked, []ring.Range{rangeA}) {
			t.Errorf("%s: offers %+v, migrated %v, revoked %v", name, out.Offers, out.Send.Migrated, out.Revoked)
		}
	}
	// Without a MigrationAddr nothing is ever offered.
	c, m, req := granted(t, nil, leaseA)
	resp := m.reply(req, nil, nil)
	resp.MigrateOut = []lease.Migration{order(rangeA, leaseA.Gen, "owner-b")}
	if out := c.Step(resp, at(2*time.Second)); len(out.Offers) != 0 || len(out.Send.Migrated) != 0 {
		t.Errorf("owner without migration offered: %+v", out)
	}
}

// importGrant grants leaseA as an import and returns the core, the
// manager and the import.
func importGrant(t *testing.T) (*Core, *fakeMgr, Import, *lease.LeaseRequest) {
	t.Helper()
	c := newCore(t, withMigration)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	resp := m.reply(req, nil, []lease.Lease{leaseA, leaseB})
	resp.MigrateIn = []lease.Migration{order(rangeA, leaseA.Gen, "owner-z")}
	out := c.Step(resp, at(time.Second))
	if len(out.Imports) != 1 || out.Imports[0].Range != rangeA || out.Imports[0].Peer != "owner-z" {
		t.Fatalf("imports = %+v", out.Imports)
	}
	if !eqRanges(out.Granted, []ring.Range{rangeB}) {
		t.Errorf("granted upcall %v, want only the plain grant %v", out.Granted, rangeB)
	}
	if out.Send == nil || !eqLeases(out.Send.Held, []lease.Lease{leaseA, leaseB}) {
		t.Fatalf("an import is not confirmed: %+v", out.Send)
	}
	return c, m, out.Imports[0], out.Send
}

// The new owner holds an importing range but serves it only after the
// import, and keeps it importing across renewals and repeated grants.
func TestMigrationImportServesOnlyAfterImport(t *testing.T) {
	c, m, im, req := importGrant(t)
	if _, ok := c.GetOwnershipHandle(150, at(time.Second)); ok {
		t.Fatal("an importing range is served")
	}
	if _, ok := c.GetOwnershipHandle(350, at(time.Second)); !ok {
		t.Fatal("the plain grant is not served")
	}
	// The grant repeated (our confirmation crossed it), then renewed.
	resp := m.reply(req, []lease.Lease{leaseB}, []lease.Lease{leaseA})
	resp.MigrateIn = []lease.Migration{order(rangeA, leaseA.Gen, "owner-z")}
	out := c.Step(resp, at(1500*time.Millisecond))
	if len(out.Imports) != 0 || len(out.Granted) != 0 {
		t.Errorf("a repeated grant restarted the import: %+v", out)
	}
	c.Step(m.reply(c.Resend(at(1600*time.Millisecond)).Send, []lease.Lease{leaseA, leaseB}, nil), at(1700*time.Millisecond))
	if _, ok := c.GetOwnershipHandle(150, at(1700*time.Millisecond)); ok {
		t.Fatal("a renewal made an importing range served")
	}
	out = c.Imported(im.Range, im.Gen, true, at(1800*time.Millisecond))
	if !eqRanges(out.Granted, []ring.Range{rangeA}) || out.Send != nil {
		t.Fatalf("import done: %+v", out)
	}
	if h, ok := c.GetOwnershipHandle(150, at(1800*time.Millisecond)); !ok || h.Gen != leaseA.Gen {
		t.Fatal("imported range not served under its grant's generation")
	}
	if s := c.MigrationStats(); s.Imports != 1 || s.Imported != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A failed import drops the range and releases it at once: never served.
func TestMigrationImportFailureReleases(t *testing.T) {
	c, _, im, _ := importGrant(t)
	out := c.Imported(im.Range, im.Gen, false, at(1500*time.Millisecond))
	if out.Send == nil || !eqLeases(out.Send.Held, []lease.Lease{leaseB}) || len(out.Granted)+len(out.Revoked) != 0 {
		t.Fatalf("failed import: %+v", out)
	}
	if _, ok := c.GetOwnershipHandle(150, at(1500*time.Millisecond)); ok {
		t.Fatal("a failed import is served")
	}
	if out := c.Imported(im.Range, im.Gen, true, at(1600*time.Millisecond)); len(out.Granted) != 0 {
		t.Errorf("a late success after the failure served it: %+v", out)
	}
}

// An import not done by its deadline is given up in Tick.
func TestMigrationImportTimesOut(t *testing.T) {
	c, _, im, _ := importGrant(t)
	if want := at(time.Second + 2*time.Second); !im.Deadline.Equal(want) { // min(T/2, 2 s)
		t.Fatalf("deadline %v, want %v", im.Deadline, want)
	}
	if d := c.NextDeadline(); !d.Equal(im.Deadline) {
		t.Errorf("NextDeadline %v, want the import deadline %v", d, im.Deadline)
	}
	if out := c.Tick(im.Deadline.Add(-1)); out.Send != nil {
		t.Errorf("gave up before the deadline: %+v", out)
	}
	out := c.Tick(im.Deadline)
	if out.Send == nil || !eqLeases(out.Send.Held, []lease.Lease{leaseB}) {
		t.Fatalf("timeout did not release: %+v", out)
	}
	if _, ok := c.GetOwnershipHandle(150, im.Deadline); ok {
		t.Fatal("a timed-out import is served")
	}
	if s := c.MigrationStats(); s.ImportsTimedOut != 1 {
		t.Errorf("stats %+v", s)
	}
}

// Handover asks to leave with the state; it needs a MigrationAddr.
func TestMigrationHandover(t *testing.T) {
	c, _, _ := granted(t, withMigration, leaseA)
	out := c.Handover(at(2 * time.Second))
	if out.Send == nil || !out.Send.Handover || !eqLeases(out.Send.Held, []lease.Lease{leaseA}) {
		t.Fatalf("handover request %+v", out.Send)
	}
	c2, _, _ := granted(t, nil, leaseA)
	if out := c2.Handover(at(2 * time.Second)); out.Send != nil {
		t.Errorf("handover without migration sent %+v", out.Send)
	}
}

// A grant merged with an adjacent grant of the same generation may be part
// import, part plain: only the part an order names waits for its state.
func TestMigrationImportOnlyWhatTheOrderNames(t *testing.T) {
	c := newCore(t, withMigration)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	resp := m.reply(req, nil, []lease.Lease{ls(rg(100, 200), 7), ls(rg(200, 300), 7)})
	resp.MigrateIn = []lease.Migration{order(rg(100, 200), 7, "owner-z")}
	out := c.Step(resp, at(time.Second))
	if len(out.Imports) != 1 || !eqRanges(out.Granted, []ring.Range{rg(200, 300)}) {
		t.Fatalf("imports %+v, granted %v", out.Imports, out.Granted)
	}
	if _, ok := c.GetOwnershipHandle(150, at(time.Second)); ok {
		t.Error("the import is served")
	}
	if _, ok := c.GetOwnershipHandle(250, at(time.Second)); !ok {
		t.Error("the plain grant next to it waits for an import")
	}
}

// A range released as migrated stays listed while the manager still
// recalls it: the response accepted may acknowledge a request the manager
// dropped as racing, and omitting the range unlisted would release it
// plainly.
func TestMigrationMigratedListedUntilReleased(t *testing.T) {
	c, m, req := granted(t, withMigration, leaseA, leaseB)
	resp := m.reply(req, []lease.Lease{leaseB}, nil)
	resp.MigrateOut = []lease.Migration{order(rangeA, leaseA.Gen, "owner-b")}
	out := c.Step(resp, at(2*time.Second))
	// The manager dropped that request; its re-send still recalls A.
	resp = m.reply(out.Send, []lease.Lease{leaseB}, nil)
	resp.MigrateOut = []lease.Migration{order(rangeA, leaseA.Gen, "owner-b")}
	c.Step(resp, at(3*time.Second))
	if req := c.Resend(at(4 * time.Second)).Send; !eqRanges(req.Migrated, []ring.Range{rangeA}) {
		t.Fatalf("Migrated dropped while the manager still recalls it: %+v", req.Migrated)
	}
	// Released: the next response no longer recalls it.
	c.Step(m.reply(c.Resend(at(5*time.Second)).Send, []lease.Lease{leaseB}, nil), at(5*time.Second))
	if req := c.Resend(at(6 * time.Second)).Send; len(req.Migrated) != 0 {
		t.Errorf("Migrated still listed after the release: %+v", req.Migrated)
	}
}
