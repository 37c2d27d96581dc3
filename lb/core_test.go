package lb

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

const (
	ns = "ns"
	q  = uint64(1) << 62 // a quarter of the circle
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func rg(s, e uint64) ring.Range { return ring.Range{Start: s, End: e} }

// ent is an entry of owner o (address o:80, free when o is empty).
func ent(s, e uint64, o string, g lease.Gen) lease.Entry {
	addr := ""
	if o != "" {
		addr = o + ":80"
	}
	return lease.Entry{Range: rg(s, e), Owner: o, Addr: addr, Gen: g}
}

func snap(nonce, lsn uint64, es ...lease.Entry) lease.LookupResponse {
	return lease.LookupResponse{Namespace: ns, ManagerNonce: nonce, Snapshot: true, LSN: lsn, Entries: es}
}

// delta numbers its changes from+1, from+2, ... and ends at to.
func delta(nonce, from, to uint64, chs ...lease.Change) lease.LookupResponse {
	for i := range chs {
		if chs[i].LSN == 0 {
			chs[i].LSN = from + uint64(i) + 1
		}
	}
	return lease.LookupResponse{Namespace: ns, ManagerNonce: nonce, FromLSN: from, LSN: to, Changes: chs}
}

func chg(e lease.Entry) lease.Change   { return lease.Change{Entry: e} }
func clean(e lease.Entry) lease.Change { return lease.Change{Entry: e, Clean: true} }

// base: a holds the wrap-around arc (3q, q] at gen 1, b holds (q, 2q] at
// gen 2, (2q, 3q] is free at gen 3.
var base = []lease.Entry{ent(3*q, q, "a", 1), ent(q, 2*q, "b", 2), ent(2*q, 3*q, "", 3)}

func newCore(t testing.TB) *Core {
	t.Helper()
	c, err := NewCore(CoreConfig{Namespace: ns, Name: "fe1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// started returns a core that applied base under nonce 7 at LSN 10.
func started(t testing.TB) *Core {
	t.Helper()
	c := newCore(t)
	c.Start(at(0))
	if out := c.Step(snap(7, 10, base...), at(1)); out.Loss != nil || out.Send != nil {
		t.Fatalf("first snapshot: %+v", out)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  CoreConfig
		want error
	}{
		{"defaults", CoreConfig{Namespace: ns}, nil},
		{"default config", func() CoreConfig { c := DefaultCoreConfig(); c.Namespace = ns; return c }(), nil},
		{"no namespace", DefaultCoreConfig(), ErrNoNamespace},
		{"negative sync", CoreConfig{Namespace: ns, SyncInterval: -1}, ErrSyncInterval},
		{"bound equals sync", CoreConfig{Namespace: ns, SyncInterval: time.Second, StalenessBound: time.Second}, ErrStalenessBound},
		{"bound below default sync", CoreConfig{Namespace: ns, StalenessBound: 5 * time.Second}, ErrStalenessBound},
		{"scaled", CoreConfig{Namespace: ns, SyncInterval: time.Millisecond}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Validate() = %v, want %v", err, tt.want)
			}
			if _, err2 := NewCore(tt.cfg); !errors.Is(err2, tt.want) || (tt.want == nil) != (err2 == nil) {
				t.Fatalf("NewCore() = %v, want %v", err2, tt.want)
			}
		})
	}
	if d := DefaultCoreConfig(); d.SyncInterval != 10*time.Second || d.StalenessBound != 30*time.Second {
		t.Fatalf("defaults = %+v", d)
	}
}

func TestFirstSnapshotNotifiesNothing(t *testing.T) {
	c := newCore(t)
	out := c.Start(at(0))
	want := lease.LookupRequest{Namespace: ns, Lookup: "fe1"}
	if out.Send == nil || *out.Send != want || out.Loss != nil {
		t.Fatalf("Start = %+v, want request %+v", out, want)
	}
	if _, _, _, ok := c.Lookup(0); ok || c.Owner(0) != "" {
		t.Fatal("Lookup before the first table must fail")
	}
	// Changes before any table mean nothing, even under nonce 0: ask again.
	out = c.Step(delta(0, 0, 1, chg(ent(q, 2*q, "c", 4))), at(1))
	if out.Send == nil || *out.Send != want || c.HaveTable() || c.Stats().DroppedNonce != 1 {
		t.Fatalf("delta before a table: %+v, stats %+v", out, c.Stats())
	}
	out = c.Step(snap(7, 10, base...), at(1))
	if out.Loss != nil || out.LossAll || out.Send != nil {
		t.Fatalf("first snapshot output %+v", out)
	}
	if c.LSN() != 10 || c.ManagerNonce() != 7 || !c.HaveTable() {
		t.Fatalf("LSN %d nonce %d", c.LSN(), c.ManagerNonce())
	}
	if got := c.Entries(); !slices.Equal(got, base[:]) {
		t.Fatalf("Entries = %v", got)
	}
}

func TestStep(t *testing.T) {
	tests := []struct {
		name      string
		resps     []lease.LookupResponse // applied in order after base
		wantLoss  []ring.Range           // of the last response
		wantSend  bool                   // the last response makes a request
		wantLSN   uint64
		wantNonce uint64
		wantTable []lease.Entry // nil: base
		wantStats CoreStats     // the fields set here are compared
	}{
		{
			name:      "changed gen notifies exactly that range",
			resps:     []lease.LookupResponse{delta(7, 10, 11, chg(ent(q, 2*q, "c", 4)))},
			wantLoss:  []ring.Range{rg(q, 2*q)},
			wantLSN:   11,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, 2*q, "c", 4), ent(2*q, 3*q, "", 3)},
			wantStats: CoreStats{Applied: 2, Changes: 1, LossNotifications: 1},
		},
		{
			name:      "split range notifies only the changed part",
			resps:     []lease.LookupResponse{delta(7, 10, 11, chg(ent(q, q+100, "c", 4)))},
			wantLoss:  []ring.Range{rg(q, q+100)},
			wantLSN:   11,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, q+100, "c", 4), ent(q+100, 2*q, "b", 2), ent(2*q, 3*q, "", 3)},
		},
		{
			name: "only sub-ranges whose gen differs, merged across changes",
			resps: []lease.LookupResponse{delta(7, 10, 12,
				chg(ent(q, 2*q, "c", 4)), chg(ent(0, 2*q, "c", 4)))},
			wantLoss:  []ring.Range{rg(0, 2*q)},
			wantLSN:   12,
			wantTable: []lease.Entry{ent(3*q, 0, "a", 1), ent(0, 2*q, "c", 4), ent(2*q, 3*q, "", 3)},
			wantStats: CoreStats{Changes: 2, LossNotifications: 1},
		},
		{
			name:      "second change keeps gen: notifies only the first",
			resps:     []lease.LookupResponse{delta(7, 10, 12, chg(ent(q, 2*q, "c", 4)), chg(ent(q, 2*q, "d", 4)))},
			wantLoss:  []ring.Range{rg(q, 2*q)},
			wantLSN:   12,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, 2*q, "d", 4), ent(2*q, 3*q, "", 3)},
		},
		{
			name:      "wrap-around change merges across zero",
			resps:     []lease.LookupResponse{delta(7, 10, 11, chg(ent(2*q+5, 5, "c", 9)))},
			wantLoss:  []ring.Range{rg(2*q+5, 5)},
			wantLSN:   11,
			wantTable: []lease.Entry{ent(2*q+5, 5, "c", 9), ent(5, q, "a", 1), ent(q, 2*q, "b", 2), ent(2*q, 2*q+5, "", 3)},
		},
		{
			name:      "clean change notifies nothing but updates the table",
			resps:     []lease.LookupResponse{delta(7, 10, 11, clean(ent(q, 2*q, "c", 4)))},
			wantLSN:   11,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, 2*q, "c", 4), ent(2*q, 3*q, "", 3)},
			wantStats: CoreStats{Applied: 2, Changes: 1},
		},
		{
			name:      "owner change without gen change notifies nothing",
			resps:     []lease.LookupResponse{delta(7, 10, 11, chg(ent(q, 2*q, "c", 2)))},
			wantLSN:   11,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, 2*q, "c", 2), ent(2*q, 3*q, "", 3)},
		},
		{
			name:      "empty answer is applied",
			resps:     []lease.LookupResponse{delta(7, 10, 14)},
			wantLSN:   14,
			wantStats: CoreStats{Applied: 2},
		},
		{
			name:      "gap: push dropped, request sent",
			resps:     []lease.LookupResponse{delta(7, 11, 12, chg(ent(q, 2*q, "c", 4)))},
			wantSend:  true,
			wantLSN:   10,
			wantStats: CoreStats{Applied: 1, DroppedGap: 1, Requests: 2},
		},
		{
			name:      "overlap: dropped, request sent",
			resps:     []lease.LookupResponse{delta(7, 9, 11, chg(ent(q, 2*q, "c", 4)), chg(ent(q, 2*q, "c", 5)))},
			wantSend:  true,
			wantLSN:   10,
			wantStats: CoreStats{DroppedGap: 1},
		},
		{
			name:      "old push dropped silently",
			resps:     []lease.LookupResponse{delta(7, 9, 10, chg(ent(q, 2*q, "c", 4)))},
			wantLSN:   10,
			wantStats: CoreStats{Applied: 1, DroppedOld: 1, Requests: 1},
		},
		{
			name: "duplicate push dropped silently",
			resps: []lease.LookupResponse{
				delta(7, 10, 11, chg(ent(q, 2*q, "c", 4))),
				delta(7, 10, 11, chg(ent(q, 2*q, "c", 4)))},
			wantLSN:   11,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, 2*q, "c", 4), ent(2*q, 3*q, "", 3)},
			wantStats: CoreStats{Applied: 2, DroppedOld: 1, LossNotifications: 1},
		},
		{
			name:      "other nonce: delta dropped, request sent",
			resps:     []lease.LookupResponse{delta(8, 10, 11, chg(ent(q, 2*q, "c", 4)))},
			wantSend:  true,
			wantLSN:   10,
			wantStats: CoreStats{DroppedNonce: 1, Requests: 2},
		},
		{
			name:      "other nonce: snapshot accepted and diffed",
			resps:     []lease.LookupResponse{snap(8, 3, ent(3*q, q, "a", 1), ent(q, q+7, "b", 2), ent(q+7, 2*q, "c", 5), ent(2*q, 3*q, "c", 6))},
			wantLoss:  []ring.Range{rg(q+7, 3*q)},
			wantLSN:   3,
			wantNonce: 8,
			wantTable: []lease.Entry{ent(3*q, q, "a", 1), ent(q, q+7, "b", 2), ent(q+7, 2*q, "c", 5), ent(2*q, 3*q, "c", 6)},
			wantStats: CoreStats{Applied: 2, Snapshots: 2, LossNotifications: 1},
		},
		{
			name: "same nonce snapshot notifies exactly the changed ranges",
			// Out of order on purpose; (0, q] and (q, 2q] keep their gens.
			resps:     []lease.LookupResponse{snap(7, 20, ent(2*q, 3*q, "d", 7), ent(0, q, "a", 1), ent(3*q, 0, "a", 8), ent(q, 2*q, "e", 2))},
			wantLoss:  []ring.Range{rg(2*q, 0)},
			wantLSN:   20,
			wantTable: []lease.Entry{ent(3*q, 0, "a", 8), ent(0, q, "a", 1), ent(q, 2*q, "e", 2), ent(2*q, 3*q, "d", 7)},
		},
		{
			name:      "same nonce older snapshot dropped",
			resps:     []lease.LookupResponse{snap(7, 9, ent(0, 0, "z", 99))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedOld: 1, Snapshots: 1},
		},
		{
			name:      "malformed: overlap",
			resps:     []lease.LookupResponse{snap(8, 3, ent(3*q, q, "a", 1), ent(q-1, 2*q, "b", 2), ent(2*q, 3*q, "", 3))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1, Snapshots: 1},
		},
		{
			name:      "malformed: hole",
			resps:     []lease.LookupResponse{snap(8, 3, ent(3*q, q, "a", 1), ent(q, 2*q, "b", 2))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: full plus another",
			resps:     []lease.LookupResponse{snap(8, 3, ent(q, q, "a", 1), ent(2*q, q, "b", 2))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: duplicate entry",
			resps:     []lease.LookupResponse{snap(8, 3, ent(0, q, "a", 1), ent(0, q, "a", 1), ent(q, 0, "b", 2))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: an empty arc (e, e] among others",
			resps:     []lease.LookupResponse{snap(8, 3, ent(2*q, q, "a", 1), ent(q, 2*q, "b", 2), ent(2*q, 2*q, "c", 3))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: empty snapshot",
			resps:     []lease.LookupResponse{snap(8, 3)},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: one partial entry",
			resps:     []lease.LookupResponse{snap(8, 3, ent(0, q, "a", 1))},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: change LSN outside the response",
			resps:     []lease.LookupResponse{delta(7, 10, 11, lease.Change{LSN: 12, Entry: ent(q, 2*q, "c", 4)})},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "malformed: LSN before FromLSN",
			resps:     []lease.LookupResponse{delta(7, 10, 9)},
			wantLSN:   10,
			wantStats: CoreStats{DroppedMalformed: 1},
		},
		{
			name:      "other namespace ignored",
			resps:     []lease.LookupResponse{{Namespace: "other", ManagerNonce: 8, Snapshot: true, LSN: 3, Entries: []lease.Entry{ent(0, 0, "z", 99)}}},
			wantLSN:   10,
			wantStats: CoreStats{Foreign: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := started(t)
			var out Output
			for i, r := range tt.resps {
				out = c.Step(r, at(2+i))
			}
			if !slices.Equal(out.Loss, tt.wantLoss) || out.LossAll {
				t.Errorf("Loss = %v (all %v), want %v", out.Loss, out.LossAll, tt.wantLoss)
			}
			if (out.Send != nil) != tt.wantSend {
				t.Errorf("Send = %+v, want %v", out.Send, tt.wantSend)
			}
			if out.Send != nil {
				// Always asks with what we have; the manager decides delta or snapshot.
				want := lease.LookupRequest{Namespace: ns, Lookup: "fe1", ManagerNonce: 7, LSN: 10}
				if *out.Send != want {
					t.Errorf("Send = %+v, want %+v", *out.Send, want)
				}
			}
			wantNonce := tt.wantNonce
			if wantNonce == 0 {
				wantNonce = 7
			}
			if c.LSN() != tt.wantLSN || c.ManagerNonce() != wantNonce {
				t.Errorf("LSN %d nonce %d, want %d %d", c.LSN(), c.ManagerNonce(), tt.wantLSN, wantNonce)
			}
			wantTable := tt.wantTable
			if wantTable == nil {
				wantTable = base
			}
			if got := c.Entries(); !slices.Equal(got, wantTable) {
				t.Errorf("Entries =\n%v\nwant\n%v", got, wantTable)
			}
			checkStats(t, c.Stats(), tt.wantStats)
		})
	}
}

// checkStats compares the fields of want that are not zero.
func checkStats(t *testing.T, got, want CoreStats) {
	t.Helper()
	pairs := []struct {
		name      string
		got, want uint64
	}{
		{"Applied", got.Applied, want.Applied},
		{"Snapshots", got.Snapshots, want.Snapshots},
		{"Changes", got.Changes, want.Changes},
		{"DroppedGap", got.DroppedGap, want.DroppedGap},
		{"DroppedOld", got.DroppedOld, want.DroppedOld},
		{"DroppedNonce", got.DroppedNonce, want.DroppedNonce},
		{"DroppedMalformed", got.DroppedMalformed, want.DroppedMalformed},
		{"Foreign", got.Foreign, want.Foreign},
		{"Requests", got.Requests, want.Requests},
		{"LossNotifications", got.LossNotifications, want.LossNotifications},
		{"LossAll", got.LossAll, want.LossAll},
	}
	for _, p := range pairs {
		if p.want != 0 && p.got != p.want {
			t.Errorf("stats %s = %d, want %d (all: %+v)", p.name, p.got, p.want, got)
		}
	}
}

func TestLookup(t *testing.T) {
	c := started(t)
	tests := []struct {
		key      uint64
		addr     string
		r        ring.Range
		gen      lease.Gen
		ok       bool
		ownerStr string
	}{
		{0, "a:80", rg(3*q, q), 1, true, "a"},
		{math.MaxUint64, "a:80", rg(3*q, q), 1, true, "a"},
		{3*q + 1, "a:80", rg(3*q, q), 1, true, "a"},
		{q, "a:80", rg(3*q, q), 1, true, "a"},
		{q + 1, "b:80", rg(q, 2*q), 2, true, "b"},
		{2 * q, "b:80", rg(q, 2*q), 2, true, "b"},
		{2*q + 1, "", rg(2*q, 3*q), 3, false, ""},
		{3 * q, "", rg(2*q, 3*q), 3, false, ""},
	}
	for _, tt := range tests {
		addr, r, gen, ok := c.Lookup(tt.key)
		if addr != tt.addr || r != tt.r || gen != tt.gen || ok != tt.ok {
			t.Errorf("Lookup(%x) = %q %v %d %v, want %q %v %d %v", tt.key, addr, r, gen, ok, tt.addr, tt.r, tt.gen, tt.ok)
		}
		if o := c.Owner(tt.key); o != tt.ownerStr {
			t.Errorf("Owner(%x) = %q, want %q", tt.key, o, tt.ownerStr)
		}
	}
	// One owner everywhere: the full circle.
	c.Step(snap(7, 11, ent(5, 5, "a", 1)), at(2))
	if _, r, _, ok := c.Lookup(123); !ok || r != ring.Full() {
		t.Errorf("Lookup on a one-arc table = %v %v", r, ok)
	}
	if got := c.Entries(); !slices.Equal(got, []lease.Entry{ent(0, 0, "a", 1)}) {
		t.Errorf("Entries = %v", got)
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	c := bigCore(t, 4096)
	var sink string
	allocs := testing.AllocsPerRun(1000, func() {
		addr, _, _, _ := c.Lookup(0x0123456789abcdef)
		sink = addr
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocates %v times", allocs)
	}
	_ = sink
}

// bigCore has n arcs of n/4 owners.
func bigCore(t testing.TB, n int) *Core {
	c := newCore(t)
	es := make([]lease.Entry, n)
	step := math.MaxUint64/uint64(n) + 1
	for i := range es {
		o := string(rune('a' + i%26))
		es[i] = ent(uint64(i)*step, uint64(i+1)*step, o, lease.Gen(i+1))
	}
	c.Start(t0)
	c.Step(snap(1, 1, es...), t0)
	if got := len(c.Entries()); got != n {
		t.Fatalf("%d entries, want %d", got, n)
	}
	return c
}

func BenchmarkLookup(b *testing.B) {
	c := bigCore(b, 4096)
	b.ReportAllocs()
	var h uint64 = 0x9e3779b97f4a7c15
	for b.Loop() {
		h = h*6364136223846793005 + 1442695040888963407
		if _, _, _, ok := c.Lookup(h); !ok {
			b.Fatal("free")
		}
	}
}

// BenchmarkSnapshot applies a 4096-arc snapshot over a 4096-arc table with
// every generation changed: the worst case after a manager restart.
func BenchmarkSnapshot(b *testing.B) {
	c := bigCore(b, 4096)
	es := c.Entries()
	b.ReportAllocs()
	lsn := uint64(1)
	for b.Loop() {
		for i := range es {
			es[i].Gen++
		}
		lsn++
		if out := c.Step(snap(1, lsn, es...), t0); len(out.Loss) != 1 {
			b.Fatalf("loss %v", out.Loss)
		}
	}
}
