package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/fuge-project/fuge/ring"
)

// floor (-floor) searches, for each Zipf parameter and phase of the run's
// keys, the virtual-node counts of -owners owners (o0, o1, ..., as the
// bench names them) with the least max/mean on the true loads, whatever
// the moves it takes: what any policy could reach on this ring, which the
// entry names constrain (an owner's entries are name_0 .. name_{V-1}, so
// the holder of a hot key keeps every entry up to the one that holds it).
// It is a search, not a proof: hill climbing over gives of 1 to 2048
// virtual nodes between two owners, from even counts and from each of the
// first placements of the top key clockwise (the entries before it off
// the ring, their owners capped below their indices). Its figure is an
// upper bound on the least max/mean; the note of issue 14 quotes it as
// "found nothing below".
func floor(o options, w io.Writer) {
	for _, z := range o.zipfs {
		keys, top := drawKeys(o.seed, z, o.keys)
		cdf, _ := zipfCDF(o.keys, z)
		for ph := range 2 {
			f := newFloorRing(o.owners, o.ringSize, keys[ph], cdf)
			best, counts := f.search()
			fmt.Fprintf(w, "floor zipf=%g owners=%d phase=%d: max/mean %.3f (counts %v; top key %s at %.1f%% of the load, mean share %.1f%%)\n",
				z, o.owners, ph, best, counts, top[ph], 100*cdf[0], 100/float64(o.owners))
		}
	}
}

// floorRing is every owner's candidate entries (indices 0 to R-1) in
// circle order, with the load of the keys between each and the one before.
type floorRing struct {
	n, r  int
	owner []int
	idx   []int
	load  []float64 // of the keys in (previous entry, this one]
	top   int       // the entry first at or after the top key
}

func newFloorRing(n, r int, keys []uint64, cdf []float64) *floorRing {
	type pt struct {
		h      uint64
		o, idx int
	}
	pts := make([]pt, 0, n*r)
	for o := range n {
		name := fmt.Sprintf("o%d", o)
		for i := range r {
			pts = append(pts, pt{ring.EntryHash(name, i), o, i})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int { return cmp.Compare(a.h, b.h) })
	f := &floorRing{n: n, r: r, owner: make([]int, len(pts)), idx: make([]int, len(pts)), load: make([]float64, len(pts))}
	for i, p := range pts {
		f.owner[i], f.idx[i] = p.o, p.idx
	}
	prev := 0.0
	for k, h := range keys {
		j, _ := slices.BinarySearchFunc(pts, h, func(p pt, t uint64) int { return cmp.Compare(p.h, t) })
		if j == len(pts) {
			j = 0
		}
		f.load[j] += cdf[k] - prev
		prev = cdf[k]
		if k == 0 {
			f.top = j
		}
	}
	return f
}

// maxMean is max/mean of the owners' loads with counts v.
func (f *floorRing) maxMean(v []int) (float64, float64) {
	loads := make([]float64, f.n)
	pend, first := 0.0, -1
	for i := range f.owner {
		pend += f.load[i]
		if f.idx[i] < v[f.owner[i]] {
			if first < 0 {
				first = f.owner[i]
			}
			loads[f.owner[i]] += pend
			pend = 0
		}
	}
	loads[first] += pend
	mx, ss := 0.0, 0.0
	for _, l := range loads {
		mx, ss = max(mx, l), ss+l*l
	}
	return mx * float64(f.n), ss
}

// climb improves v within [lo, hi] by single gives while one helps.
func (f *floorRing) climb(v, lo, hi []int) ([]int, float64) {
	bm, bs := f.maxMean(v)
	for {
		var next []int
		for a := range f.n {
			for b := range f.n {
				for s := 1; a != b && s <= 2048; s *= 2 {
					if v[a]-s < lo[a] || v[b]+s > hi[b] {
						break
					}
					w := slices.Clone(v)
					w[a] -= s
					w[b] += s
					if m, ss := f.maxMean(w); m < bm-1e-9 || m < bm+1e-9 && ss < bs-1e-12 {
						bm, bs, next = m, ss, w
					}
				}
			}
		}
		if next == nil {
			return v, bm
		}
		v = next
	}
}

// search returns the least max/mean found and its counts.
func (f *floorRing) search() (float64, []int) {
	lo, hi := make([]int, f.n), make([]int, f.n)
	reset := func() {
		for i := range f.n {
			lo[i], hi[i] = 1, f.r
		}
	}
	reset()
	even := make([]int, f.n)
	for i := range even {
		even[i] = f.r / f.n
		if i < f.r%f.n {
			even[i]++
		}
	}
	best, bm := f.climb(even, lo, hi)
	// Placements of the top key on each of the next 600 candidates.
	capAt := slices.Repeat([]int{f.r}, f.n)
	for j := range min(600, len(f.owner)) {
		e := (f.top + j) % len(f.owner)
		o, idx := f.owner[e], f.idx[e]
		if idx+1 <= capAt[o] {
			reset()
			copy(hi, capAt)
			lo[o] = idx + 1
			if v, ok := fill(lo, hi, f.r); ok {
				if v, m := f.climb(v, lo, hi); m < bm {
					best, bm = v, m
				}
			}
		}
		capAt[o] = min(capAt[o], idx)
	}
	return bm, best
}

// fill is counts within [lo, hi] summing to r: lo, then one more to the
// lowest with room, in turn; false if the highs sum below r.
func fill(lo, hi []int, r int) ([]int, bool) {
	v := slices.Clone(lo)
	sum := 0
	for _, x := range v {
		sum += x
	}
	for sum < r {
		i := -1
		for k := range v {
			if v[k] < hi[k] && (i < 0 || v[k] < v[i]) {
				i = k
			}
		}
		if i < 0 {
			return nil, false
		}
		v[i]++
		sum++
	}
	return v, sum == r
}
