package xds

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// sizedBlocks decodes a delta response's blocks, checking that each has
// the bit count bits, and returns their arcs by block number and the
// response's size on the wire.
func sizedBlocks(t *testing.T, resp *discovery.DeltaDiscoveryResponse, ns string, bits uint32) (map[uint32][]lease.Entry, int) {
	t.Helper()
	out := map[uint32][]lease.Entry{}
	for _, r := range resp.Resources {
		var blk fugev1.ArcBlock
		if err := r.Resource.UnmarshalTo(&blk); err != nil {
			t.Fatal(err)
		}
		if blk.BlockBits != bits {
			t.Fatalf("%s has block_bits %d, want %d", r.Name, blk.BlockBits, bits)
		}
		es, err := wire.EntriesFromBlock(ns, &blk)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if r.Name != wire.BlockName(ns, blk.Block) {
			t.Fatalf("%s holds block %d", r.Name, blk.Block)
		}
		out[blk.Block] = es
	}
	return out, proto.Size(resp)
}

// ringOf is a ring view of size r with one owner.
func ringOf(r int) lease.RingView {
	return lease.RingView{RingSize: r, Header: "X-Fuge-Key", Owners: []lease.RingOwner{{Name: "o", Addr: "o:1", VNodes: r}}}
}

// TestBlocksSizedByRing: at R = 65536 the table is served in 16,384
// blocks of 4 arcs, so a change of one arc re-sends one block of 4 arcs, and a
// leaving owner's arcs (131 of 65,536, as one of 500 owners holds) re-send
// only the blocks they lie in, not most of the table as 64 blocks did.
func TestBlocksSizedByRing(t *testing.T) {
	const R = 65536
	ctx := testContext(t)
	lt, conn := newTestServer(t, LeaseTableConfig{})
	bits := wire.BlockBits(R)
	if bits != 14 {
		t.Fatalf("BlockBits(%d) = %d, want 14", R, bits)
	}
	lt.NamespaceRing("ns", ringOf(R), 1) // before the first view, as the manager does
	v1 := evenArcs(R)
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	// The whole table, about 3.6 MB, comes in parts of at most
	// wire.MaxLookupResponseBytes, all but the last marked.
	got, full, parts := map[uint32][]lease.Entry{}, 0, 0
	for {
		resp := c.recv()
		part, size := sizedBlocks(t, resp, "ns", bits)
		parts++
		full += size
		if size > wire.MaxLookupResponseBytes+4<<10 {
			t.Fatalf("part %d: %d bytes, over %d", parts, size, wire.MaxLookupResponseBytes)
		}
		for b, es := range part {
			if _, dup := got[b]; dup {
				t.Fatalf("block %d sent twice", b)
			}
			got[b] = es
		}
		more := strings.HasSuffix(resp.SystemVersionInfo, wire.MorePartsSuffix)
		if v := strings.TrimSuffix(resp.SystemVersionInfo, wire.MorePartsSuffix); v != "1" {
			t.Fatalf("part %d of version %q, want 1", parts, resp.SystemVersionInfo)
		}
		if !more {
			break
		}
	}
	if len(got) != 1<<bits || parts < full/wire.MaxLookupResponseBytes {
		t.Fatalf("first answer: %d blocks in %d parts (%d bytes), want %d blocks in at least %d parts", len(got), parts, full, 1<<bits, full/wire.MaxLookupResponseBytes)
	}
	t.Logf("whole table in %d parts", parts)
	for b, es := range got {
		if len(es) != R>>bits {
			t.Fatalf("block %d holds %d arcs, want %d", b, len(es), R>>bits)
		}
	}

	// One arc changes: its block, and only it, is sent.
	v2 := slices.Clone(v1)
	v2[40000] = arcEntry(v2[40000].Range.Start, v2[40000].Range.End, "moved", R+1)
	lt.NamespaceView("ns", v2, 2)
	resp := c.recv()
	got, size := sizedBlocks(t, resp, "ns", bits)
	want := wire.BlockOf(v2[40000].Range.End, bits)
	if len(got) != 1 || !slices.Contains(got[want], v2[40000]) || resp.Resources[0].Version != "2" {
		t.Fatalf("one arc changed: sent blocks %v, want block %d only at version 2", slices.Sorted(maps.Keys(got)), want)
	}
	t.Logf("whole table %d bytes; one arc's change %d bytes", full, size)

	// An owner of 500 leaves: its 131 arcs, spread over the circle, go to
	// others. Only the blocks holding them are sent.
	v3 := slices.Clone(v2)
	touched := map[uint32]bool{}
	for i := 7; i < R; i += R / 131 {
		v3[i] = arcEntry(v3[i].Range.Start, v3[i].Range.End, "heir", lease.Gen(R+2))
		touched[wire.BlockOf(v3[i].Range.End, bits)] = true
	}
	lt.NamespaceView("ns", v3, 3)
	got, size = sizedBlocks(t, c.recv(), "ns", bits)
	if len(got) != len(touched) {
		t.Fatalf("a leave of %d blocks' arcs sent %d blocks", len(touched), len(got))
	}
	for b := range got {
		if !touched[b] {
			t.Errorf("block %d sent, untouched", b)
		}
	}
	if size > full/20 {
		t.Errorf("a leave sent %d bytes of a %d-byte table", size, full)
	}
	t.Logf("a leave of %d arcs: %d blocks, %d bytes", len(touched), len(got), size)
}

// TestRingSizeAfterFirstView: a table that hears the ring size only after
// publishing a view (an observer that forwarded no ring first) keeps its
// blocks until the next view, which it cuts anew under the view's LSN:
// every block is sent again, at that version, and those past the new
// count are removed, so a client never takes a block of one size for one
// of another at the same version.
func TestRingSizeAfterFirstView(t *testing.T) {
	ctx := testContext(t)
	fc := newFakeClock()
	lt, conn := newTestServerClock(t, LeaseTableConfig{}, fc)
	v1 := evenArcs(4096) // no ring heard: sized by the view, 1,024 blocks
	lt.NamespaceView("ns", v1, 1)
	c := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	if got, _ := sizedBlocks(t, c.recv(), "ns", 10); len(got) != 1024 {
		t.Fatalf("first view: %d blocks, want 1024", len(got))
	}

	// The ring says R = 64: 64 blocks, from the next view on. The same
	// view again (no new LSN) changes nothing.
	lt.NamespaceRing("ns", ringOf(64), 1)
	fc.Advance(FlushInterval)
	lt.NamespaceView("ns", v1, 1)
	fc.Advance(FlushInterval)
	v2 := slices.Clone(v1)
	v2[9].Owner, v2[9].Addr, v2[9].Gen = "x", "x:1", 5000
	lt.NamespaceView("ns", v2, 2)
	resp := c.recv()
	got, _ := sizedBlocks(t, resp, "ns", wire.MinBlockBits)
	if len(got) != 64 {
		t.Fatalf("cut anew: %d blocks sent, want 64", len(got))
	}
	for _, r := range resp.Resources {
		if r.Version != "2" {
			t.Errorf("%s at version %q, want 2", r.Name, r.Version)
		}
	}
	var removed []string
	for b := uint32(64); b < 1024; b++ {
		removed = append(removed, wire.BlockName("ns", b))
	}
	if g, w := slices.Sorted(slices.Values(resp.RemovedResources)), slices.Sorted(slices.Values(removed)); !slices.Equal(g, w) {
		t.Errorf("removed %d names, want the %d past 64", len(g), len(w))
	}
	var all []lease.Entry
	for b := range uint32(64) {
		all = append(all, got[b]...)
	}
	want := slices.Clone(v2)
	slices.SortFunc(want, func(a, b lease.Entry) int { return cmp.Compare(a.Range.End, b.Range.End) })
	if !slices.Equal(all, want) {
		t.Error("the 64 blocks are not the view")
	}
	if st := lt.Stats(); st.BadViews != 0 {
		t.Errorf("stats %+v", st)
	}
}
