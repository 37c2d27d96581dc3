package manager

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func logItems(n int) []*hubItem {
	items := make([]*hubItem, n)
	for i := range items {
		items[i] = &hubItem{event: &Event{Kind: EventGrant, Namespace: "ns"}}
	}
	return items
}

// TestEventHubDropsSlowSubscriber: a subscriber that stops reading is cut
// off once its buffer is full, without publish ever blocking, while one
// that reads gets everything, in order.
func TestEventHubDropsSlowSubscriber(t *testing.T) {
	h := newEventHub(fixedClock{time.Unix(1, 0)}, 8, 4)
	slow, _, ok := h.subscribe(0)
	if !ok {
		t.Fatal("subscribe refused")
	}
	fast, _, _ := h.subscribe(0)
	var seqs []uint64
	for range 3 {
		// Neither reads: both buffers fill, and publish returns at once.
		for range subscriberBuffer / 2 {
			h.publish(logItems(1))
		}
		for range subscriberBuffer / 2 {
			seqs = append(seqs, (<-fast.ch).seq)
		}
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("the reading subscriber got seq %d at %d", s, i)
		}
	}
	n := 0
	for range slow.ch { // closed by the hub
		n++
	}
	if n != subscriberBuffer || h.dropped.Load() != 1 {
		t.Errorf("slow subscriber got %d items before it was dropped (want %d); dropped = %d", n, subscriberBuffer, h.dropped.Load())
	}
	h.unsubscribe(fast)
	if h.live() {
		t.Error("hub still live with no subscriber")
	}
}

// TestEventHubBacklog: the hub keeps the last events for subscribers that
// come later, and a returning one gets only what it missed.
func TestEventHubBacklog(t *testing.T) {
	h := newEventHub(fixedClock{time.Unix(1, 0)}, 4, 1)
	h.publish(logItems(6))
	h.publish([]*hubItem{{delta: &delta{Namespace: "ns"}}}) // not kept
	sub, past, ok := h.subscribe(0)
	if !ok {
		t.Fatal("subscribe refused")
	}
	var seqs []uint64
	for _, it := range past {
		seqs = append(seqs, it.seq)
	}
	if !slices.Equal(seqs, []uint64{3, 4, 5, 6}) {
		t.Errorf("backlog seqs %v, want [3 4 5 6]", seqs)
	}
	if _, _, ok := h.subscribe(0); ok {
		t.Error("a second subscriber was accepted past the limit of 1")
	}
	h.unsubscribe(sub)
	_, past, _ = h.subscribe(5)
	if len(past) != 1 || past[0].seq != 6 {
		t.Errorf("since 5: %d items", len(past))
	}
	if e := past[0].event; e.Seq != 6 || !e.At.Equal(time.Unix(1, 0)) {
		t.Errorf("kept event %+v, want seq 6 stamped with the hub's clock", e)
	}
	if h.lastSeq() != 7 {
		t.Errorf("lastSeq = %d, want 7", h.lastSeq())
	}
}

// entries builds a view that covers the circle from ends (sorted) and
// owners, all at generation gen.
func entries(gen lease.Gen, ends []uint64, owners ...string) []lease.Entry {
	out := make([]lease.Entry, len(ends))
	for i, e := range ends {
		out[i] = lease.Entry{Range: ring.Range{Start: ends[(i+len(ends)-1)%len(ends)], End: e}, Owner: owners[i], Gen: gen}
	}
	return out
}

const q = uint64(1) << 62 // a quarter of the circle

func TestChangeEvents(t *testing.T) {
	// a holds (3q, q] across zero, b holds (q, 3q].
	old := entries(3, []uint64{q, 3 * q}, "a", "b")
	type want struct {
		kind        EventKind
		owner, from string
		arcs        int
		share       float64
		gen         uint64
	}
	for _, tc := range []struct {
		name    string
		changes []lease.Change
		want    []want
	}{{
		name:    "a quarter moves from b to c cleanly",
		changes: []lease.Change{{Entry: lease.Entry{Range: ring.Range{Start: q, End: 2 * q}, Owner: "c", Gen: 4}, Clean: true}},
		want:    []want{{EventGrant, "c", "b", 1, 0.25, 4}},
	}, {
		name:    "across zero, from a, with loss",
		changes: []lease.Change{{Entry: lease.Entry{Range: ring.Range{Start: 3 * q, End: q}, Owner: "c", Gen: 5}}},
		want:    []want{{EventLoss, "a", "", 1, 0.5, 5}, {EventGrant, "c", "a", 1, 0.5, 5}},
	}, {
		name:    "the whole circle to c, spanning both",
		changes: []lease.Change{{Entry: lease.Entry{Range: ring.Full(), Owner: "c", Gen: 6}}},
		want:    []want{{EventLoss, "a", "", 1, 0.5, 6}, {EventLoss, "b", "", 1, 0.5, 6}, {EventGrant, "c", "a", 1, 0.5, 6}, {EventGrant, "c", "b", 1, 0.5, 6}},
	}, {
		name:    "freed: a loss, no grant",
		changes: []lease.Change{{Entry: lease.Entry{Range: ring.Range{Start: 2 * q, End: 3 * q}, Gen: 7}}},
		want:    []want{{EventLoss, "b", "", 1, 0.25, 7}},
	}, {
		name:    "an address change is no event",
		changes: []lease.Change{{Entry: lease.Entry{Range: ring.Range{Start: q, End: 3 * q}, Owner: "b", Addr: "x:1", Gen: 3}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(k EventKind, owner string) *Event { return &Event{Kind: k, Namespace: "ns", Owner: owner} }
			items := changeEvents(lease.NewView(old), Commit{Namespace: "ns", Changes: tc.changes}, mk)
			var got []want
			for _, it := range items {
				e := it.event
				got = append(got, want{e.Kind, e.Owner, e.From, e.Arcs, math.Round(e.Share*1e6) / 1e6, e.Gen})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestEachOverlap checks eachOverlap against a naive rule on random views
// and ranges: it visits exactly the entries that meet the range, and their
// shares add up to the range's.
func TestEachOverlap(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	for range 2000 {
		n := 1 + rnd.IntN(6)
		ends := make([]uint64, n)
		for i := range ends {
			ends[i] = rnd.Uint64()
		}
		slices.Sort(ends)
		ends = slices.Compact(ends)
		owners := make([]string, len(ends))
		for i := range owners {
			owners[i] = string(rune('a' + i))
		}
		es := entries(1, ends, owners...)
		if len(es) == 1 {
			es[0].Range = ring.Full()
		}
		var r ring.Range
		switch rnd.IntN(4) {
		case 0:
			r = ring.Full()
		case 1: // ends on entry boundaries
			r = ring.Range{Start: ends[rnd.IntN(len(ends))], End: ends[rnd.IntN(len(ends))]}
		default:
			r = ring.Range{Start: rnd.Uint64(), End: rnd.Uint64()}
		}
		var seen []string
		total := 0.0
		eachOverlap(lease.NewView(es), r, func(e lease.Entry, sh float64) {
			seen = append(seen, e.Owner)
			total += sh
		})
		var want []string
		for _, e := range es {
			if r.IsFull() || e.Range.IsFull() || r.Contains(e.Range.End) || e.Range.Contains(r.End) {
				want = append(want, e.Owner)
			}
		}
		slices.Sort(seen)
		seen = slices.Compact(seen) // r may meet one entry at both ends
		if !slices.Equal(seen, want) {
			t.Fatalf("seed %d: entries %v, range %v: visited %v, want %v", seed, es, r, seen, want)
		}
		if math.Abs(total-r.Share()) > 1e-9 {
			t.Fatalf("seed %d: entries %v, range %v: shares sum to %v, want %v", seed, es, r, total, r.Share())
		}
	}
}
