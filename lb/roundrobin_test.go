package lb

import (
	"slices"
	"testing"

	"github.com/fuge-project/fuge/lease"
)

func TestRoundRobinStatic(t *testing.T) {
	rr := NewRoundRobin([]string{"x:1", "", "y:2", "z:3"})
	if rr.Updated() != nil {
		t.Fatal("a static pool's Updated is not nil")
	}
	select {
	case <-rr.Ready():
	default:
		t.Fatal("a static pool with addresses is not ready")
	}
	counts := map[string]int{}
	for i := range 300 {
		p, ok := rr.Pick(uint64(i % 2)) // the key is ignored
		if !ok || p.Gen != 0 || !p.Range.IsFull() {
			t.Fatalf("Pick = %+v %v, want an address, the full circle, generation 0", p, ok)
		}
		counts[p.Addr]++
	}
	if want := map[string]int{"x:1": 100, "y:2": 100, "z:3": 100}; !mapsEqual(counts, want) {
		t.Fatalf("spread %v, want %v", counts, want)
	}
	if got := rr.Addrs(); !slices.Equal(got, []string{"x:1", "y:2", "z:3"}) {
		t.Fatalf("Addrs = %q", got)
	}
	if allocs := testing.AllocsPerRun(1000, func() { rr.Pick(0) }); allocs != 0 {
		t.Fatalf("Pick allocates %v times", allocs)
	}

	empty := NewRoundRobin(nil)
	if p, ok := empty.Pick(1); ok || p != (Pick{}) {
		t.Fatalf("empty Pick = %+v %v", p, ok)
	}
	select {
	case <-empty.Ready():
		t.Fatal("an empty static pool is ready")
	default:
	}
}

func TestRoundRobinFollowsLookup(t *testing.T) {
	l := unpublished(t)
	rr := NewLookupRoundRobin(l)
	if _, ok := rr.Pick(1); ok {
		t.Fatal("Pick before a table")
	}
	upd := rr.Updated()
	l.publish(chunkedOf(threeArcs, chunkSize), CoreStats{})
	<-upd // closed by publish, before it returned
	seen := map[string]int{}
	for range 10 {
		p, ok := rr.Pick(1)
		if !ok {
			t.Fatal("Pick after a table = false")
		}
		seen[p.Addr]++
	}
	if want := map[string]int{"a:80": 5, "b:80": 5}; !mapsEqual(seen, want) {
		t.Fatalf("spread %v, want %v (free arcs and duplicates excluded)", seen, want)
	}

	// b leaves; c arrives.
	l.publish(chunkedOf([]lease.Entry{ent(0, 1<<63, "c", 9), ent(1<<63, 0, "a", 8)}, chunkSize), CoreStats{})
	if got := rr.Addrs(); !slices.Equal(got, []string{"a:80", "c:80"}) {
		t.Fatalf("Addrs after the change = %q", got)
	}
	for range 10 {
		if p, _ := rr.Pick(1); p.Addr == "b:80" {
			t.Fatal("picked an address that left the table")
		}
	}
	if allocs := testing.AllocsPerRun(1000, func() { rr.Pick(0) }); allocs != 0 {
		t.Fatalf("steady-state Pick allocates %v times", allocs)
	}
}

// TestRoundRobinConcurrent races Picks against table changes (for -race) and
// checks that each Pick returns an address of some published table.
func TestRoundRobinConcurrent(t *testing.T) {
	l := unpublished(t)
	rr := NewLookupRoundRobin(l)
	tables := [][]lease.Entry{
		threeArcs,
		{ent(0, 1<<63, "c", 9), ent(1<<63, 0, "d", 8)},
	}
	l.publish(chunkedOf(tables[0], chunkSize), CoreStats{})
	valid := map[string]bool{"a:80": true, "b:80": true, "c:80": true, "d:80": true}
	done := make(chan string, 4)
	for range 4 {
		go func() {
			for range 2000 {
				if p, ok := rr.Pick(1); !ok || !valid[p.Addr] {
					done <- p.Addr
					return
				}
			}
			done <- ""
		}()
	}
	for i := range 200 {
		l.publish(chunkedOf(tables[i%2], chunkSize), CoreStats{})
	}
	for range 4 {
		if bad := <-done; bad != "" {
			t.Fatalf("Pick returned %q", bad)
		}
	}
}

func BenchmarkRoundRobinPick(b *testing.B) {
	for _, bc := range []struct {
		name string
		rr   func() *RoundRobin
	}{
		{"static", func() *RoundRobin { return NewRoundRobin([]string{"a:1", "b:1", "c:1"}) }},
		{"lookup", func() *RoundRobin { return NewLookupRoundRobin(table4096(b)) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rr := bc.rr()
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := rr.Pick(0); !ok {
					b.Fatal("no pick")
				}
			}
		})
	}
}

func BenchmarkRoundRobinPickParallel(b *testing.B) {
	rr := NewRoundRobin([]string{"a:1", "b:1", "c:1"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rr.Pick(0)
		}
	})
}
