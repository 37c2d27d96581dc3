package ring

import (
	"cmp"
	"math/bits"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// With returns the ring of owners, as New(owners) would, built from a copy
// of r: the entries of the owners r shares with it (by name) are kept
// without being hashed or sorted again, those of a count that shrank are
// dropped, and only the new ones are hashed, sorted and merged in. A nil r
// is an empty ring. It is Clone and Update; a ring that one goroutine owns
// and changes on every membership change should use Update itself, which
// does not copy.
func (r *Ring) With(owners []Owner) (*Ring, error) {
	c := r.Clone()
	if _, err := c.Update(owners); err != nil {
		return nil, err
	}
	return c, nil
}

// Clone returns a copy of r that Update on either does not change. A nil r
// gives an empty ring.
func (r *Ring) Clone() *Ring {
	if r == nil {
		return build(nil, nil)
	}
	// owners is never written in place (Update replaces it), so it is
	// shared.
	return &Ring{hashes: slices.Clone(r.hashes), entries: slices.Clone(r.entries), owners: r.owners,
		index: slices.Clone(r.index), shift: r.shift}
}

// Update makes r, in place, the ring New(owners) would build, and returns
// the Moves that Diff(r before, r after) would. r must not be read by
// anyone else meanwhile: Update breaks the immutability the rest of this
// package promises, and is meant for a ring that one goroutine owns and
// changes on every membership change (the manager's desired ring), and
// copies (Clone) for others to read.
//
// When one owner of N joins or leaves a ring of R entries, the changed
// entries (about R/N) are hashed and sorted, and the ring is compacted and
// merged in place: O(R) memory moves and no allocation proportional to R.
// The Moves are found from the changed entries alone (O((R/N) log R)): an
// arc of the circle changes owner only where the first entry at or after
// it, in the ring before or after, is one that left or came. Rebuilding
// the ring and diffing it whole cost a manager 2-3 ms and 2 MB per join at
// R = 65536, a third of its CPU in a 500-owner join storm.
func (r *Ring) Update(owners []Owner) ([]Move, error) {
	own, total, err := sortedOwners(owners)
	if err != nil {
		return nil, err
	}
	c, ok := r.plan(own)
	if !ok || total == 0 {
		// An empty ring before or after, or equal hashes among the
		// entries that change (a 2^-64 event): rebuild and diff whole.
		nr := newSorted(own, total)
		moves := Diff(r, nr)
		*r = *nr
		return moves, nil
	}
	// The cuts where an owner may change: the hashes of the entries that
	// go and of those that come, ascending (they are distinct: plan saw
	// no equal hashes).
	cuts := make([]cut, 0, len(c.removed)+len(c.added))
	for i, j := 0, 0; i < len(c.removed) || j < len(c.added); {
		if j == len(c.added) || i < len(c.removed) && c.removed[i] < c.added[j].Hash {
			cuts = append(cuts, cut{x: c.removed[i]})
			i++
		} else {
			cuts = append(cuts, cut{x: c.added[j].Hash, added: true})
			j++
		}
	}
	for i := range cuts {
		cuts[i].from, cuts[i].prev = r.around(cuts[i].x)
	}
	r.apply(own, c, cuts)
	moves := make([]Move, 0, len(cuts)) // at most one a cut
	for _, k := range cuts {
		to, prev := r.around(k.x)
		// The arc that ends at the cut begins at the closer of the two
		// rings' previous entries: the previous cut of their union, as
		// Diff walks it.
		if d := k.x - prev; d != 0 && (k.x-k.prev == 0 || d < k.x-k.prev) {
			k.prev = prev
		}
		if k.from == to {
			continue
		}
		if n := len(moves); n > 0 && moves[n-1].Range.End == k.prev && moves[n-1].From == k.from && moves[n-1].To == to {
			moves[n-1].Range.End = k.x
			continue
		}
		moves = append(moves, Move{Range: Range{Start: k.prev, End: k.x}, From: k.from, To: to})
	}
	return mergeWrapMoves(moves), nil
}

// cut is a point where an owner may change: the end of an arc (prev, x]
// and its owner in the ring before.
type cut struct {
	x, prev uint64
	from    string
	added   bool // an entry comes at x (else one goes)
}

// around returns the owner of point x (that of the first entry at or
// after it, wrapping) and the hash of the last entry before x (wrapping:
// the last entry, which may be x itself when it is the only one). The ring
// must not be empty.
func (r *Ring) around(x uint64) (string, uint64) {
	hs := r.hashes
	p, _ := slices.BinarySearch(hs, x)
	prev := len(hs) - 1
	if p > 0 {
		prev = p - 1
	}
	if p == len(hs) {
		p = 0
	}
	return r.OwnerName(p), hs[prev]
}

// change is what turns a ring into that of other owners: for each of its
// owners, the index of the same name among the new ones (-1 if none) and
// how many of its entries stay; the entries to add (in ring order, owners
// indexed among the new ones); the hashes of the entries to drop,
// ascending.
type change struct {
	to, keep []int32
	added    []Entry
	removed  []uint64
}

// plan works out the change from r to the ring of own (sorted and
// checked). It returns false when r is empty or when an entry that changes
// has the hash of another entry: those rings are rebuilt whole, where
// ties are ordered by owner name and index.
func (r *Ring) plan(own []Owner) (change, bool) {
	if len(r.entries) == 0 {
		return change{}, false
	}
	c := change{to: make([]int32, len(r.owners)), keep: make([]int32, len(r.owners))}
	had := make([]int, len(own)) // entries each new owner had in r
	j := 0
	for i, o := range r.owners {
		for j < len(own) && own[j].Name < o.Name {
			j++
		}
		c.to[i] = -1
		if j < len(own) && own[j].Name == o.Name {
			c.to[i], c.keep[i] = int32(j), int32(min(o.VNodes, own[j].VNodes))
			had[j] = o.VNodes
		}
	}
	var buf []byte
	for oi, o := range own {
		if o.VNodes <= had[oi] {
			continue
		}
		buf = append(append(buf[:0], o.Name...), '_')
		base := len(buf)
		for i := had[oi]; i < o.VNodes; i++ {
			buf = strconv.AppendInt(buf[:base], int64(i), 10)
			c.added = append(c.added, Entry{Hash: xxhash.Sum64(buf), Owner: int32(oi), Index: int32(i)})
		}
	}
	slices.SortFunc(c.added, func(a, b Entry) int { return cmp.Compare(a.Hash, b.Hash) })
	hs := r.hashes
	for k, e := range c.added {
		if k > 0 && c.added[k-1].Hash == e.Hash {
			return change{}, false
		}
		if _, found := slices.BinarySearch(hs, e.Hash); found {
			return change{}, false
		}
	}
	for p, e := range r.entries {
		if c.to[e.Owner] >= 0 && e.Index < c.keep[e.Owner] {
			continue
		}
		if p > 0 && hs[p-1] == e.Hash || p+1 < len(hs) && hs[p+1] == e.Hash {
			return change{}, false
		}
		c.removed = append(c.removed, e.Hash)
	}
	return c, true
}

// apply makes r the ring of own by change c, whose cuts are given, in
// place: the entries that stay are compacted and renumbered, the new ones
// merged in from the back a block at a time, and the index shifted by the
// cuts.
func (r *Ring) apply(own []Owner, c change, cuts []cut) {
	k := 0
	for _, e := range r.entries {
		oi := c.to[e.Owner]
		if oi < 0 || e.Index >= c.keep[e.Owner] {
			continue
		}
		e.Owner = oi
		r.entries[k], r.hashes[k] = e, e.Hash
		k++
	}
	n := k + len(c.added)
	r.entries = slices.Grow(r.entries[:k], len(c.added))[:n]
	r.hashes = slices.Grow(r.hashes[:k], len(c.added))[:n]
	// Kept entries [lo, i) lie after added entry j: they move up by j+1,
	// and it goes just before them.
	i := k
	for j := len(c.added) - 1; j >= 0; j-- {
		a := c.added[j]
		lo, _ := slices.BinarySearch(r.hashes[:i], a.Hash)
		copy(r.entries[lo+j+1:], r.entries[lo:i])
		copy(r.hashes[lo+j+1:], r.hashes[lo:i])
		r.entries[lo+j], r.hashes[lo+j] = a, a.Hash
		i = lo
	}
	r.owners = own
	if b := max(bits.Len(uint(n))-1, 1); uint8(64-b) != r.shift || len(r.index) != 1<<b+1 {
		r.buildIndex()
		return
	}
	// The same buckets: index[k], the count of entries in buckets before
	// k, changes by the entries that came to them less those that went.
	d, p := int32(0), 0
	for _, ct := range cuts {
		for end := int(ct.x>>r.shift) + 1; p < end; p++ {
			r.index[p] += d
		}
		if ct.added {
			d++
		} else {
			d--
		}
	}
	for ; p < len(r.index); p++ {
		r.index[p] += d
	}
}
