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
	var r lightResp
	if err := (lightCodec{}).Unmarshal(b, &r); err != nil {
		t.Fatal(err)
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
	var watch atomic.Int64
	watch.Store(7)
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
