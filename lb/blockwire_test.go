package lb

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// oracleBlock decodes an ArcBlock the way decodeArcBlock replaces: through
// the generated message and wire.EntriesFromBlock.
func oracleBlock(ns string, b []byte) (uint32, uint32, []lease.Entry, error) {
	var blk fugev1.ArcBlock
	if err := proto.Unmarshal(b, &blk); err != nil {
		return 0, 0, nil, err
	}
	es, err := wire.EntriesFromBlock(ns, &blk)
	return blk.Block, blk.BlockBits, es, err
}

// randomBlock is the encoding of an ArcBlock with arcs in block b, or of
// something close to one: a wrong namespace, an arc outside the block, an
// arc without a range or an address, a bit count or block number out of
// bounds, fields repeated, unknown fields.
func randomBlock(rnd *rand.Rand) []byte {
	bits := wire.MinBlockBits + uint32(rnd.IntN(wire.MaxBlockBits-wire.MinBlockBits+1))
	switch rnd.IntN(20) {
	case 0:
		bits = 0 // missing
	case 1:
		bits = wire.MinBlockBits - 1
	case 2:
		bits = wire.MaxBlockBits + 1
	}
	b := uint32(rnd.IntN(1<<min(bits, wire.MaxBlockBits) + 1)) // one past the last, sometimes
	ns := "ns"
	if rnd.IntN(10) == 0 {
		ns = "other"
	}
	blk := &fugev1.ArcBlock{Namespace: ns, Block: b, BlockBits: bits}
	for i := range rnd.IntN(8) {
		end := uint64(b)<<(64-max(bits, 1)) | rnd.Uint64()>>max(bits, 1)
		if rnd.IntN(20) == 0 {
			end = rnd.Uint64()
		}
		a := &fugev1.Arc{Namespace: ns, Range: &fugev1.Range{Start: end - 5, End: end}, Gen: uint64(i + 1)}
		if rnd.IntN(4) > 0 {
			a.Owner, a.Addr = []string{"a", "b", "c"}[rnd.IntN(3)], "h:1"
		}
		if rnd.IntN(3) == 0 { // migrated: from an older generation, or (malformed) not
			a.MigratedFrom = uint64(rnd.IntN(i + 3))
		}
		switch rnd.IntN(20) {
		case 0:
			a.Range = nil
		case 1:
			a.Addr = ""
		}
		blk.Arcs = append(blk.Arcs, a)
	}
	out, err := proto.Marshal(blk)
	if err != nil {
		panic(err)
	}
	switch rnd.IntN(6) {
	case 0: // a field of the block repeated: the last one wins
		out = protowire.AppendTag(out, 2, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(rnd.IntN(testBlocks)))
		if rnd.IntN(2) == 0 { // and the bit count, perhaps far out of bounds
			out = protowire.AppendTag(out, 10, protowire.VarintType)
			out = protowire.AppendVarint(out, []uint64{wire.MaxBlockBits, 1 << 33, 64}[rnd.IntN(3)])
		}
	case 1: // an unknown field, and a known one with another wire type
		out = protowire.AppendTag(out, 9, protowire.BytesType)
		out = protowire.AppendBytes(out, []byte("x"))
		out = protowire.AppendTag(out, 2, protowire.Fixed32Type)
		out = protowire.AppendFixed32(out, 7)
	case 2: // truncated
		if len(out) > 0 {
			out = out[:rnd.IntN(len(out))]
		}
	case 3: // a byte flipped
		if len(out) > 0 {
			out[rnd.IntN(len(out))] ^= byte(1 + rnd.IntN(255))
		}
	}
	return out
}

// TestDecodeArcBlockMatchesProto checks decodeArcBlock against the
// generated decoder on valid, nearly valid and broken blocks: the same
// entries, or an error from both.
func TestDecodeArcBlockMatchesProto(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	for i := range 20000 {
		b := randomBlock(rnd)
		checkAgainstOracle(t, i, b)
	}
}

// TestDecodeArcBlockFieldNumberTooLarge replays what CI's seed
// 10288025646043963539 found: a flipped byte turned a range's tag into
// field 713564663, above protowire.MaxValidNumber (2^29-1), which
// proto.Unmarshal refuses and protowire.ConsumeTag accepts.
func TestDecodeArcBlockFieldNumberTooLarge(t *testing.T) {
	b, err := hex.DecodeString("0a026e7310a6021a1a0a026e731212a59bc7a115b808409311a0c7a115b808409328015009")
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstOracle(t, 0, b)
	for _, num := range []protowire.Number{protowire.MaxValidNumber, protowire.MaxValidNumber + 1} {
		blk := protowire.AppendTag(nil, num, protowire.VarintType)
		blk = protowire.AppendVarint(blk, 1)
		checkAgainstOracle(t, int(num), blk)
		checkAgainstOracle(t, int(num), append(protowire.AppendTag(nil, blockArcs, protowire.BytesType), protowire.AppendBytes(nil, blk)...))
	}
}

func checkAgainstOracle(t *testing.T, i int, b []byte) {
	t.Helper()
	wb, wbits, want, werr := oracleBlock("ns", b)
	gb, gbits, got, gerr := decodeArcBlock("ns", b, newInterner())
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("case %d (%x): error %v, the generated decoder's %v", i, b, gerr, werr)
	}
	if werr == nil && (gb != wb || gbits != wbits || !slices.Equal(got, want)) {
		t.Fatalf("case %d: block %d of bits %d %v, want block %d of %d %v", i, gb, gbits, got, wb, wbits, want)
	}
}

func FuzzDecodeArcBlock(f *testing.F) {
	rnd := rand.New(rand.NewPCG(1, 0))
	for range 20 {
		f.Add(randomBlock(rnd))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkAgainstOracle(t, 0, b) })
}

// BenchmarkDecodeBlocks measures decoding a whole table of 4,096 arcs held
// by 500 owners, as a lookup does when it connects.
func BenchmarkDecodeBlocks(b *testing.B) {
	var owners []string
	for i := range 500 {
		owners = append(owners, fmt.Sprintf("owner-%04d", i))
	}
	_, es := ringEntries(b, 4096, 7, owners...)
	var blocks [testBlocks][]byte
	for blk := range uint32(testBlocks) {
		var in []lease.Entry
		for _, e := range es {
			if wire.BlockOf(e.Range.End, testBits) == blk {
				in = append(in, e)
			}
		}
		blocks[blk], _ = proto.Marshal(wire.ArcBlock("ns", testBits, blk, in))
	}
	b.Run("protowire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			intern := newInterner()
			for _, blk := range blocks {
				if _, _, _, err := decodeArcBlock("ns", blk, intern); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, blk := range blocks {
				if _, _, _, err := oracleBlock("ns", blk); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// buildTableBySetAll is buildTable as it was, through SetAll: the oracle
// for the merge pass.
func buildTableBySetAll(es []lease.Entry) *ring.Table[value] {
	sorted := slices.Clone(es)
	slices.SortStableFunc(sorted, func(a, b lease.Entry) int { return cmp.Compare(a.Range.End, b.Range.End) })
	as := make([]ring.Assignment[value], len(sorted))
	for i, e := range sorted {
		as[i] = ring.Assignment[value]{Range: e.Range, Value: value{owner: e.Owner, addr: e.Addr, gen: e.Gen}}
	}
	t := ring.NewTable(value{})
	t.SetAll(as)
	t.Compact()
	return t
}

// TestBuildTableMatchesSetAll checks buildTable against SetAll on random
// partitions: some with an arc ending at 0, one arc, arcs of one owner
// next to each other, shuffled or sorted.
func TestBuildTableMatchesSetAll(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	for i := range 5000 {
		n := 1 + rnd.IntN(12)
		ends := map[uint64]bool{}
		for len(ends) < n {
			x := rnd.Uint64() >> uint(rnd.IntN(64))
			if rnd.IntN(8) == 0 {
				x = 0
			}
			ends[x] = true
		}
		xs := slices.Sorted(maps.Keys(ends))
		es := make([]lease.Entry, n)
		for k, x := range xs {
			o := []string{"a", "b", "c"}[rnd.IntN(3)]
			es[k] = lease.Entry{Range: ring.Range{Start: xs[(k+n-1)%n], End: x}, Owner: o, Addr: o + ":1", Gen: lease.Gen(1 + rnd.IntN(2))}
		}
		if rnd.IntN(2) == 0 {
			rnd.Shuffle(n, func(a, b int) { es[a], es[b] = es[b], es[a] })
		}
		got, err := buildTable(es)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if want := buildTableBySetAll(es); !ring.Equal(got, want) || got.Len() != want.Len() {
			t.Fatalf("case %d %v: got %d arcs, SetAll %d", i, es, got.Len(), want.Len())
		}
	}
}

// BenchmarkBuildTable measures building a lookup's table of 4,096 arcs
// among 500 owners.
func BenchmarkBuildTable(b *testing.B) {
	var owners []string
	for i := range 500 {
		owners = append(owners, fmt.Sprintf("owner-%04d", i))
	}
	_, es := ringEntries(b, 4096, 7, owners...)
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := buildTable(es); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("setall", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buildTableBySetAll(es)
		}
	})
}
