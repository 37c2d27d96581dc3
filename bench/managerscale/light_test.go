package main

import (
	"slices"
	"sync/atomic"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestLightCodec checks what a light lookup reads from a response against
// the response built with the generated messages: type, nonce, each
// block's number and version, the first block's bit count and the blocks
// removed; names that are not our blocks' are skipped, and a truncated
// response is an error, and so is one cut short in any of the buffers it
// arrived in.
func TestLightCodec(t *testing.T) {
	blk := func(b uint32, v string) *discovery.Resource {
		// Block 4095 has more arcs, so that its length needs a varint
		// of two bytes, which a cut may split.
		var es []lease.Entry
		for i := range 1 + 4*int(b/4095) {
			start := uint64(b)<<52 + uint64(i)*10
			es = append(es, lease.Entry{Range: ring.Range{Start: start, End: start + 9}, Owner: "o", Addr: "o:1", Gen: 3})
		}
		a, err := anypb.New(wire.ArcBlock(namespace, 12, b, es))
		if err != nil {
			t.Fatal(err)
		}
		return &discovery.Resource{Name: wire.BlockName(namespace, b), Version: v, Resource: a}
	}
	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: "99", TypeUrl: "type.googleapis.com/fuge.v1.ArcBlock", Nonce: "17",
		Resources:        []*discovery.Resource{blk(4095, "98"), blk(7, "12"), {Name: "other/block/3", Version: "5"}},
		RemovedResources: []string{wire.BlockName(namespace, 5), "x"},
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	// Block 7's arc is (7<<52, 7<<52+9] at o:1: a watch of a point in it
	// at o:1 is hit, one at another address or of a point outside is not.
	var watch atomic.Pointer[pointWatch]
	r := lightResp{watch: &watch}
	for _, tc := range []struct {
		w    *pointWatch
		want bool
	}{
		{nil, false},
		{&pointWatch{h: 7<<52 + 5, addr: "o:1", at: true}, true},
		{&pointWatch{h: 7<<52 + 9, addr: "o:1", at: true}, true},
		{&pointWatch{h: 7<<52 + 5, addr: "o:1", at: false}, false},
		{&pointWatch{h: 7<<52 + 5, addr: "p:1", at: false}, true},
		{&pointWatch{h: 7<<52 + 10, addr: "o:1", at: true}, false},
		{&pointWatch{h: 7 << 52, addr: "o:1", at: true}, false},
	} {
		watch.Store(tc.w)
		if err := (lightCodec{}).Unmarshal(one(b), &r); err != nil {
			t.Fatal(err)
		}
		if r.hit != tc.want {
			t.Errorf("watch %+v: hit %v, want %v", tc.w, r.hit, tc.want)
		}
	}
	if r.typeURL != resp.TypeUrl || r.nonce != "17" || r.bits != 12 ||
		!slices.Equal(r.blocks, []lightBlock{{4095, 98}, {7, 12}}) || !slices.Equal(r.removed, []uint32{5}) {
		t.Fatalf("read %+v", r)
	}
	if err := (lightCodec{}).Unmarshal(one(b[:len(b)-4]), &r); err == nil {
		t.Error("a truncated response was read")
	}

	// Cut into buffers anywhere, as gRPC hands a response over in the
	// frames it arrived in, the response reads the same.
	watch.Store(&pointWatch{h: 7<<52 + 5, addr: "o:1", at: true})
	if err := (lightCodec{}).Unmarshal(one(b), &r); err != nil {
		t.Fatal(err)
	}
	want := r
	want.blocks, want.removed = slices.Clone(r.blocks), slices.Clone(r.removed)
	for size := 1; size < len(b); size++ {
		for _, cut := range [][]int{{size}, chunks(len(b), size)} {
			var bufs mem.BufferSlice
			from := 0
			for _, to := range append(cut, len(b)) {
				bufs = append(bufs, mem.SliceBuffer(b[from:to]))
				from = to
			}
			if err := (lightCodec{}).Unmarshal(bufs, &r); err != nil {
				t.Fatalf("cut at %v: %v", cut, err)
			}
			if r.typeURL != want.typeURL || r.nonce != want.nonce || r.bits != want.bits || r.hit != want.hit ||
				!slices.Equal(r.blocks, want.blocks) || !slices.Equal(r.removed, want.removed) {
				t.Fatalf("cut at %v: read %+v, want %+v", cut, r, want)
			}
			last := bufs[len(bufs)-1].ReadOnlyData()
			bufs[len(bufs)-1] = mem.SliceBuffer(last[:len(last)-1])
			if err := (lightCodec{}).Unmarshal(bufs, &r); err == nil {
				t.Fatalf("cut at %v: the response without its last byte was read", cut)
			}
		}
	}

	// Applied, the blocks are held at their versions; a lookup holds the
	// table once it holds all 4,096.
	watch.Store(&pointWatch{h: 7<<52 + 5, addr: "o:1", at: true})
	if err := (lightCodec{}).Unmarshal(one(b), &r); err != nil {
		t.Fatal(err)
	}
	l := &lightLookup{watch: &watch, ready: make(chan struct{})}
	if err := l.apply(&r); err != nil {
		t.Fatal(err)
	}
	if l.held != 2 || l.versions[4095] != 98 || l.versions[7] != 12 || l.seen.Load() == 0 || l.isReady {
		t.Fatalf("held %d, seen %d, ready %v", l.held, l.seen.Load(), l.isReady)
	}
	r.bits = 64
	if err := l.apply(&r); err == nil {
		t.Error("a bit count out of bounds was taken")
	}
}

// one is a response in one buffer.
func one(b []byte) mem.BufferSlice { return mem.BufferSlice{mem.SliceBuffer(b)} }

// chunks are the cuts of n bytes into pieces of size bytes.
func chunks(n, size int) []int {
	var cuts []int
	for c := size; c < n; c += size {
		cuts = append(cuts, c)
	}
	return cuts
}
