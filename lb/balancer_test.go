package lb

import (
	"slices"
	"testing"

	"github.com/fuge-project/fuge/lease"
)

// unpublished returns a Lookup that is not started and has no table.
func unpublished(tb testing.TB) *Lookup {
	tb.Helper()
	l, err := NewLookup(LookupConfig{Managers: []string{"127.0.0.1:1"}, Namespace: ns})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// threeArcs is a table of owners a, b (twice) and a free arc.
var threeArcs = []lease.Entry{
	ent(400, 100, "a", 7),
	ent(100, 200, "b", 3),
	ent(200, 300, "", 4),
	ent(300, 400, "b", 5),
}

func TestLeaseBalancerPick(t *testing.T) {
	l := unpublished(t)
	b := NewLeaseBalancer(l)
	if p, ok := b.Pick(150); ok || p != (Pick{}) {
		t.Fatalf("Pick before a table = %+v %v, want zero false", p, ok)
	}
	select {
	case <-b.Ready():
		t.Fatal("Ready before a table")
	default:
	}
	if got := b.Addrs(); got != nil {
		t.Fatalf("Addrs before a table = %q", got)
	}

	upd := b.Updated()
	l.publish(chunkedOf(threeArcs, chunkSize), CoreStats{})
	select {
	case <-upd:
	default:
		t.Fatal("Updated not closed by a new table")
	}
	select {
	case <-b.Ready():
	default:
		t.Fatal("Ready not closed by the first table")
	}
	for _, tc := range []struct {
		h    uint64
		want Pick
		ok   bool
	}{
		{50, Pick{"a:80", rg(400, 100), 7}, true},
		{100, Pick{"a:80", rg(400, 100), 7}, true},
		{101, Pick{"b:80", rg(100, 200), 3}, true},
		{250, Pick{"", rg(200, 300), 4}, false},
		{400, Pick{"b:80", rg(300, 400), 5}, true},
		{401, Pick{"a:80", rg(400, 100), 7}, true},
	} {
		if p, ok := b.Pick(tc.h); p != tc.want || ok != tc.ok {
			t.Errorf("Pick(%d) = %+v %v, want %+v %v", tc.h, p, ok, tc.want, tc.ok)
		}
	}
	if got, want := b.Addrs(), []string{"a:80", "b:80"}; !slices.Equal(got, want) {
		t.Fatalf("Addrs = %q, want %q", got, want)
	}
	if allocs := testing.AllocsPerRun(1000, func() { b.Pick(0x0123456789abcdef) }); allocs != 0 {
		t.Fatalf("Pick allocates %v times", allocs)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// table4096 publishes a 4096-arc table over 26 owners.
func table4096(b *testing.B) *Lookup {
	l, _ := published(b, 4096)
	return l
}

func BenchmarkLeaseBalancerPick(b *testing.B) {
	bal := NewLeaseBalancer(table4096(b))
	b.ReportAllocs()
	h := uint64(0x9e3779b97f4a7c15)
	for b.Loop() {
		h = h*6364136223846793005 + 1442695040888963407
		if _, ok := bal.Pick(h); !ok {
			b.Fatal("no pick")
		}
	}
}
