package lease

import (
	"encoding/json"

	"github.com/fuge-project/fuge/ring"
)

// View is a namespace's lookup view as the replicated state keeps it: every
// range of the circle in ring order, adjacent equal ranges merged, Owner ""
// where free. It is immutable: With returns a new View that shares every
// part of this one it did not change, so a commit of k changes costs
// O(k·log n) and not a copy of the whole view, and whoever was handed the
// old one (an observer, a snapshot being written) keeps it unchanged. The
// zero View has no ranges. It encodes in JSON as its list of entries.
type View struct {
	t ring.Persistent[entryVal]
}

// entryVal is an Entry without its range.
type entryVal struct {
	Owner, Addr string
	Gen, From   Gen
}

func valOf(e Entry) entryVal {
	return entryVal{Owner: e.Owner, Addr: e.Addr, Gen: e.Gen, From: e.MigratedFrom}
}

func entryOf(r ring.Range, v entryVal) Entry {
	return Entry{Range: r, Owner: v.Owner, Addr: v.Addr, Gen: v.Gen, MigratedFrom: v.From}
}

// NewView returns the view of entries, ranges that partition the circle
// (in any order; adjacent equal ones are merged). It returns the zero View
// for no entries.
func NewView(entries []Entry) View {
	if len(entries) == 0 {
		return View{}
	}
	as := make([]ring.Assignment[entryVal], len(entries))
	for i, e := range entries {
		as[i] = ring.Assignment[entryVal]{Range: e.Range, Value: valOf(e)}
	}
	t := ring.NewTable(entryVal{})
	t.SetAll(as)
	t.Compact()
	return View{t: t.Persistent()}
}

// Len is the number of entries.
func (v View) Len() int { return v.t.Len() }

// Entries returns the entries in ring order (by end; the one across zero
// first), in a new slice.
func (v View) Entries() []Entry {
	if v.t.Len() == 0 {
		return nil
	}
	out := make([]Entry, 0, v.t.Len())
	v.t.Each(func(r ring.Range, x entryVal) { out = append(out, entryOf(r, x)) })
	return out
}

// Each calls fn with every entry in ring order.
func (v View) Each(fn func(e Entry)) {
	v.t.Each(func(r ring.Range, x entryVal) { fn(entryOf(r, x)) })
}

// Walk calls fn with the entry containing h and then each following entry
// clockwise, until fn returns false or every entry has been visited once.
func (v View) Walk(h uint64, fn func(e Entry) bool) {
	v.t.Walk(h, func(r ring.Range, x entryVal) bool { return fn(entryOf(r, x)) })
}

// Lookup returns the entry containing h; false for the zero View.
func (v View) Lookup(h uint64) (Entry, bool) {
	var out Entry
	found := false
	v.Walk(h, func(e Entry) bool { out, found = e, true; return false })
	return out, found
}

// With returns the view with each change's entry set in turn, a later one
// winning where two overlap. v is unchanged.
func (v View) With(changes []Change) View {
	if len(changes) == 0 {
		return v
	}
	as := make([]ring.Assignment[entryVal], len(changes))
	for i, c := range changes {
		as[i] = ring.Assignment[entryVal]{Range: c.Entry.Range, Value: valOf(c.Entry)}
	}
	if v.t.Len() == 0 {
		v.t = ring.NewPersistent(entryVal{})
	}
	return View{t: v.t.With(as)}
}

// MarshalJSON encodes the view as its list of entries.
func (v View) MarshalJSON() ([]byte, error) { return json.Marshal(v.Entries()) }

// UnmarshalJSON decodes a list of entries (NewView).
func (v *View) UnmarshalJSON(b []byte) error {
	var es []Entry
	if err := json.Unmarshal(b, &es); err != nil {
		return err
	}
	*v = NewView(es)
	return nil
}
