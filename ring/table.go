package ring

import "slices"

// Table partitions the whole circle into arcs, each carrying a value. Arc i
// is (end[i-1], end[i]], and arc 0 wraps: (end[n-1], end[0]]. A Table always
// has at least one arc; a fresh Table is one arc with the zero value.
//
// The lease table, an owner's held set and a lookup's copy of the lease table
// are Tables. The zero Table is not usable; use NewTable.
type Table[V comparable] struct {
	ends []uint64
	vals []V
}

// NewTable returns a table holding v on the whole circle.
func NewTable[V comparable](v V) *Table[V] {
	return &Table[V]{ends: []uint64{0}, vals: []V{v}}
}

// Clone returns a deep copy.
func (t *Table[V]) Clone() *Table[V] {
	return &Table[V]{ends: slices.Clone(t.ends), vals: slices.Clone(t.vals)}
}

// Len is the number of arcs.
func (t *Table[V]) Len() int { return len(t.ends) }

// At returns arc i and its value.
func (t *Table[V]) At(i int) (Range, V) {
	return t.arc(i), t.vals[i]
}

// Value returns the value of arc i.
func (t *Table[V]) Value(i int) V { return t.vals[i] }

// SetValue replaces the value of arc i.
func (t *Table[V]) SetValue(i int, v V) { t.vals[i] = v }

func (t *Table[V]) arc(i int) Range {
	if len(t.ends) == 1 {
		return Full()
	}
	p := i - 1
	if p < 0 {
		p = len(t.ends) - 1
	}
	return Range{Start: t.ends[p], End: t.ends[i]}
}

// Find returns the index of the arc containing h. It does not allocate.
func (t *Table[V]) Find(h uint64) int {
	es := t.ends
	lo, hi := 0, len(es)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if es[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(es) {
		return 0
	}
	return lo
}

// Get returns the value at h.
func (t *Table[V]) Get(h uint64) V { return t.vals[t.Find(h)] }

// Split makes x an arc boundary (the end of an arc), copying the value of the
// arc that contained it. It returns the index of the arc that now ends at x.
func (t *Table[V]) Split(x uint64) int {
	i := t.Find(x)
	if t.ends[i] == x {
		return i
	}
	// Arc i = (prev, ends[i]] contains x; it becomes (prev, x] and (x, ends[i]].
	// When i == 0 wraps and x is past the last end, the new end goes last.
	if x > t.ends[len(t.ends)-1] {
		t.ends = append(t.ends, x)
		t.vals = append(t.vals, t.vals[i])
		return len(t.ends) - 1
	}
	t.ends = slices.Insert(t.ends, i, x)
	t.vals = slices.Insert(t.vals, i, t.vals[i])
	return i
}

// SplitSorted does what Split does for every x in xs, which must be in
// ascending order (duplicates allowed), in one pass: O(Len() + len(xs))
// instead of one insertion per new boundary. The manager splits its lease
// table at every entry of the desired ring (up to 2^23) on each change.
// It works in place: no allocation when every x is a boundary already, and
// otherwise only when the slices must grow (copying the table on every
// call was 40% of what a 5,000-owner join storm allocated).
func (t *Table[V]) SplitSorted(xs []uint64) {
	n := len(t.ends)
	// How many boundaries are new.
	k, i := 0, 0
	for j, x := range xs {
		for i < n && t.ends[i] < x {
			i++
		}
		if i < n && t.ends[i] == x || j > 0 && xs[j-1] == x {
			continue
		}
		k++
	}
	if k == 0 {
		return
	}
	v0 := t.vals[0] // the wrapping arc's value, for points past the last end
	t.ends = slices.Grow(t.ends, k)[:n+k]
	t.vals = slices.Grow(t.vals, k)[:n+k]
	// Merge from the back: w is the next place to fill, i the next old arc.
	w, i := n+k-1, n-1
	for j := len(xs) - 1; j >= 0; j-- {
		x := xs[j]
		if j > 0 && xs[j-1] == x {
			continue
		}
		for i >= 0 && t.ends[i] > x {
			t.ends[w], t.vals[w] = t.ends[i], t.vals[i]
			w, i = w-1, i-1
		}
		if i >= 0 && t.ends[i] == x {
			continue
		}
		// x splits the arc that now follows it (placed at w+1), or the
		// wrapping arc when nothing does.
		v := v0
		if w+1 < n+k {
			v = t.vals[w+1]
		}
		t.ends[w], t.vals[w] = x, v
		w--
	}
}

// Refine splits the table at every boundary of r.
func (t *Table[V]) Refine(r Range) {
	t.Split(r.Start)
	if r.End != r.Start {
		t.Split(r.End)
	}
}

// Span returns the indices of the arcs that make up r after Refine(r), in
// clockwise order starting after r.Start. It calls Refine itself.
func (t *Table[V]) Span(r Range, fn func(i int)) {
	t.Refine(r)
	// The first arc of r is the one after the arc ending at r.Start.
	i := t.Find(r.Start) + 1
	n := len(t.ends)
	for k := 0; k < n; k++ {
		j := (i + k) % n
		fn(j)
		if t.ends[j] == r.End {
			return
		}
	}
}

// Set assigns v to every point of r. Inserting its boundaries takes
// O(Len()); to assign many ranges, use SetAll.
func (t *Table[V]) Set(r Range, v V) {
	t.Span(r, func(i int) { t.vals[i] = v })
}

// Assignment is one Set: Value on every point of Range.
type Assignment[V comparable] struct {
	Range Range
	Value V
}

// SetAll does what Set does for each assignment in turn, a later one winning
// where two overlap, and leaves exactly the table those Sets would. A run of
// assignments that follow each other clockwise without overlapping (a sorted
// partition, a Diff, the lookups' changes of one step) is applied in one
// merge pass: O(Len() + k log k) for k assignments instead of O(Len()) each.
// An owner's held set, a lookup's table and the replicated lease table are
// rebuilt this way from tens of thousands of ranges at R = 65536.
func (t *Table[V]) SetAll(as []Assignment[V]) {
	t.update(len(as), func(i int) Range { return as[i].Range },
		func(i int, _ Range, _ V) V { return as[i].Value })
}

// UpdateAll replaces, for each range rs[i] in turn, the value of every arc
// inside it with fn(i, arc, old value): what Span(rs[i], ...) with
// SetValue(j, fn(i, arc j, value j)) would do, calling fn in the same order
// and leaving the same table, at SetAll's cost. fn must not modify t.
func (t *Table[V]) UpdateAll(rs []Range, fn func(i int, r Range, old V) V) {
	t.update(len(rs), func(i int) Range { return rs[i] }, fn)
}

// update is UpdateAll over k ranges given by rangeAt. It cuts the ranges
// into runs of pairwise disjoint ones in clockwise order (see disjointRun).
// Within a run no range has a boundary strictly inside another, so
// splitting at all of the run's boundaries first and then walking each range
// leaves the arcs, values and calls that refining before each range would.
func (t *Table[V]) update(k int, rangeAt func(int) Range, fn func(int, Range, V) V) {
	var xs []uint64
	for lo := 0; lo < k; {
		hi := disjointRun(lo, k, rangeAt)
		xs = xs[:0]
		for i := lo; i < hi; i++ {
			r := rangeAt(i)
			xs = append(xs, r.Start)
			if r.End != r.Start {
				xs = append(xs, r.End)
			}
		}
		t.splitAll(xs)
		for i := lo; i < hi; i++ {
			r := rangeAt(i)
			// As Span: from the arc after the one ending at r.Start,
			// clockwise, to the arc ending at r.End.
			n := len(t.ends)
			j := t.Find(r.Start) + 1
			for c := 0; c < n; c++ {
				if j == n {
					j = 0
				}
				t.vals[j] = fn(i, t.arc(j), t.vals[j])
				if t.ends[j] == r.End {
					break
				}
				j++
			}
		}
		lo = hi
	}
}

// SplitAll makes every x in xs (any order; xs may be reordered) an arc
// boundary, as Split does for each: a handful of new boundaries are
// inserted in place, more are merged in one pass (SplitSorted).
func (t *Table[V]) SplitAll(xs []uint64) { t.splitAll(xs) }

// splitAll makes every x in xs (any order) an arc boundary. A handful of new
// boundaries are inserted one by one, in place; more are merged in one pass.
func (t *Table[V]) splitAll(xs []uint64) {
	const inPlace = 4
	fresh := 0
	for _, x := range xs {
		if t.ends[t.Find(x)] != x {
			if fresh++; fresh > inPlace {
				break
			}
		}
	}
	switch {
	case fresh == 0:
	case fresh <= inPlace:
		for _, x := range xs {
			t.Split(x)
		}
	default:
		slices.Sort(xs)
		t.SplitSorted(xs)
	}
}

// disjointRun returns hi such that the ranges lo..hi-1 are pairwise disjoint
// and lie in clockwise order from the start of range lo without passing it
// again; hi > lo. A whole-circle range is a run of its own.
func disjointRun(lo, k int, rangeAt func(int) Range) int {
	first := rangeAt(lo)
	if first.IsFull() {
		return lo + 1
	}
	// Offsets are clockwise distances from the anchor; the ranges so far
	// cover at most (0, covered]. covered == 0 means the run reached the
	// anchor again: (0, 2^64].
	anchor := first.Start
	covered := first.End - anchor
	for hi := lo + 1; hi < k; hi++ {
		r := rangeAt(hi)
		if covered == 0 || r.IsFull() {
			return hi
		}
		s, e := r.Start-anchor, r.End-anchor
		if s < covered || (e <= s && e != 0) {
			return hi
		}
		covered = e
	}
	return k
}

// Each calls fn for every arc in order of end position.
func (t *Table[V]) Each(fn func(r Range, v V)) {
	for i := range t.ends {
		fn(t.arc(i), t.vals[i])
	}
}

// Compact merges adjacent arcs with equal values (including across the
// wrap). It works in place: it allocates nothing, and a table with nothing
// to merge is only read.
func (t *Table[V]) Compact() {
	n := len(t.ends)
	if n <= 1 {
		return
	}
	// The first arc that merges into its successor; before it nothing moves.
	i := 0
	for i+1 < n && t.vals[i] != t.vals[i+1] {
		i++
	}
	k := i // arcs [0, k) are kept in place
	for ; i < n; i++ {
		// Arc i merges into arc i+1 (which ends later) when values are equal.
		if i+1 < n && t.vals[i] == t.vals[i+1] {
			continue
		}
		t.ends[k], t.vals[k] = t.ends[i], t.vals[i]
		k++
	}
	// The last kept arc and the first kept arc meet at the wrap.
	if k > 1 && t.vals[0] == t.vals[k-1] {
		k--
	}
	var zero V
	for j := k; j < n; j++ {
		t.vals[j] = zero // drop references the kept arcs no longer hold
	}
	t.ends, t.vals = t.ends[:k], t.vals[:k]
}

// Equal reports whether two tables give the same value at every point.
func Equal[V comparable](a, b *Table[V]) bool {
	x, y := a.Clone(), b.Clone()
	y.SplitSorted(a.ends)
	x.SplitSorted(b.ends)
	return slices.Equal(x.ends, y.ends) && slices.Equal(x.vals, y.vals)
}

// CountMerged is how many arcs t would have after Compact, without changing
// it: the number of neighbours (across the wrap too) whose values differ, or
// 1 when there are none.
func CountMerged[V comparable](t *Table[V]) int {
	n := len(t.vals)
	k := 0
	for i := range n {
		if t.vals[i] != t.vals[(i+1)%n] {
			k++
		}
	}
	return max(k, 1)
}
