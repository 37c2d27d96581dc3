package manager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// rebuildEntries is Apply's view update as it was before lease.View: the
// whole table rebuilt from every entry and the commit's changes, the
// oracle for the incremental one.
func rebuildEntries(es []lease.Entry, changes []lease.Change) []lease.Entry {
	as := make([]ring.Assignment[viewVal], 0, len(es)+len(changes))
	as = appendAssignments(as, es)
	for _, ch := range changes {
		as = append(as, assignment(ch.Entry))
	}
	t := ring.NewTable(viewVal{})
	t.SetAll(as)
	t.Compact()
	out := make([]lease.Entry, 0, t.Len())
	t.Each(func(r ring.Range, v viewVal) {
		out = append(out, lease.Entry{Range: r, Owner: v.Owner, Addr: v.Addr, Gen: v.Gen, MigratedFrom: v.From})
	})
	return out
}

// TestApplyMatchesRebuild checks the incremental Apply against a rebuild
// of the whole view per commit, on random sequences of commits (a few
// changes, a step's worth in ring order, or most of the table), from
// random views of up to a few thousand entries; and that a view handed
// out before a commit is unchanged by it.
func TestApplyMatchesRebuild(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 5))
	owners := []string{"", "a", "b", "c"}
	for iter := range 40 {
		st, err := NewNamespaceState(NamespaceConfig{Name: "ns", RingSize: 4096}, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		want := st.Entries.Entries()
		gen := lease.Gen(1)
		at := time.Unix(0, 0)
		for c := range 20 {
			cm := Commit{Namespace: "ns", FromLSN: st.LSN, At: at}
			k := 1 + rnd.IntN(5)
			switch rnd.IntN(6) {
			case 0:
				k = 100 + rnd.IntN(1500)
			case 1:
				k = 20 + rnd.IntN(100)
			}
			ps := make([]uint64, k+1)
			for i := range ps {
				if len(want) > 1 && rnd.IntN(2) == 0 {
					ps[i] = want[rnd.IntN(len(want))].Range.End
				} else {
					ps[i] = rnd.Uint64()
				}
			}
			ordered := rnd.IntN(2) == 0
			if ordered {
				slices.Sort(ps)
			}
			for i := range k {
				gen++
				o := owners[rnd.IntN(len(owners))]
				e := lease.Entry{Range: ring.Range{Start: ps[i], End: ps[i+1]}, Owner: o, Gen: gen}
				if o != "" {
					e.Addr = o + ":1"
				}
				if rnd.IntN(8) == 0 {
					e.MigratedFrom = gen - 1
				}
				cm.Changes = append(cm.Changes, lease.Change{LSN: st.LSN + uint64(i) + 1, Entry: e})
			}
			before, held := st.Entries, st.Entries.Entries()
			if err := st.Apply(cm, time.Hour); err != nil {
				t.Fatal(err)
			}
			want = rebuildEntries(want, cm.Changes)
			if got := st.Entries.Entries(); !slices.Equal(got, want) {
				t.Fatalf("seed %d iteration %d commit %d: %d entries after Apply, %d after a rebuild\n got %v\nwant %v",
					seed, iter, c, len(got), len(want), got, want)
			}
			if !slices.Equal(before.Entries(), held) {
				t.Fatalf("seed %d iteration %d commit %d: Apply changed the view held before it", seed, iter, c)
			}
			if st.LSN != cm.Changes[len(cm.Changes)-1].LSN {
				t.Fatalf("LSN %d after a commit to %d", st.LSN, cm.Changes[len(cm.Changes)-1].LSN)
			}
		}
	}
}

// TestOwnerDeltasMatchFullList checks mergeOwners against a map of the
// records, on random sequences of upserts and removals.
func TestOwnerDeltasMatchFullList(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	for iter := range 300 {
		var list []OwnerRecord
		oracle := map[string]OwnerRecord{}
		for step := range 20 {
			var ups []OwnerRecord
			var rms []string
			for range rnd.IntN(6) {
				name := fmt.Sprintf("o%02d", rnd.IntN(30))
				if rnd.IntN(3) == 0 {
					rms = append(rms, name)
					continue
				}
				r := OwnerRecord{Name: name, Addr: name + ":1", Nonce: rnd.Uint64(), VNodes: rnd.IntN(100), Draining: rnd.IntN(4) == 0}
				if rnd.IntN(3) == 0 {
					r.Retired = []uint64{rnd.Uint64()}
				}
				ups = append(ups, r)
			}
			// The core names each owner once, sorted; others may not.
			if rnd.IntN(2) == 0 {
				slices.SortStableFunc(ups, func(a, b OwnerRecord) int { return cmpName(a.Name, b.Name) })
				slices.Sort(rms)
			}
			for _, r := range ups {
				oracle[r.Name] = r
			}
			for _, name := range rms {
				delete(oracle, name)
			}
			list = mergeOwners(list, ups, rms)
			want := make([]OwnerRecord, 0, len(oracle))
			for _, name := range sortedKeys(oracle) {
				want = append(want, oracle[name])
			}
			if !equalRecords(list, want) {
				t.Fatalf("seed %d iteration %d step %d: upserts %v removals %v\n got %v\nwant %v", seed, iter, step, ups, rms, list, want)
			}
		}
	}
}

func cmpName(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func equalRecords(a, b []OwnerRecord) bool {
	return slices.EqualFunc(a, b, func(x, y OwnerRecord) bool {
		return x.Name == y.Name && x.Addr == y.Addr && x.Nonce == y.Nonce && x.Draining == y.Draining &&
			x.Waiting == y.Waiting && x.VNodes == y.VNodes && slices.Equal(x.Retired, y.Retired)
	})
}

// TestOldFormatCommitApplies replays raft log entries as the manager wrote
// them before owner deltas (every commit that changed the owners carried
// the whole list in "Owners") into the FSM, then one of the new format: the
// old entries still apply, the delta applies on top of them, and a
// snapshot, which keeps the full state, restores the same.
func TestOldFormatCommitApplies(t *testing.T) {
	f := newFSM(time.Hour, time.Minute, nil)
	entries := []string{
		`{"op":"create","namespace":{"Name":"ns","RingSize":16}}`,
		// Two owners join: the full list, as the old publish wrote it.
		`{"op":"commit","commits":[{"Namespace":"ns","FromLSN":0,"Changes":[{"LSN":1,"Entry":{"Range":{"Start":0,"End":9223372036854775808},"Owner":"a","Addr":"a:1","Gen":2,"MigratedFrom":0},"Clean":false}],"NextGen":2,` +
			`"Owners":[{"Name":"a","Addr":"a:1","Nonce":1,"Draining":false,"VNodes":8},{"Name":"b","Addr":"b:1","Nonce":2,"Draining":false,"VNodes":8}],"At":"2026-01-01T00:00:00Z"}]}`,
		// b leaves: the list without it.
		`{"op":"commit","commits":[{"Namespace":"ns","FromLSN":1,"Changes":null,"NextGen":2,` +
			`"Owners":[{"Name":"a","Addr":"a:1","Nonce":1,"Draining":false,"VNodes":16}],"At":"2026-01-01T00:00:01Z"}]}`,
	}
	for i, e := range entries {
		if res := f.Apply(&raft.Log{Index: uint64(i + 1), Data: []byte(e)}); res != nil {
			t.Fatalf("old entry %d: %v", i+1, res)
		}
	}
	st := f.st.Namespaces["ns"]
	if len(st.Owners) != 1 || st.Owners[0].Name != "a" || st.Owners[0].VNodes != 16 {
		t.Fatalf("after the old entries: owners %+v", st.Owners)
	}
	if es := st.Entries.Entries(); len(es) != 2 || es[1].Owner != "a" || es[1].Gen != 2 {
		t.Fatalf("after the old entries: view %v", es)
	}
	// A commit of the new format: c joins, a's count changes.
	b, err := json.Marshal(command{Op: "commit", Commits: []Commit{{Namespace: "ns", FromLSN: 1, NextGen: 2,
		OwnerUpserts: []OwnerRecord{{Name: "a", Addr: "a:1", Nonce: 1, VNodes: 8}, {Name: "c", Addr: "c:1", Nonce: 3, VNodes: 8}},
		At:           time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Apply(&raft.Log{Index: 4, Data: b}); res != nil {
		t.Fatal(res)
	}
	want := []OwnerRecord{{Name: "a", Addr: "a:1", Nonce: 1, VNodes: 8}, {Name: "c", Addr: "c:1", Nonce: 3, VNodes: 8}}
	if !equalRecords(st.Owners, want) {
		t.Fatalf("after the delta: owners %+v, want %+v", st.Owners, want)
	}
	// A new entry carries no full list.
	if containsKey(t, b, "Owners") {
		t.Fatalf("a new commit carries the full owner list: %s", b)
	}
	// The snapshot keeps the full state.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := newFSM(time.Hour, time.Minute, nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(snap)))); err != nil {
		t.Fatal(err)
	}
	rs := g.st.Namespaces["ns"]
	if !equalRecords(rs.Owners, want) || !slices.Equal(rs.Entries.Entries(), st.Entries.Entries()) || rs.LSN != st.LSN {
		t.Fatalf("restored %+v %v, want %+v %v", rs.Owners, rs.Entries.Entries(), want, st.Entries.Entries())
	}
}

// containsKey reports whether the JSON command b has a commit with key k.
func containsKey(t *testing.T, b []byte, k string) bool {
	t.Helper()
	var c struct{ Commits []map[string]json.RawMessage }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for _, cm := range c.Commits {
		if _, ok := cm[k]; ok {
			return true
		}
	}
	return false
}

func snapshotBytes(s raft.FSMSnapshot) []byte { return []byte(s.(fsmSnapshot)) }

// BenchmarkApplyCommit measures Apply of one commit on a view of R
// entries, the size of a join's or a leave's commit at PRS scale (1 arc,
// and 132: one owner's share of 500 at R = 65536), incrementally and by the
// rebuild Apply did before lease.View (the whole table from every entry).
func BenchmarkApplyCommit(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		rnd := rand.New(rand.NewPCG(1, 2))
		ends := make([]uint64, r)
		for i := range ends {
			ends[i] = rnd.Uint64()
		}
		slices.Sort(ends)
		es := make([]lease.Entry, r)
		for i := range es {
			o := fmt.Sprintf("owner-%03d", i%500)
			es[i] = lease.Entry{Range: ring.Range{Start: ends[(i+r-1)%r], End: ends[i]}, Owner: o, Addr: o + ":80", Gen: lease.Gen(i + 2)}
		}
		base := NamespaceState{Config: NamespaceConfig{Name: "ns", RingSize: r}, Entries: lease.NewView(es), NextGen: lease.Gen(r + 2)}
		for _, k := range []int{1, 132} {
			cm := Commit{Namespace: "ns", At: time.Unix(0, 0)}
			for j := range k {
				e := es[j*(r/k)]
				e.Owner, e.Addr, e.Gen = "new", "new:80", lease.Gen(r+3)
				cm.Changes = append(cm.Changes, lease.Change{LSN: uint64(j + 1), Entry: e})
			}
			b.Run(fmt.Sprintf("incremental/R=%d/changes=%d", r, k), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					st := base
					if err := st.Apply(cm, time.Hour); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("rebuild/R=%d/changes=%d", r, k), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					rebuildEntries(es, cm.Changes)
				}
			})
		}
	}
}
