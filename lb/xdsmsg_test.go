package lb

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

func packed(t testing.TB, name string, m proto.Message, typeURL string) *discovery.Resource {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &discovery.Resource{Name: name, Version: "v", Resource: &anypb.Any{TypeUrl: typeURL, Value: b}}
}

// blockRes is block b of ns holding es, packed as an ArcBlock resource
// named for it.
func blockRes(t testing.TB, ns string, b uint32, es ...lease.Entry) *discovery.Resource {
	return packed(t, wire.BlockName(ns, b), wire.ArcBlock(ns, testBits, b, es), ArcBlockTypeURL)
}

func TestDecodeBlocks(t *testing.T) {
	const b = 32 // quarters[1] = (q, 2q] ends in block 32
	good := quarters[1]
	name := wire.BlockName(ns, b)
	lo := good.Range.End // the block's first position: (q, lo] is good
	mid, hi := lo+1000, lo+5000
	withArc := func(a *fugev1.Arc) *discovery.Resource {
		return packed(t, name, &fugev1.ArcBlock{Namespace: ns, Block: b, BlockBits: testBits, Arcs: []*fugev1.Arc{a}}, ArcBlockTypeURL)
	}
	withBits := func(bits, blk uint32) *discovery.Resource {
		return packed(t, wire.BlockName(ns, blk), &fugev1.ArcBlock{Namespace: ns, Block: blk, BlockBits: bits}, ArcBlockTypeURL)
	}
	tests := []struct {
		name string
		res  *discovery.Resource
		want []lease.Entry // nil: the response is refused
	}{
		{"good", blockRes(t, ns, b, good), []lease.Entry{good}},
		{"empty block", blockRes(t, ns, b), []lease.Entry{}},
		{"free arc", blockRes(t, ns, b, ent(q, 2*q, "", 3)), []lease.Entry{ent(q, 2*q, "", 3)}},
		{"arcs in ring order", blockRes(t, ns, b, ent(q, lo, "a", 1), ent(lo, mid, "", 2), ent(mid, hi, "c", 3)),
			[]lease.Entry{ent(q, lo, "a", 1), ent(lo, mid, "", 2), ent(mid, hi, "c", 3)}},
		{"no body", &discovery.Resource{Name: name}, nil},
		{"wrong type", packed(t, name, wire.ArcBlock(ns, testBits, b, []lease.Entry{good}), HeartbeatTypeURL), nil},
		{"an Arc", packed(t, name, wire.Arc(ns, good), "type.googleapis.com/fuge.v1.Arc"), nil},
		{"garbage", &discovery.Resource{Name: name, Resource: &anypb.Any{TypeUrl: ArcBlockTypeURL, Value: []byte{0xff, 0xff}}}, nil},
		{"other namespace", blockRes(t, "x", b, good), nil},
		{"other namespace, our name", packed(t, name, wire.ArcBlock("x", testBits, b, []lease.Entry{good}), ArcBlockTypeURL), nil},
		{"name of another block", packed(t, wire.BlockName(ns, b+1), wire.ArcBlock(ns, testBits, b, []lease.Entry{good}), ArcBlockTypeURL), nil},
		{"name not a block's", packed(t, wire.ArcName(ns, good.Range), wire.ArcBlock(ns, testBits, b, []lease.Entry{good}), ArcBlockTypeURL), nil},
		{"block out of range", withBits(testBits, testBlocks), nil},
		{"last block of the most", withBits(wire.MaxBlockBits, 1<<wire.MaxBlockBits-1), []lease.Entry{}},
		{"block out of range of the most", withBits(wire.MaxBlockBits, 1<<wire.MaxBlockBits), nil},
		{"no bit count", withBits(0, 0), nil},
		{"too few bits", withBits(wire.MinBlockBits-1, 0), nil},
		{"too many bits", withBits(wire.MaxBlockBits+1, 0), nil},
		{"arc in the block at other bits", packed(t, name, wire.ArcBlock(ns, testBits+1, b, []lease.Entry{good}), ArcBlockTypeURL), nil},
		{"arc ending in another block", blockRes(t, ns, b, quarters[2]), nil},
		{"owner without address", withArc(&fugev1.Arc{Namespace: ns, Range: wire.Range(good.Range), Owner: "b", Gen: 2}), nil},
		{"no range", withArc(&fugev1.Arc{Namespace: ns, Gen: 2}), nil},
		{"arcs out of order", blockRes(t, ns, b, ent(lo, mid, "c", 3), ent(q, lo, "a", 1)), nil},
		{"gap between arcs", blockRes(t, ns, b, ent(q, lo, "a", 1), ent(mid, hi, "c", 3)), nil},
		{"overlapping arcs", blockRes(t, ns, b, ent(q, mid, "a", 1), ent(lo, hi, "c", 3)), nil},
		{"the same arc twice", blockRes(t, ns, b, good, good), nil},
	}
	for _, tt := range tests {
		u, err := decodeBlocks(ns, &discovery.DeltaDiscoveryResponse{TypeUrl: ArcBlockTypeURL, Resources: []*discovery.Resource{tt.res}})
		if (err == nil) != (tt.want != nil) || (err != nil && !errors.Is(err, ErrBadResource)) {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.want != nil)
			continue
		}
		if err != nil {
			continue
		}
		if h, ok := u.set[tt.res.Name]; len(u.set) != 1 || !ok || h.version != "v" || !slices.Equal(h.entries, tt.want) {
			t.Errorf("%s: decoded %v, want %v at version v", tt.name, u.set, tt.want)
		}
	}

	// One bad block refuses the whole response, and so does a block sent
	// twice.
	resp := &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{blockRes(t, ns, b, good), blockRes(t, ns, 0, quarters[0])}}
	if _, err := decodeBlocks(ns, resp); err == nil {
		t.Error("a response with a bad block decoded")
	}
	resp.Resources[1] = blockRes(t, ns, b, good)
	if _, err := decodeBlocks(ns, resp); err == nil {
		t.Error("a block sent twice decoded")
	}
	// Blocks of two bit counts in one response: the manager cuts a table
	// one way at a time.
	resp.Resources[1] = withBits(testBits+1, 0)
	if _, err := decodeBlocks(ns, resp); err == nil {
		t.Error("blocks of two sizes decoded")
	}
	resp.Resources[1] = withBits(testBits, 0)
	if u, err := decodeBlocks(ns, resp); err != nil || u.bits != testBits {
		t.Errorf("blocks of one size: bits %d, %v", u.bits, err)
	}

	// Removed names are kept when they are our block names (of any bit
	// count: up to 4,096 blocks).
	last := uint32(1<<wire.MaxBlockBits - 1)
	resp = &discovery.DeltaDiscoveryResponse{RemovedResources: []string{
		wire.BlockName(ns, 0), wire.BlockName(ns, 63), wire.BlockName(ns, last), wire.BlockName(ns, last+1), "ns/block/01", "ns/block/-1",
		wire.BlockName("x", 1), "ns/x", "ns/block/", wire.ArcName(ns, good.Range),
	}}
	u, err := decodeBlocks(ns, resp)
	if want := []string{wire.BlockName(ns, 0), wire.BlockName(ns, 63), wire.BlockName(ns, last)}; err != nil || !slices.Equal(u.removed, want) || len(u.set) != 0 {
		t.Errorf("removed %v (%v), want %v", u.removed, err, want)
	}

	hb := packed(t, HeartbeatName(ns), &fugev1.Heartbeat{Namespace: ns, Seq: 1}, HeartbeatTypeURL)
	if err := checkHeartbeats(ns, &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{hb}}); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	hb = packed(t, HeartbeatName("x"), &fugev1.Heartbeat{Namespace: "x", Seq: 1}, HeartbeatTypeURL)
	if err := checkHeartbeats(ns, &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{hb}}); err == nil {
		t.Error("another namespace's heartbeat passed")
	}
}

func TestTableOf(t *testing.T) {
	names := blockNames(ns, testBits)
	if len(names) != testBlocks || names[0] != ns+"/block/0" || names[63] != ns+"/block/63" {
		t.Fatalf("block names %v", names)
	}
	held := func(es ...lease.Entry) map[string]heldBlock {
		m := make(map[string]heldBlock, testBlocks)
		for b, blk := range tableBlocks(ns, es) {
			m[wire.BlockName(ns, b)] = heldBlock{entries: mustEntries(t, blk), version: "1"}
		}
		return m
	}
	es, err := tableOf(names, held(quarters...), nil)
	if want := []lease.Entry{quarters[3], quarters[0], quarters[1], quarters[2]}; err != nil || !slices.Equal(es, want) {
		t.Errorf("quarters: %v (%v), want %v", es, err, want)
	}
	full := ent(5, 5, "a", 1)
	if es, err := tableOf(names, held(full), nil); err != nil || !slices.Equal(es, []lease.Entry{full}) {
		t.Errorf("one full arc: %v (%v)", es, err)
	}
	for name, h := range map[string]map[string]heldBlock{
		"no arcs":                held(),
		"one arc, not full":      held(ent(5, 6, "a", 1)),
		"a gap":                  held(quarters[0], quarters[1], quarters[3]),
		"an overlap":             held(quarters[0], ent(q/2, 2*q, "b", 2), quarters[2], quarters[3]),
		"a full arc and another": held(ent(q, q, "a", 1), ent(0, q/2, "b", 2)),
	} {
		if es, err := tableOf(names, h, nil); err == nil {
			t.Errorf("%s: complete table %v", name, es)
		}
	}
	missing := held(quarters...)
	delete(missing, wire.BlockName(ns, 5)) // an empty block, not yet held
	if es, err := tableOf(names, missing, nil); err == nil {
		t.Errorf("a missing block: complete table %v", es)
	}
	missing[wire.BlockName(ns, 5)] = heldBlock{} // removed: held empty
	if _, err := tableOf(names, missing, nil); err != nil {
		t.Errorf("a removed empty block: %v", err)
	}
}

func mustEntries(t testing.TB, blk *fugev1.ArcBlock) []lease.Entry {
	es, err := wire.EntriesFromBlock(ns, blk)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// FuzzDecode decodes arbitrary responses: no panic, and what decodes is a
// block named for its number, holding valid arcs that end in it and follow
// each other in ring order.
func FuzzDecode(f *testing.F) {
	seeds := [][]*discovery.Resource{
		{blockRes(f, ns, 0, quarters[3]), blockRes(f, ns, 16, quarters[0])},
		{blockRes(f, ns, 32, ent(q, 2*q, "a", 1), ent(2*q, 2*q+5, "", 2)), blockRes(f, ns, 7)},
	}
	for _, rs := range seeds {
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: ArcBlockTypeURL, Nonce: "1", Resources: rs,
			RemovedResources: []string{wire.BlockName(ns, 3), "ns/x"}}
		b, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp discovery.DeltaDiscoveryResponse
		if proto.Unmarshal(b, &resp) != nil {
			return
		}
		_ = checkHeartbeats(ns, &resp)
		u, err := decodeBlocks(ns, &resp)
		if err != nil {
			return
		}
		for name, h := range u.set {
			if !isBlockName(ns, name) {
				t.Fatalf("block %q decoded", name)
			}
			for i, e := range h.entries {
				if wire.BlockName(ns, wire.BlockOf(e.Range.End, testBits)) != name {
					t.Fatalf("block %q holds %v", name, e.Range)
				}
				if e.Owner != "" && e.Addr == "" {
					t.Fatalf("block %q holds %v without an address", name, e.Range)
				}
				if i > 0 && (e.Range.Start != h.entries[i-1].Range.End || e.Range.End <= h.entries[i-1].Range.End) {
					t.Fatalf("block %q: %v follows %v", name, e.Range, h.entries[i-1].Range)
				}
			}
		}
		for _, name := range u.removed {
			if !isBlockName(ns, name) {
				t.Fatalf("removed %q kept", name)
			}
		}
	})
}

// TestTableOfArena checks that a whole table, its blocks sent in any
// order, is decoded into one array that tableOf returns as the table
// without copying it, and that after a response of one block the table
// (a copy) is the same arcs with that block's replaced.
func TestTableOfArena(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	var es []lease.Entry
	const n = 300
	for i := range uint64(n) {
		o := fmt.Sprintf("o%d", rnd.IntN(7))
		es = append(es, lease.Entry{Range: ring.Range{Start: i * (1 << 64 / n), End: (i + 1) * (1 << 64 / n)}, Owner: o, Addr: o + ":1", Gen: lease.Gen(1 + rnd.IntN(9))})
	}
	es[n-1].Range.End = 0
	want := append([]lease.Entry{es[n-1]}, es[:n-1]...) // in order of End: the arc ending at 0 first
	var res []*discovery.Resource
	for b, blk := range tableBlocks(ns, es) {
		res = append(res, packed(t, wire.BlockName(ns, b), blk, ArcBlockTypeURL))
	}
	rnd.Shuffle(len(res), func(i, j int) { res[i], res[j] = res[j], res[i] })
	u, err := decodeBlocks(ns, &discovery.DeltaDiscoveryResponse{TypeUrl: ArcBlockTypeURL, Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	held := u.set
	got, err := tableOf(blockNames(ns, testBits), held, u.arena)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("whole table: %v (%v), want %v", got, err, want)
	}
	if len(got) != len(u.arena) || &got[0] != &u.arena[0] {
		t.Fatal("the whole table was copied, not the decoded array")
	}
	first := slices.Clone(got)
	// One block again, its first arc at a new generation.
	b := wire.BlockOf(want[10].Range.End, testBits)
	var inBlock []lease.Entry
	for i := range want {
		if wire.BlockOf(want[i].Range.End, testBits) == b {
			if len(inBlock) == 0 {
				want[i].Gen = 100
			}
			inBlock = append(inBlock, want[i])
		}
	}
	u2, err := decodeBlocks(ns, &discovery.DeltaDiscoveryResponse{TypeUrl: ArcBlockTypeURL, Resources: []*discovery.Resource{blockRes(t, ns, b, inBlock...)}})
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(held, u2.set)
	got2, err := tableOf(blockNames(ns, testBits), held, u2.arena)
	if err != nil || !slices.Equal(got2, want) {
		t.Fatalf("after one block: %v (%v), want %v", got2, err, want)
	}
	if &got2[0] == &got[0] {
		t.Fatal("the table after one block is the first table's array")
	}
	if !slices.Equal(got, first) {
		t.Fatal("the first table changed")
	}
}

// The tables of these tests are small: served in the fewest blocks.
const (
	testBits   = wire.MinBlockBits
	testBlocks = 1 << testBits
)
