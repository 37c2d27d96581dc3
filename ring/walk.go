package ring

// Map returns a new table with f applied to every arc's value. It keeps the
// boundaries of t (call Compact to merge arcs f made equal).
func Map[V, W comparable](t *Table[V], f func(V) W) *Table[W] {
	out := &Table[W]{ends: append([]uint64(nil), t.ends...), vals: make([]W, len(t.vals))}
	for i, v := range t.vals {
		out.vals[i] = f(v)
	}
	return out
}

// Walk calls fn for every arc of the common refinement of a and b, in order
// of end position, with the value each table has there. It runs in time
// linear in the number of arcs and does not modify the tables.
func Walk[V, W comparable](a *Table[V], b *Table[W], fn func(r Range, va V, vb W)) {
	ae, be := a.ends, b.ends
	// The union of ends, in order, without duplicates.
	last := ae[len(ae)-1]
	if be[len(be)-1] > last {
		last = be[len(be)-1]
	}
	if len(ae) == 1 && len(be) == 1 && ae[0] == be[0] {
		fn(Full(), a.vals[0], b.vals[0])
		return
	}
	prev := last
	i, j := 0, 0
	for i < len(ae) || j < len(be) {
		var e uint64
		switch {
		case j >= len(be) || (i < len(ae) && ae[i] < be[j]):
			e = ae[i]
		case i >= len(ae) || be[j] < ae[i]:
			e = be[j]
		default:
			e = ae[i]
		}
		// The arc (prev, e] lies in a's arc i (or arc 0 past the last end)
		// and in b's arc j.
		ia, jb := i, j
		if ia == len(ae) {
			ia = 0
		}
		if jb == len(be) {
			jb = 0
		}
		fn(Range{Start: prev, End: e}, a.vals[ia], b.vals[jb])
		prev = e
		if i < len(ae) && ae[i] == e {
			i++
		}
		if j < len(be) && be[j] == e {
			j++
		}
	}
}

// WalkIn is Walk restricted to r: it calls fn for every arc of the common
// refinement of a and b that lies in r, cut at r's ends, clockwise from
// r.Start. It runs in time linear in the number of those arcs (plus two
// binary searches) and does not modify the tables. For the whole circle it
// is Walk.
func WalkIn[V, W comparable](a *Table[V], b *Table[W], r Range, fn func(r Range, va V, vb W)) {
	if r.IsFull() {
		Walk(a, b, fn)
		return
	}
	length := r.End - r.Start // (0, 2^64)
	off := func(x uint64) uint64 { return x - r.Start }
	ia, ib := a.Find(r.Start+1), b.Find(r.Start+1)
	cur := uint64(0) // offset of the last cut
	for cur < length {
		na, nb := off(a.ends[ia]), off(b.ends[ib])
		// Past r, round the circle, or the lone end of a one-arc table
		// (the whole circle, with no boundary): no more cuts from it.
		if na <= cur || na == 0 || len(a.ends) == 1 {
			na = length
		}
		if nb <= cur || nb == 0 || len(b.ends) == 1 {
			nb = length
		}
		next := min(na, nb, length)
		fn(Range{Start: r.Start + cur, End: r.Start + next}, a.vals[ia], b.vals[ib])
		cur = next
		if na == next && next < length {
			ia = (ia + 1) % len(a.ends)
		}
		if nb == next && next < length {
			ib = (ib + 1) % len(b.ends)
		}
	}
}
