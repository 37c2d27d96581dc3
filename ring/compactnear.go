package ring

import "slices"

// CompactNear does what Compact does, looking only at the ends that lie in
// one of rs (from Start to End inclusive, clockwise) or are one of xs: the
// only places where neighbours can have become equal when the table was
// compact, with more than one arc, before its arcs in rs were changed and
// it was split at xs (the end of a table of one arc is arbitrary, and
// splitting it leaves that end between equal arcs: compact that one). It
// costs O((len(rs) + len(xs)) · log n + ends looked at), plus one move of
// the arcs after the first merge, where Compact compares every pair of
// neighbours. A whole-circle range is Compact.
func (t *Table[V]) CompactNear(rs []Range, xs []uint64) {
	n := len(t.ends)
	if n <= 1 {
		return
	}
	var del []int
	mark := func(i int) {
		j := i + 1
		if j == n {
			j = 0
		}
		if t.vals[i] == t.vals[j] {
			del = append(del, i)
		}
	}
	for _, r := range rs {
		if r.IsFull() {
			t.Compact()
			return
		}
		// From the arc containing r.Start (it ends there or later), every
		// end in [r.Start, r.End].
		i := t.Find(r.Start)
		for range n {
			e := t.ends[i]
			if e != r.Start && !r.Contains(e) {
				break
			}
			mark(i)
			if e == r.End {
				break
			}
			if i++; i == n {
				i = 0
			}
		}
	}
	for _, x := range xs {
		if i := t.Find(x); t.ends[i] == x {
			mark(i)
		}
	}
	if len(del) == 0 {
		return
	}
	slices.Sort(del)
	del = slices.Compact(del)
	if len(del) == n {
		del = del[:n-1] // one arc is left, ending where Compact leaves it
	}
	k, d := del[0], 0
	for i := del[0]; i < n; i++ {
		if d < len(del) && del[d] == i {
			d++
			continue
		}
		t.ends[k], t.vals[k] = t.ends[i], t.vals[i]
		k++
	}
	var zero V
	for j := k; j < n; j++ {
		t.vals[j] = zero
	}
	t.ends, t.vals = t.ends[:k], t.vals[:k]
}
