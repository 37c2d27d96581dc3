package main

import (
	"slices"
	"sync/atomic"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
// response is an error.
func TestLightCodec(t *testing.T) {
	blk := func(b uint32, v string) *discovery.Resource {
		e := lease.Entry{Range: ring.Range{Start: uint64(b) << 52, End: uint64(b)<<52 + 9}, Owner: "o", Addr: "o:1", Gen: 3}
		a, err := anypb.New(wire.ArcBlock(namespace, 12, b, []lease.Entry{e}))
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
		if err := (lightCodec{}).Unmarshal(b, &r); err != nil {
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
	if err := (lightCodec{}).Unmarshal(b[:len(b)-4], &r); err == nil {
		t.Error("a truncated response was read")
	}

	// Applied, the blocks are held at their versions; a lookup holds the
	// table once it holds all 4,096.
	watch.Store(&pointWatch{h: 7<<52 + 5, addr: "o:1", at: true})
	if err := (lightCodec{}).Unmarshal(b, &r); err != nil {
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
