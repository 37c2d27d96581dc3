package lease

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/fuge-project/fuge/ring"
)

// TestViewJSON checks that a View encodes as the list of its entries (the
// format of the snapshots written when the view was a []Entry) and decodes
// back, and that With leaves the view it edits unchanged.
func TestViewJSON(t *testing.T) {
	const q = 1 << 62
	es := []Entry{
		{Range: ring.Range{Start: 3 * q, End: q}, Owner: "a", Addr: "a:1", Gen: 2},
		{Range: ring.Range{Start: q, End: 2 * q}, Gen: 3},
		{Range: ring.Range{Start: 2 * q, End: 3 * q}, Owner: "b", Addr: "b:1", Gen: 4, MigratedFrom: 1},
	}
	v := NewView(es)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	flat, _ := json.Marshal(v.Entries())
	if string(b) != string(flat) {
		t.Fatalf("a View encodes as %s, its entries as %s", b, flat)
	}
	var w View
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Entries(), v.Entries()) || v.Len() != 3 {
		t.Fatalf("decoded %v, want %v", w.Entries(), v.Entries())
	}
	x := v.With([]Change{{LSN: 1, Entry: Entry{Range: ring.Range{Start: q, End: 2 * q}, Owner: "b", Addr: "b:1", Gen: 4, MigratedFrom: 1}}})
	if got := x.Entries(); len(got) != 2 || got[1].Range != (ring.Range{Start: q, End: 3 * q}) {
		t.Fatalf("after a change merging two entries: %v", got)
	}
	if !slices.Equal(v.Entries(), w.Entries()) {
		t.Fatal("With changed the view it edited")
	}
	if e, ok := x.Lookup(q + 5); !ok || e.Owner != "b" {
		t.Fatalf("Lookup: %v %v", e, ok)
	}
	var zero View
	if b, _ := json.Marshal(zero); string(b) != "null" {
		t.Fatalf("the zero View encodes as %s", b)
	}
}
