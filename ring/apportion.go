package ring

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// ErrMove is returned by MoveVNodes for a move that cannot be made.
var ErrMove = errors.New("ring: cannot move virtual nodes")

// Apportion divides total virtual nodes among the named owners so that the
// counts sum to total and differ by at most one. Which owners get the extra
// node is decided by the hash of their names, so that the choice is stable
// and does not depend on the order of names. Total must be a valid ring size.
// The result is sorted by name; names already sorted cost no sort by name
// (the manager apportions on every join and leave: at 5,000 owners sorting
// the names took 1 ms, and a hash per comparison 3.5 ms).
func Apportion(names []string, total int) ([]Owner, error) {
	if !ValidRingSize(total) {
		return nil, fmt.Errorf("%w: %d", ErrRingSize, total)
	}
	if len(names) == 0 {
		return nil, nil
	}
	sorted := true
	for i, n := range names {
		if n == "" {
			return nil, ErrEmptyName
		}
		sorted = sorted && (i == 0 || names[i-1] < n)
	}
	if !sorted {
		names = slices.Clone(names)
		slices.Sort(names)
		for i := 1; i < len(names); i++ {
			if names[i] == names[i-1] {
				return nil, fmt.Errorf("%w: %q", ErrDuplicateName, names[i])
			}
		}
	}
	base, extra := total/len(names), total%len(names)
	own := make([]Owner, len(names))
	for i, n := range names {
		own[i] = Owner{Name: n, VNodes: base}
	}
	for i, more := range extraSet(own, extra) {
		if more {
			own[i].VNodes++
		}
	}
	return own, nil
}

// IsApportioned reports whether owners' counts are Apportion's even split
// of total among their names, in O(n log n) hash comparisons and no sort
// by name. Names must be distinct.
func IsApportioned(owners []Owner, total int) bool {
	if len(owners) == 0 {
		return total == 0
	}
	base, extra := total/len(owners), total%len(owners)
	sum := 0
	for _, o := range owners {
		if o.VNodes != base && o.VNodes != base+1 {
			return false
		}
		sum += o.VNodes
	}
	if sum != total {
		return false
	}
	for i, more := range extraSet(owners, extra) {
		if (owners[i].VNodes == base+1) != more {
			return false
		}
	}
	return true
}

// extraSet marks the owners that Apportion gives one of extra more virtual
// nodes: the first extra by the hash of the name, then by name. Each name is
// hashed once, and the first extra are selected, not sorted: O(n) expected
// (a sort of 5,000 hashes took 0.8 ms here), never worse than a sort.
func extraSet(owners []Owner, extra int) []bool {
	more := make([]bool, len(owners))
	if extra <= 0 {
		return more
	}
	ks := make([]orderKey, len(owners))
	for i, o := range owners {
		ks[i] = orderKey{HashString(o.Name), o.Name, int32(i)}
	}
	selectFirst(ks, extra)
	for _, k := range ks[:extra] {
		more[k.i] = true
	}
	return more
}

// orderKey is an owner's place in the order of the extra virtual nodes.
type orderKey struct {
	h    uint64
	name string
	i    int32
}

func (a orderKey) less(b orderKey) bool {
	return a.h < b.h || a.h == b.h && a.name < b.name
}

// compare is less as a three-way comparison, for sorting.
func (a orderKey) compare(b orderKey) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

// selectFirst reorders ks so that its first k elements are its k least
// (in no particular order): quickselect with a median-of-three pivot, and
// a sort of what is left when it has recursed more than 2·log2(n) times,
// so that names chosen to defeat the pivot cost a sort, not n².
func selectFirst(ks []orderKey, k int) {
	lo, hi := 0, len(ks) // the k-th least lies in ks[lo:hi]
	budget := 2 * bits.Len(uint(len(ks)))
	for hi-lo > 16 {
		if budget == 0 {
			slices.SortFunc(ks[lo:hi], orderKey.compare)
			return
		}
		budget--
		m := lo + (hi-lo)/2
		// Median of three to ks[lo].
		if ks[m].less(ks[lo]) {
			ks[m], ks[lo] = ks[lo], ks[m]
		}
		if ks[hi-1].less(ks[lo]) {
			ks[hi-1], ks[lo] = ks[lo], ks[hi-1]
		}
		if ks[hi-1].less(ks[m]) {
			ks[hi-1], ks[m] = ks[m], ks[hi-1]
		}
		ks[lo], ks[m] = ks[m], ks[lo]
		p := ks[lo]
		// Lomuto partition: ks[lo+1:j] < p <= ks[j:i].
		j := lo + 1
		for i := lo + 1; i < hi; i++ {
			if ks[i].less(p) {
				ks[i], ks[j] = ks[j], ks[i]
				j++
			}
		}
		ks[lo], ks[j-1] = ks[j-1], ks[lo] // p at j-1: ks[lo:j-1] < p
		switch {
		case k < j-1:
			hi = j - 1
		case k > j:
			lo = j
		default:
			return // the first j-1 or j are the least
		}
	}
	// Insertion sort of the last few.
	for i := lo + 1; i < hi; i++ {
		for j := i; j > lo && ks[j].less(ks[j-1]); j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}

// MoveVNodes returns a copy of owners with n virtual nodes moved from one
// owner to another, so the total is unchanged. The giver loses its
// highest-index entries; the receiver gains the next indices.
func MoveVNodes(owners []Owner, from, to string, n int) ([]Owner, error) {
	out := slices.Clone(owners)
	fi, ti := -1, -1
	for i, o := range out {
		switch o.Name {
		case from:
			fi = i
		case to:
			ti = i
		}
	}
	switch {
	case n < 0:
		return nil, fmt.Errorf("%w: negative count %d", ErrMove, n)
	case from == to:
		// Checked before the lookup, which would find only fi.
		return nil, fmt.Errorf("%w: %q to itself", ErrMove, from)
	case fi < 0 || ti < 0:
		return nil, fmt.Errorf("%w: unknown owner in %q -> %q", ErrMove, from, to)
	case out[fi].VNodes < n:
		return nil, fmt.Errorf("%w: %q has %d, asked for %d", ErrMove, from, out[fi].VNodes, n)
	}
	out[fi].VNodes -= n
	out[ti].VNodes += n
	return out, nil
}
