package manager

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fuge-project/fuge/lease"
)

// ringLog records what an FSM tells its RingObserver.
type ringLog struct {
	views []string
	rings []heardRing
}

type heardRing struct {
	ns      string
	view    RingView
	version uint64
}

func (r *ringLog) NamespaceView(ns string, _ []LookupEntry, _ uint64) { r.views = append(r.views, ns) }
func (r *ringLog) NamespaceDeleted(string)                            {}
func (r *ringLog) NamespaceRing(ns string, v RingView, version uint64) {
	r.rings = append(r.rings, heardRing{ns, v, version})
}

// fsmApplier feeds commands to an FSM as raft would, numbering the log.
type fsmApplier struct {
	t     *testing.T
	f     *fsm
	index uint64
}

func (a *fsmApplier) apply(c command) {
	a.t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		a.t.Fatal(err)
	}
	a.index += 2 // raft's own entries (no-ops, configuration) take indexes too
	if res := a.f.Apply(&raft.Log{Index: a.index, Data: b}); res != nil {
		a.t.Fatalf("apply %s: %v", c.Op, res)
	}
}

// desiredView is the core's desired ring as a RingView.
func desiredView(t *testing.T, m *Manager) RingView {
	t.Helper()
	d, err := m.DesiredRing("ns")
	if err != nil {
		t.Fatal(err)
	}
	owners, _ := m.Owners("ns")
	addr := map[string]string{}
	for _, o := range owners {
		addr[o.Name] = o.Addr
	}
	v := RingView{RingSize: 64, Header: "X-Fuge-Key"}
	for _, o := range d.Owners() {
		v.Owners = append(v.Owners, lease.RingOwner{Name: o.Name, Addr: addr[o.Name], VNodes: o.VNodes})
	}
	slices.SortFunc(v.Owners, func(a, b lease.RingOwner) int { return cmp.Compare(a.Name, b.Name) })
	return v
}

func sameView(a, b RingView) bool {
	return a.RingSize == b.RingSize && a.Header == b.Header && slices.Equal(a.Owners, b.Owners)
}

// TestRingObserver drives the lease core through joins and a drain,
// replicates its commits through an FSM, and checks that the FSM's
// RingObserver hears the core's desired ring after each change, versioned
// by the raft index, and hears it again from a restored snapshot.
func TestRingObserver(t *testing.T) {
	m := newTestManager(t, 64)
	heard := &ringLog{}
	ap := &fsmApplier{t: t, f: newFSM(DefaultConfig().LogRetention, DefaultConfig().LeaseDuration, heard)}
	ap.apply(command{Op: "create", Namespace: &NamespaceConfig{Name: "ns", RingSize: 64}})
	if len(heard.rings) != 1 || !sameView(heard.rings[0].view, RingView{RingSize: 64, Header: "X-Fuge-Key"}) || heard.rings[0].version != 2 {
		t.Fatalf("after create: %+v, want an empty ring of 64 at index 2", heard.rings)
	}

	owners := map[string]*owner{}
	var os []*owner
	step := func(out Output, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range os {
			o.accept(out)
		}
		if len(out.Commits) > 0 {
			ap.apply(command{Op: "commit", Commits: out.Commits})
		}
	}
	settle := func() {
		t.Helper()
		for range 6 {
			for _, o := range os {
				step(m.Request(o.request(), t0))
			}
		}
	}
	check := func(what string) {
		t.Helper()
		last := heard.rings[len(heard.rings)-1]
		want := desiredView(t, m)
		if !sameView(last.view, want) || last.ns != "ns" {
			t.Errorf("%s: heard %+v, want the desired ring %+v", what, last.view, want)
		}
		for i := 1; i < len(heard.rings); i++ {
			if heard.rings[i].version <= heard.rings[i-1].version {
				t.Errorf("%s: versions %d then %d", what, heard.rings[i-1].version, heard.rings[i].version)
			}
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		o := &owner{name: name, nonce: uint64(len(os) + 1)}
		owners[name] = o
		os = append(os, o)
		settle()
		check("join " + name)
	}
	if n := len(desiredView(t, m).Owners); n != 3 {
		t.Fatalf("desired ring of %d owners", n)
	}
	heardBefore := len(heard.rings)
	settle() // renewals change no owner record
	if len(heard.rings) != heardBefore {
		t.Errorf("renewals told the observer of %d rings", len(heard.rings)-heardBefore)
	}

	step(m.Drain("ns", "b", t0))
	settle()
	check("drain b")
	if v := heard.rings[len(heard.rings)-1].view; len(v.Owners) != 2 || v.Owners[0].VNodes+v.Owners[1].VNodes != 64 {
		t.Errorf("after the drain: %+v", v)
	}

	// A snapshot restored on another node tells its observer the same
	// ring, at the index of the last entry applied.
	snap, err := ap.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&sinkBuffer{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	restored := &ringLog{}
	f2 := newFSM(DefaultConfig().LogRetention, DefaultConfig().LeaseDuration, restored)
	if err := f2.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	last := heard.rings[len(heard.rings)-1]
	if len(restored.rings) != 1 || !sameView(restored.rings[0].view, last.view) || restored.rings[0].version != ap.index {
		t.Errorf("restored: %+v, want %+v at index %d", restored.rings, last.view, ap.index)
	}

	// An Observer that is not a RingObserver hears views only.
	plain := &viewOnly{}
	ap2 := &fsmApplier{t: t, f: newFSM(DefaultConfig().LogRetention, DefaultConfig().LeaseDuration, plain)}
	ap2.apply(command{Op: "create", Namespace: &NamespaceConfig{Name: "ns", RingSize: 64}})
	if plain.views != 1 {
		t.Errorf("plain observer heard %d views", plain.views)
	}
}

type viewOnly struct{ views int }

func (v *viewOnly) NamespaceView(string, []LookupEntry, uint64) { v.views++ }
func (v *viewOnly) NamespaceDeleted(string)                     {}

// sinkBuffer is a raft.SnapshotSink in memory.
type sinkBuffer struct{ *bytes.Buffer }

func (sinkBuffer) ID() string    { return "test" }
func (sinkBuffer) Cancel() error { return nil }
func (sinkBuffer) Close() error  { return nil }

// TestRingViewApportions: the view depends on the set of owners, not
// their order, and leaves draining owners out.
func TestRingViewApportions(t *testing.T) {
	st := NamespaceState{Config: NamespaceConfig{Name: "ns", RingSize: 16, Header: "H"}, Owners: []OwnerRecord{
		{Name: "c", Addr: "c:1"}, {Name: "a", Addr: "a:1"}, {Name: "d", Addr: "d:1", Draining: true}, {Name: "b", Addr: "b:1"},
	}}
	v, err := st.RingView()
	if err != nil {
		t.Fatal(err)
	}
	rev := st
	rev.Owners = slices.Clone(st.Owners)
	slices.Reverse(rev.Owners)
	v2, err := rev.RingView()
	if err != nil {
		t.Fatal(err)
	}
	if !sameView(v, v2) {
		t.Errorf("order matters: %+v vs %+v", v, v2)
	}
	sum := 0
	var names []string
	for _, o := range v.Owners {
		sum += o.VNodes
		names = append(names, o.Name)
		if o.Addr != o.Name+":1" {
			t.Errorf("owner %s at %s", o.Name, o.Addr)
		}
	}
	if sum != 16 || !slices.Equal(names, []string{"a", "b", "c"}) || v.Header != "H" || v.RingSize != 16 {
		t.Errorf("view %+v: want a, b, c sharing 16", v)
	}
}
