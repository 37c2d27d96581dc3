package manager

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestManager(t *testing.T, r int) *Manager {
	t.Helper()
	cfg := DefaultConfig()
	// The tests read in minutes: Centrifuge's T = 60 s, not the default.
	cfg.LeaseDuration, cfg.RaceBackoffMin, cfg.RaceBackoffMax = 60*time.Second, 100*time.Millisecond, time.Second
	cfg.Nonce = 7
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CreateNamespace(NamespaceConfig{Name: "ns", RingSize: r}, t0); err != nil {
		t.Fatal(err)
	}
	return m
}

// owner is a minimal, well-behaved peer for unit tests: it accepts what the
// manager sends and echoes its holdings. The real Owner core is exercised by
// the golden scripts and the simulator.
type owner struct {
	name         string
	nonce, seq   uint64
	peer, peerSq uint64
	held         []lease.Lease
}

func (o *owner) request(migrated ...ring.Range) lease.LeaseRequest {
	o.seq++
	return lease.LeaseRequest{
		Namespace: "ns", Owner: o.name, Addr: o.name + ":1",
		Header:   lease.Header{Nonce: o.nonce, Seq: o.seq, PeerNonce: o.peer, AckSeq: o.peerSq},
		Held:     o.held,
		Migrated: migrated,
	}
}

func (o *owner) accept(out Output) {
	for _, r := range out.Send {
		if r.Owner != o.name {
			continue
		}
		o.peer, o.peerSq = r.Nonce, r.Seq
		o.held = append(append([]lease.Lease(nil), r.Renew...), r.Grant...)
	}
}

// exchange runs request/response rounds for the owners until quiet.
func exchange(t *testing.T, m *Manager, now time.Time, os ...*owner) {
	t.Helper()
	for round := 0; round < 6; round++ {
		for _, o := range os {
			out, err := m.Request(o.request(), now)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range os {
				p.accept(out)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"zero nonce":         func(c *Config) { c.Nonce = 0 },
		"zero lease":         func(c *Config) { c.LeaseDuration = 0 },
		"negative retention": func(c *Config) { c.LogRetention = -1 },
		"backoff reversed":   func(c *Config) { c.RaceBackoffMin, c.RaceBackoffMax = 2, 1 },
		"backoff too large":  func(c *Config) { c.RaceBackoffMax = c.LeaseDuration },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", name, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if got := HoldDuration(60 * time.Second); got != 65*time.Second {
		t.Errorf("HoldDuration(60s) = %v, want 65s", got)
	}
}

func TestNamespaceErrors(t *testing.T) {
	m := newTestManager(t, 8)
	if err := m.CreateNamespace(NamespaceConfig{Name: "ns"}, t0); !errors.Is(err, ErrNamespaceExists) {
		t.Errorf("duplicate namespace: %v", err)
	}
	if err := m.CreateNamespace(NamespaceConfig{Name: "x", RingSize: 100}, t0); !errors.Is(err, ErrBadRequest) || !errors.Is(err, ring.ErrRingSize) {
		t.Errorf("ring size 100: %v", err)
	}
	if err := m.CreateNamespace(NamespaceConfig{}, t0); !errors.Is(err, ErrBadRequest) {
		t.Errorf("empty name: %v", err)
	}
	if _, err := m.Request(lease.LeaseRequest{Namespace: "nope", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1}}, t0); !errors.Is(err, ErrUnknownNamespace) {
		t.Errorf("unknown namespace: %v", err)
	}
	if _, err := m.Lookup(lease.LookupRequest{Namespace: "nope"}, t0); !errors.Is(err, ErrUnknownNamespace) {
		t.Errorf("lookup unknown namespace: %v", err)
	}
	if err := m.DeleteNamespace("nope"); !errors.Is(err, ErrUnknownNamespace) {
		t.Errorf("delete unknown: %v", err)
	}
	ns := m.Namespaces()
	if len(ns) != 1 || ns[0].RingSize != 8 || ns[0].Header != "X-Fuge-Key" || ns[0].LeaseDuration != time.Minute {
		t.Errorf("Namespaces() = %+v", ns)
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	m := newTestManager(t, 8)
	before, _ := m.Leases("ns")
	for name, req := range map[string]lease.LeaseRequest{
		"no owner": {Namespace: "ns", Header: lease.Header{Nonce: 1, Seq: 1}},
		"no nonce": {Namespace: "ns", Owner: "a", Header: lease.Header{Seq: 1}},
		"no seq":   {Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1}},
		"leaving, holding": {Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1}, Leaving: true,
			Held: []lease.Lease{{Range: ring.Range{Start: 10, End: 100}, Gen: 1}}},
		"overlapping held": {Namespace: "ns", Owner: "a", Header: lease.Header{Nonce: 1, Seq: 1},
			Held: []lease.Lease{{Range: ring.Range{Start: 10, End: 100}, Gen: 1}, {Range: ring.Range{Start: 50, End: 60}, Gen: 1}}},
	} {
		if _, err := m.Request(req, t0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err = %v, want ErrBadRequest", name, err)
		}
	}
	after, _ := m.Leases("ns")
	if len(before) != len(after) || before[0] != after[0] {
		t.Errorf("a rejected request changed the table: %+v -> %+v", before, after)
	}
	if o, _ := m.Owners("ns"); len(o) != 0 {
		t.Errorf("a rejected request opened a session: %+v", o)
	}
}

func TestTwoOwnersSplitTheRing(t *testing.T) {
	m := newTestManager(t, 64)
	a, b := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}
	exchange(t, m, t0, a, b)
	d, _ := m.DesiredRing("ns")
	arcs, _ := m.Leases("ns")
	for _, x := range arcs {
		if x.State != Granted || x.Owner != d.LookupOwner(x.Range.End) {
			t.Fatalf("arc %v: %v by %q, want granted to %q", x.Range, x.State, x.Owner, d.LookupOwner(x.Range.End))
		}
		if want := t0.Add(65 * time.Second); !x.Expiry.Equal(want) {
			t.Errorf("arc %v expires %v, want %v", x.Range, x.Expiry, want)
		}
	}
	owners, _ := m.Owners("ns")
	if len(owners) != 2 || owners[0].VNodes+owners[1].VNodes != 64 {
		t.Errorf("owners = %+v", owners)
	}
}

func TestExpiryFreesUnderNewGeneration(t *testing.T) {
	m := newTestManager(t, 8)
	a := &owner{name: "a", nonce: 1}
	exchange(t, m, t0, a)
	if d := m.NextDeadline(); !d.Equal(t0.Add(65 * time.Second)) {
		t.Errorf("NextDeadline = %v, want hold end", d)
	}
	out := m.Tick(t0.Add(65*time.Second - 1))
	if !out.Empty() {
		t.Errorf("tick before the hold ends did something: %+v", out)
	}
	out = m.Tick(t0.Add(65 * time.Second))
	if len(out.Commits) != 1 {
		t.Fatalf("expiry changes = %+v", out.Commits)
	}
	c := out.Commits[0].Changes[0]
	if c.Entry.Owner != "" || c.Entry.Gen <= 1 || c.Clean {
		t.Errorf("expiry change = %+v, want free under a new generation, not clean", c)
	}
	if s := m.Stats(); s.Expiries == 0 || s.SessionExpiries != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestLookupDeltaOrSnapshot(t *testing.T) {
	m := newTestManager(t, 16)
	first, _ := m.Lookup(lease.LookupRequest{Namespace: "ns"}, t0)
	if !first.Snapshot || len(first.Entries) != 1 || first.Entries[0].Gen != 1 {
		t.Fatalf("first answer = %+v, want the one free arc as a snapshot", first)
	}
	a := &owner{name: "a", nonce: 1}
	exchange(t, m, t0, a)
	lsn, _ := m.LSN("ns")
	delta, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: first.LSN}, t0)
	if delta.Snapshot || delta.FromLSN != first.LSN || delta.LSN != lsn || len(delta.Changes) == 0 {
		t.Fatalf("delta = %+v", delta)
	}
	for i, c := range delta.Changes {
		if c.LSN != first.LSN+uint64(i)+1 {
			t.Errorf("change %d has LSN %d", i, c.LSN)
		}
	}
	other, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 99, LSN: first.LSN}, t0)
	if !other.Snapshot {
		t.Error("a lookup that knew another manager incarnation got a delta")
	}
	future, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: lsn + 5}, t0)
	if !future.Snapshot {
		t.Error("a lookup claiming a future LSN got a delta")
	}
	// After the retention, the log is truncated: the old LSN gets a snapshot.
	later := t0.Add(5*time.Minute + time.Second)
	m.Tick(later)
	trunc, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: first.LSN}, later)
	if !trunc.Snapshot {
		t.Errorf("LSN %d behind a truncated log got a delta: %+v", first.LSN, trunc)
	}
	// Nothing new since lsn: an empty delta, not a snapshot.
	cur, _ := m.LSN("ns")
	same, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: cur}, later)
	if same.Snapshot || len(same.Changes) != 0 {
		t.Errorf("an up-to-date lookup got %+v", same)
	}
}

// With LogRetention 0 (fuge-manager's default: its lookups use xDS) the
// core numbers changes but keeps none, in its log or in the replicated
// state: a lookup behind gets a snapshot, one up to date an empty delta.
func TestZeroRetentionKeepsNoLog(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LeaseDuration, cfg.RaceBackoffMin, cfg.RaceBackoffMax = 60*time.Second, 100*time.Millisecond, time.Second
	cfg.Nonce, cfg.LogRetention = 7, 0
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CreateNamespace(NamespaceConfig{Name: "ns", RingSize: 16}, t0); err != nil {
		t.Fatal(err)
	}
	first, _ := m.Lookup(lease.LookupRequest{Namespace: "ns"}, t0)
	st, _ := m.State("ns")
	var commits []Commit
	a := &owner{name: "a", nonce: 1}
	for range 6 {
		out, err := m.Request(a.request(), t0)
		if err != nil {
			t.Fatal(err)
		}
		a.accept(out)
		commits = append(commits, out.Commits...)
	}
	lsn, _ := m.LSN("ns")
	if lsn <= first.LSN {
		t.Fatalf("LSN %d after a grant, %d before", lsn, first.LSN)
	}
	if n := m.ns["ns"]; len(n.log.entries) != 0 {
		t.Errorf("the core's log holds %d changes", len(n.log.entries))
	}
	behind, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: first.LSN}, t0)
	if !behind.Snapshot || behind.LSN != lsn {
		t.Errorf("a lookup behind got %+v, want a snapshot at LSN %d", behind, lsn)
	}
	same, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: lsn}, t0)
	if same.Snapshot || len(same.Changes) != 0 {
		t.Errorf("an up-to-date lookup got %+v", same)
	}
	// The replicated state folds the same commits: LSN on, no log.
	for _, c := range commits {
		if err := st.Apply(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	if st.LSN != lsn || len(st.Log) != 0 {
		t.Errorf("state at LSN %d with %d logged changes, want %d and none", st.LSN, len(st.Log), lsn)
	}
}

func TestSnapshotWhenSmallerThanChanges(t *testing.T) {
	m := newTestManager(t, 64)
	first, _ := m.Lookup(lease.LookupRequest{Namespace: "ns"}, t0)
	// Many owners come and go: far more changes than arcs in the end.
	var all []*owner
	for i := range 6 {
		all = append(all, &owner{name: string(rune('a' + i)), nonce: uint64(i + 1)})
		exchange(t, m, t0, all...)
	}
	view, _ := m.View("ns")
	resp, _ := m.Lookup(lease.LookupRequest{Namespace: "ns", ManagerNonce: 7, LSN: first.LSN}, t0)
	lsn, _ := m.LSN("ns")
	if lsn-first.LSN > uint64(len(view)) && !resp.Snapshot {
		t.Errorf("%d changes against a %d-entry table, and the answer is a delta", lsn-first.LSN, len(view))
	}
}

func TestLateMessageFromEndedIncarnationIsDropped(t *testing.T) {
	m := newTestManager(t, 8)
	old := &owner{name: "a", nonce: 1}
	exchange(t, m, t0, old)
	late := old.request()
	fresh := &owner{name: "a", nonce: 2}
	exchange(t, m, t0, fresh)
	before, _ := m.Leases("ns")
	if _, err := m.Request(late, t0); !errors.Is(err, ErrIncarnationReplaced) {
		t.Fatalf("late message from a replaced incarnation: err = %v, want ErrIncarnationReplaced", err)
	}
	if s := m.Stats(); s.DroppedOld != 1 {
		t.Errorf("DroppedOld = %d, want 1", s.DroppedOld)
	}
	after, _ := m.Leases("ns")
	if len(before) != len(after) {
		t.Errorf("late message changed the table")
	}
	if o, _ := m.Owners("ns"); len(o) != 1 || o[0].Nonce != 2 {
		t.Errorf("owners = %+v, want the new incarnation", o)
	}
}

// A session whose address is another live owner's is refused and changes
// nothing; once that owner has left cleanly (draining) the address is free.
func TestSecondOwnerOnAnAddressIsRefused(t *testing.T) {
	m := newTestManager(t, 8)
	a := &owner{name: "a", nonce: 1}
	exchange(t, m, t0, a)
	before, _ := m.State("ns")
	b := &owner{name: "b", nonce: 2}
	req := b.request()
	req.Addr = "a:1"
	if _, err := m.Request(req, t0); !errors.Is(err, ErrAddressInUse) {
		t.Fatalf("second owner on a's address: err = %v, want ErrAddressInUse", err)
	}
	if after, _ := m.State("ns"); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused session changed the state:\n before %+v\n after  %+v", before, after)
	}
	// A new incarnation of a itself may keep the address.
	a2 := &owner{name: "a", nonce: 3}
	if _, err := m.Request(a2.request(), t0); err != nil {
		t.Fatalf("a's new incarnation on its own address: %v", err)
	}
	// Once a leaves cleanly, b may take the address.
	leave := a2.request()
	leave.Leaving = true
	if _, err := m.Request(leave, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Request(req, t0); err != nil {
		t.Fatalf("b on the address of an owner that left: %v", err)
	}
}

func TestNamespaceFullRefusesNewNames(t *testing.T) {
	m := newTestManager(t, 4)
	var os []*owner
	for i := range 4 {
		os = append(os, &owner{name: string(rune('a' + i)), nonce: uint64(i + 1)})
	}
	exchange(t, m, t0, os...)
	before, _ := m.State("ns")
	e := &owner{name: "e", nonce: 9}
	if _, err := m.Request(e.request(), t0); !errors.Is(err, ErrNamespaceFull) {
		t.Fatalf("a fifth owner on a ring of 4: err = %v, want ErrNamespaceFull", err)
	}
	if after, _ := m.State("ns"); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused session changed the state:\n before %+v\n after  %+v", before, after)
	}
	// A new incarnation of a present name is not a new owner.
	a2 := &owner{name: "a", nonce: 5}
	if _, err := m.Request(a2.request(), t0); err != nil {
		t.Fatalf("a's new incarnation in a full namespace: %v", err)
	}
}

// TestConfirmationsLeaveLittleToCompact: owners confirming their grants
// change arcs (confirmed) without a change lookups see, and no compaction
// follows; only arcs that became equal to a neighbour may wait for the
// next. When every arc set waited, the first change after a join storm
// walked the whole table. Compacting then still leaves no two equal
// neighbours.
func TestConfirmationsLeaveLittleToCompact(t *testing.T) {
	m := newTestManager(t, 4096)
	var os []*owner
	for i := range 40 {
		os = append(os, &owner{name: fmt.Sprintf("o%02d", i), nonce: uint64(i + 1)})
	}
	exchange(t, m, t0, os...)
	n := m.ns["ns"]
	confirmed := 0
	for i := range n.table.Len() {
		if n.table.Value(i).confirmed {
			confirmed++
		}
	}
	if confirmed < n.table.Len()/2 {
		t.Fatalf("%d of %d arcs confirmed: the pool did not settle", confirmed, n.table.Len())
	}
	if len(n.uncompacted) > n.table.Len()/10 {
		t.Errorf("%d ranges wait for compaction in a table of %d arcs", len(n.uncompacted), n.table.Len())
	}
	n.compactTable()
	for i, k := 0, n.table.Len(); i < k; i++ {
		if a := n.table.Value(i); a == n.table.Value((i+1)%k) {
			r, _ := n.table.At(i)
			t.Fatalf("arc %d %v equals the next after compaction: %+v", i, r, a)
		}
	}
}

func TestHeartbeatNow(t *testing.T) {
	for _, c := range []struct {
		name  string
		every time.Duration
		first bool // no heartbeat yet
		after time.Duration
		busy  bool
		want  bool
	}{
		{"not due", 2 * time.Second, false, 2*time.Second - time.Millisecond, false, false},
		{"not due, busy", 2 * time.Second, false, 2*time.Second - time.Millisecond, true, false},
		{"due", 2 * time.Second, false, 2 * time.Second, false, true},
		{"due, busy: waits", 2 * time.Second, false, 2 * time.Second, true, false},
		{"busy, under a quarter late: waits", 2 * time.Second, false, 2*time.Second + 499*time.Millisecond, true, false},
		{"busy, a quarter late: goes", 2 * time.Second, false, 2*time.Second + 500*time.Millisecond, true, true},
		{"long interval, busy, 999ms late: waits", 10 * time.Second, false, 10*time.Second + 999*time.Millisecond, true, false},
		{"long interval, busy, a second late: goes", 10 * time.Second, false, 11 * time.Second, true, true},
		{"the first, busy: goes", 2 * time.Second, true, 0, true, true},
	} {
		last := t0
		now := t0.Add(c.after)
		if c.first {
			last = time.Time{}
		}
		if got := heartbeatNow(now, last, c.every, c.busy); got != c.want {
			t.Errorf("%s: heartbeatNow = %v, want %v", c.name, got, c.want)
		}
	}
}
