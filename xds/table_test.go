package xds

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

func TestTypeURLs(t *testing.T) {
	a, err := anypb.New(&fugev1.ArcBlock{})
	if err != nil || a.TypeUrl != ArcBlockTypeURL {
		t.Errorf("ArcBlock packs as %q (%v), want %q", a.GetTypeUrl(), err, ArcBlockTypeURL)
	}
	h, err := anypb.New(&fugev1.Heartbeat{})
	if err != nil || h.TypeUrl != HeartbeatTypeURL {
		t.Errorf("Heartbeat packs as %q (%v), want %q", h.GetTypeUrl(), err, HeartbeatTypeURL)
	}
}

func TestValidateView(t *testing.T) {
	const h = q / 2
	for _, tc := range []struct {
		name    string
		ns      string
		entries []lease.Entry
		ok      bool
	}{
		{"whole circle", "ns", []lease.Entry{arcEntry(0, 0, "", 1)}, true},
		{"whole circle from anywhere", "ns", []lease.Entry{arcEntry(h, h, "a", 1)}, true},
		{"four quarters", "ns", fourArcs(), true},
		{"any order", "ns", []lease.Entry{arcEntry(q, 3*q, "a", 1), arcEntry(3*q, q, "b", 2)}, true},
		{"no namespace", "", fourArcs(), false},
		{"empty", "ns", nil, false},
		{"single arc not the circle", "ns", []lease.Entry{arcEntry(0, q, "a", 1)}, false},
		{"gap", "ns", []lease.Entry{arcEntry(0, q, "a", 1), arcEntry(2*q, 0, "b", 2)}, false},
		{"overlap", "ns", []lease.Entry{arcEntry(0, 2*q, "a", 1), arcEntry(q, 0, "b", 2)}, false},
		{"same end twice", "ns", []lease.Entry{arcEntry(0, q, "a", 1), arcEntry(0, q, "b", 2), arcEntry(q, 0, "c", 3)}, false},
		{"whole circle among others", "ns", []lease.Entry{arcEntry(0, 0, "a", 1), arcEntry(0, q, "b", 2)}, false},
		{"generation 0", "ns", []lease.Entry{arcEntry(0, 0, "a", 0)}, false},
		{"owner without address", "ns", []lease.Entry{{Range: ring.Full(), Owner: "a", Gen: 1}}, false},
		{"owner not UTF-8", "ns", []lease.Entry{arcEntry(0, 0, "\xff", 1)}, false},
		{"address not UTF-8", "ns", []lease.Entry{{Range: ring.Full(), Owner: "a", Addr: "\xff", Gen: 1}}, false},
		{"namespace not UTF-8", "\xff", fourArcs(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateView(tc.ns, tc.entries)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateView = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidView) {
				t.Errorf("error %v is not ErrInvalidView", err)
			}
		})
	}
}

// BenchmarkNamespaceView measures a view of 4,096 arcs that changes one
// arc: kept for later (a view within FlushInterval of the last
// publication, as in a join storm) and published (cut into blocks,
// compared, one block marshaled and pushed to no stream).
func BenchmarkNamespaceView(b *testing.B) {
	v1 := evenArcs(4096)
	v2 := slices.Clone(v1)
	v2[1000] = arcEntry(v2[1000].Range.Start, v2[1000].Range.End, "moved", 5000)
	views := [2][]lease.Entry{v1, v2}
	for _, tc := range []struct {
		name string
		step time.Duration
	}{{"coalesced", 0}, {"published", FlushInterval}} {
		b.Run(tc.name, func(b *testing.B) {
			fc := newFakeClock()
			lt := newLeaseTable(LeaseTableConfig{}, fc)
			lt.NamespaceView("ns", v1, 1)
			b.ReportAllocs()
			lsn := uint64(1)
			for b.Loop() {
				fc.Advance(tc.step)
				lsn++
				lt.NamespaceView("ns", views[lsn%2], lsn)
			}
		})
	}
}
