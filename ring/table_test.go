package ring

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// model is the naive oracle for Table: the value at a point is the value of
// the last Set whose range contains it, else the initial value.
type model struct {
	init int
	sets []modelSet
}

type modelSet struct {
	r Range
	v int
}

func (m *model) get(h uint64) int {
	for i := len(m.sets) - 1; i >= 0; i-- {
		if m.sets[i].r.Contains(h) {
			return m.sets[i].v
		}
	}
	return m.init
}

// points are where a table and the model are compared: 0, MaxUint64, the
// table's ends and every model boundary with its neighbours, and random
// points. Values are constant between consecutive boundaries, so checking
// each boundary and the point after it is exact.
func (m *model) points(t *Table[int], rng *rand.Rand) []uint64 {
	ps := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1, 1 << 63}
	add := func(x uint64) { ps = append(ps, x-1, x, x+1) }
	for _, e := range t.ends {
		add(e)
	}
	for _, s := range m.sets {
		add(s.r.Start)
		add(s.r.End)
	}
	for range 20 {
		ps = append(ps, rng.Uint64())
	}
	return ps
}

// checkTable verifies the table's invariants and its values against m.
func checkTable(t *testing.T, tb *Table[int], m *model, rng *rand.Rand) {
	t.Helper()
	if len(tb.ends) == 0 || len(tb.ends) != len(tb.vals) {
		t.Fatalf("bad table: %d ends, %d values", len(tb.ends), len(tb.vals))
	}
	for i := 1; i < len(tb.ends); i++ {
		if tb.ends[i-1] >= tb.ends[i] {
			t.Fatalf("ends not strictly increasing: %v", tb.ends)
		}
	}
	for _, h := range m.points(tb, rng) {
		if got, want := tb.Get(h), m.get(h); got != want {
			t.Fatalf("Get(%#x) = %d, model %d; ends %x vals %v", h, got, want, tb.ends, tb.vals)
		}
		if i := tb.Find(h); !tb.arc(i).Contains(h) {
			t.Fatalf("Find(%#x) = arc %d %v, which does not contain it", h, i, tb.arc(i))
		}
	}
	total := 0.0
	tb.Each(func(r Range, _ int) { total += r.Share() })
	if math.Abs(total-1) > 1e-9 {
		t.Fatalf("arcs cover %v of the circle", total)
	}
}

func randPoint(rng *rand.Rand) uint64 {
	switch rng.IntN(4) {
	case 0:
		return []uint64{0, 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}[rng.IntN(5)]
	case 1:
		return uint64(rng.IntN(8)) << 61 // few distinct points: shared boundaries
	}
	return rng.Uint64()
}

func TestTableAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 5))
	for iter := 0; iter < 300; iter++ {
		tb := NewTable(0)
		m := &model{}
		for op := 0; op < 30; op++ {
			switch rng.IntN(6) {
			case 0, 1, 2:
				r := Range{Start: randPoint(rng), End: randPoint(rng)}
				v := rng.IntN(4)
				tb.Set(r, v)
				m.sets = append(m.sets, modelSet{r, v})
			case 3:
				x := randPoint(rng)
				n := tb.Len()
				_, had := slices.BinarySearch(tb.ends, x)
				i := tb.Split(x)
				if tb.ends[i] != x {
					t.Fatalf("Split(%#x) = %d, which ends at %#x", x, i, tb.ends[i])
				}
				if want := n + 1; !had && tb.Len() != want {
					t.Fatalf("Split(%#x): Len %d, want %d", x, tb.Len(), want)
				}
				if had && tb.Len() != n {
					t.Fatalf("Split(%#x) at an existing end changed Len", x)
				}
			case 4:
				counted := CountMerged(tb)
				tb.Compact()
				if counted != tb.Len() {
					t.Fatalf("CountMerged %d, Compact left %d arcs", counted, tb.Len())
				}
				for i := range tb.vals {
					if tb.Len() > 1 && tb.vals[i] == tb.vals[(i+1)%tb.Len()] {
						t.Fatalf("Compact left equal neighbours: %v", tb.vals)
					}
				}
			case 5:
				checkSpan(t, tb, Range{Start: randPoint(rng), End: randPoint(rng)})
			}
			checkTable(t, tb, m, rng)
		}
	}
}

// checkSpan checks that Span visits arcs that tile r exactly, clockwise.
func checkSpan(t *testing.T, tb *Table[int], r Range) {
	t.Helper()
	var arcs []Range
	tb.Span(r, func(i int) { arcs = append(arcs, tb.arc(i)) })
	if len(arcs) == 0 {
		t.Fatalf("Span(%v) visited nothing", r)
	}
	if len(arcs) == 1 && r.IsFull() && arcs[0].IsFull() {
		return // a one-arc table: its arc is the full circle, however written
	}
	if arcs[0].Start != r.Start || arcs[len(arcs)-1].End != r.End {
		t.Fatalf("Span(%v) visited %v", r, arcs)
	}
	for i := 1; i < len(arcs); i++ {
		if arcs[i].Start != arcs[i-1].End {
			t.Fatalf("Span(%v): arcs %v not contiguous", r, arcs)
		}
	}
	share := 0.0
	for _, a := range arcs {
		share += a.Share()
	}
	if math.Abs(share-r.Share()) > 1e-9 {
		t.Fatalf("Span(%v) covers %v, range %v", r, share, r.Share())
	}
}

func TestTableBasics(t *testing.T) {
	tb := NewTable("free")
	if tb.Len() != 1 || !tb.arc(0).IsFull() || tb.Get(12345) != "free" {
		t.Fatal("fresh table is not one full arc")
	}
	// A wrap-around range: (MaxUint64-10, 10].
	wrap := Range{Start: math.MaxUint64 - 10, End: 10}
	tb.Set(wrap, "w")
	for h, want := range map[uint64]string{
		math.MaxUint64 - 10: "free", math.MaxUint64 - 9: "w", math.MaxUint64: "w",
		0: "w", 10: "w", 11: "free", 1 << 63: "free",
	} {
		if got := tb.Get(h); got != want {
			t.Errorf("Get(%#x) = %q, want %q", h, got, want)
		}
	}
	// Setting the whole circle, then compacting, leaves one arc.
	tb.Set(Range{Start: 77, End: 77}, "all")
	tb.Compact()
	if tb.Len() != 1 || tb.Get(0) != "all" || tb.Get(math.MaxUint64) != "all" {
		t.Fatalf("after full Set: %d arcs, ends %v vals %v", tb.Len(), tb.ends, tb.vals)
	}
	// Compact merges across the wrap: (100, 200] differs, the rest is one arc.
	tb.Set(Range{Start: 100, End: 200}, "mid")
	tb.Split(5)
	tb.Split(math.MaxUint64 - 5)
	tb.Compact()
	if tb.Len() != 2 {
		t.Fatalf("Compact: %d arcs, ends %v vals %v", tb.Len(), tb.ends, tb.vals)
	}
	// Clone is deep.
	c := tb.Clone()
	c.Set(Full(), "other")
	if tb.Get(150) != "mid" {
		t.Fatal("Clone shares storage")
	}
	// SetValue and Value address arcs.
	i := tb.Find(150)
	tb.SetValue(i, "mid2")
	if r, v := tb.At(i); v != "mid2" || tb.Value(i) != "mid2" || r != (Range{Start: 100, End: 200}) {
		t.Fatalf("At(%d) = %v %q", i, r, v)
	}
}

func TestTableEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 6))
	for iter := 0; iter < 500; iter++ {
		a, b := NewTable(0), NewTable(0)
		ma, mb := &model{}, &model{}
		for range rng.IntN(5) {
			r, v := Range{Start: randPoint(rng), End: randPoint(rng)}, rng.IntN(2)
			a.Set(r, v)
			ma.sets = append(ma.sets, modelSet{r, v})
			if rng.IntN(3) > 0 { // b often repeats a's operations
				b.Set(r, v)
				mb.sets = append(mb.sets, modelSet{r, v})
			}
		}
		if rng.IntN(2) == 0 {
			b.Split(randPoint(rng)) // structure differs, values do not
		}
		// The oracle: compare the models at every boundary of either and
		// the point after it.
		want := true
		for _, h := range append(ma.points(a, rng), mb.points(b, rng)...) {
			if ma.get(h) != mb.get(h) {
				want = false
			}
		}
		if got := Equal(a, b); got != want {
			t.Fatalf("Equal = %v, want %v; a %x %v, b %x %v", got, want, a.ends, a.vals, b.ends, b.vals)
		}
		if Equal(a, b) != Equal(b, a) {
			t.Fatal("Equal is not symmetric")
		}
	}
}

// FuzzTable applies fuzzed operations to a Table and the naive model. Each
// operation is four bytes: kind, start, end, value; points come from a small
// alphabet so that boundaries coincide often.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 1})
	f.Add([]byte{0, 9, 1, 1, 0, 1, 9, 2, 2, 0, 0, 0})
	f.Add([]byte{0, 3, 3, 1, 1, 4, 0, 0, 2, 0, 0, 0, 3, 1, 7, 0})
	f.Add([]byte{0, 15, 0, 1, 0, 0, 15, 2, 4, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		alphabet := []uint64{0, 1, 2, 1 << 32, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64 - 1,
			math.MaxUint64, 100, 200, 300, 0xdead_beef, 1 << 62, 3 << 62, 0x0123_4567_89ab_cdef}
		pt := func(b byte) uint64 { return alphabet[b%16] + uint64(b/16) }
		rng := rand.New(rand.NewPCG(uint64(len(ops)), 9))
		tb, m := NewTable(0), &model{}
		if len(ops) > 256 {
			ops = ops[:256] // the model is quadratic; long inputs add little
		}
		for len(ops) >= 4 {
			kind, r, v := ops[0]%5, Range{Start: pt(ops[1]), End: pt(ops[2])}, int(ops[3]%3)
			ops = ops[4:]
			switch kind {
			case 0, 1:
				tb.Set(r, v)
				m.sets = append(m.sets, modelSet{r, v})
			case 2:
				tb.Compact()
			case 3:
				if i := tb.Split(r.Start); tb.ends[i] != r.Start {
					t.Fatalf("Split(%#x) = %d ending at %#x", r.Start, i, tb.ends[i])
				}
			case 4:
				checkSpan(t, tb, r)
			}
			checkTable(t, tb, m, rng)
			c := tb.Clone()
			c.Compact()
			if !Equal(c, tb) {
				t.Fatal("Compact changed values")
			}
		}
	})
}
