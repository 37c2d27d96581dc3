package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Errors returned by this package.
var (
	ErrEmptyName     = errors.New("ring: owner name is empty")
	ErrDuplicateName = errors.New("ring: duplicate owner name")
	ErrNegative      = errors.New("ring: negative virtual-node count")
	ErrRingSize      = errors.New("ring: ring size must be a power of two in [1, 2^23]")
	ErrTooMany       = errors.New("ring: too many virtual nodes")
)

// MaxRingSize is the largest ring Fuge accepts (Envoy's own limit is 2^23).
const MaxRingSize = 1 << 23

// MaxEntries bounds the total number of entries New accepts, so that
// positions and indices fit in an int32.
const MaxEntries = 1 << 30

// Owner is a ring member: its stable name (Envoy's hash_key) and its count of
// virtual nodes.
type Owner struct {
	Name   string
	VNodes int
}

// Entry is one virtual node on the ring.
type Entry struct {
	Hash  uint64 // position on the circle
	Owner int32  // index into Ring.Owners()
	Index int32  // i in name_i
}

// Ring is a consistent-hash ring, immutable but for Update, which only a
// ring's single owner may call (readers get a Clone). Lookups are safe for
// concurrent use and do not allocate.
type Ring struct {
	hashes  []uint64 // sorted entry positions, parallel to entries
	entries []Entry
	owners  []Owner
	// index[k] is the first position whose hash has top bits >= k, for the
	// top 64-shift bits; index[len-1] = Len(). Lookup searches only
	// [index[k], index[k+1]), about one or two entries as hashes are uniform.
	index []int32
	shift uint8
}

// ValidRingSize reports whether r is a power of two in [1, MaxRingSize].
func ValidRingSize(r int) bool { return r >= 1 && r <= MaxRingSize && r&(r-1) == 0 }

// New builds the ring of the given owners. Owners with VNodes == 0 are members
// without entries. Entries with equal hashes (a 2^-64 event) are ordered by
// owner name and index so that the result does not depend on input order.
func New(owners []Owner) (*Ring, error) {
	own, total, err := sortedOwners(owners)
	if err != nil {
		return nil, err
	}
	return newSorted(own, total), nil
}

// newSorted is New for owners sorted by name and checked (sortedOwners),
// with total entries.
func newSorted(own []Owner, total int) *Ring {
	entries := make([]Entry, 0, total)
	var buf []byte
	for oi, o := range own {
		// Hash "name_i" for each i, writing the name once per owner.
		buf = append(append(buf[:0], o.Name...), '_')
		base := len(buf)
		for i := 0; i < o.VNodes; i++ {
			buf = strconv.AppendInt(buf[:base], int64(i), 10)
			entries = append(entries, Entry{Hash: xxhash.Sum64(buf), Owner: int32(oi), Index: int32(i)})
		}
	}
	return build(own, entries)
}

// sortedOwners returns a copy of owners sorted by name, checked, and their
// total count of entries.
func sortedOwners(owners []Owner) ([]Owner, int, error) {
	own := slices.Clone(owners)
	byName := func(a, b Owner) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(own, byName) {
		slices.SortFunc(own, byName)
	}
	total := 0
	for i, o := range own {
		if o.Name == "" {
			return nil, 0, ErrEmptyName
		}
		if i > 0 && own[i-1].Name == o.Name {
			return nil, 0, fmt.Errorf("%w: %q", ErrDuplicateName, o.Name)
		}
		if o.VNodes < 0 {
			return nil, 0, fmt.Errorf("%w: %q has %d", ErrNegative, o.Name, o.VNodes)
		}
		if o.VNodes > MaxEntries || total+o.VNodes > MaxEntries {
			return nil, 0, fmt.Errorf("%w: more than %d", ErrTooMany, MaxEntries)
		}
		total += o.VNodes
	}
	return own, total, nil
}

// build sorts entries into a ring over owners, which must be sorted by name.
// Entries must come in (owner, index) order: a stable sort by hash then
// yields the total order (hash, owner, index), whatever the caller's order of
// owners.
func build(own []Owner, entries []Entry) *Ring {
	sortEntries(entries)
	hashes := make([]uint64, len(entries))
	for i, e := range entries {
		hashes[i] = e.Hash
	}
	r := &Ring{hashes: hashes, entries: entries, owners: own}
	r.buildIndex()
	return r
}

// buildIndex fills r.index with 2^b buckets, 2^b <= Len() < 2^(b+1), b >= 1.
// It counts the entries of each bucket and sums the counts: two passes
// without a data-dependent branch (advancing a position bucket by bucket
// mispredicted about once per entry, and was two thirds of an Update at
// R = 65536).
func (r *Ring) buildIndex() {
	b := max(bits.Len(uint(len(r.hashes)))-1, 1)
	r.shift = uint8(64 - b)
	nb := 1 << b
	// The index is rewritten whole: Update reuses its memory.
	if cap(r.index) >= nb+1 {
		r.index = r.index[:nb+1]
		clear(r.index)
	} else {
		r.index = make([]int32, nb+1)
	}
	// index[k+1] counts bucket k's entries, then the running sum makes
	// index[k] the number of entries in buckets before k: the first
	// position whose top bits are >= k.
	for _, h := range r.hashes {
		r.index[h>>r.shift+1]++
	}
	for k := 1; k <= nb; k++ {
		r.index[k] += r.index[k-1]
	}
}

// sortEntries sorts stably by hash: an LSD radix sort on bytes (skipping
// bytes on which all entries agree) for large rings, the library stable
// sort for small ones.
func sortEntries(es []Entry) {
	if len(es) <= 64 {
		slices.SortStableFunc(es, func(a, b Entry) int { return cmp.Compare(a.Hash, b.Hash) })
		return
	}
	tmp := make([]Entry, len(es))
	src, dst := es, tmp
	for shift := 0; shift < 64; shift += 8 {
		var count [257]int
		for _, e := range src {
			count[int(byte(e.Hash>>shift))+1]++
		}
		if count[int(byte(src[0].Hash>>shift))+1] == len(src) {
			continue // every entry has this byte: the pass would not move anything
		}
		for i := 1; i < len(count); i++ {
			count[i] += count[i-1]
		}
		for _, e := range src {
			d := byte(e.Hash >> shift)
			dst[count[d]] = e
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
}

// Len is the number of entries.
func (r *Ring) Len() int { return len(r.entries) }

// Owners returns the members sorted by name. The slice must not be modified.
func (r *Ring) Owners() []Owner { return r.owners }

// Entries returns the entries sorted by hash. The slice must not be modified.
func (r *Ring) Entries() []Entry { return r.entries }

// Entry returns the entry at position p.
func (r *Ring) Entry(p int) Entry { return r.entries[p] }

// OwnerName is the name of the owner of the entry at position p.
func (r *Ring) OwnerName(p int) string { return r.owners[r.entries[p].Owner].Name }

// Lookup returns the position of the entry that owns hash h: the first entry
// whose hash is >= h, wrapping to 0. It returns -1 for an empty ring.
//
// This is the entry Envoy's chooseHost (a ketama binary search) picks: for a
// sorted ring it finds the unique p with hash[p-1] < h <= hash[p], or wraps
// to 0, which is the lower bound of h with wrap-around.
func (r *Ring) Lookup(h uint64) int {
	hs := r.hashes
	if len(hs) == 0 {
		return -1
	}
	// The lower bound lies in [index[k], index[k+1]]: entries before
	// index[k] have smaller top bits than h, and the entry at index[k+1]
	// (if any) has larger ones.
	k := h >> (r.shift & 63)
	lo, hi := int(r.index[k]), int(r.index[k+1])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if hs[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(hs) {
		return 0
	}
	return lo
}

// LookupOwner returns the owner name for hash h, or "" for an empty ring.
func (r *Ring) LookupOwner(h uint64) string {
	p := r.Lookup(h)
	if p < 0 {
		return ""
	}
	return r.OwnerName(p)
}

// Arc is the range owned by the entry at position p: (previous entry, p].
// A ring with one entry owns the whole circle.
func (r *Ring) Arc(p int) Range {
	prev := p - 1
	if prev < 0 {
		prev = len(r.hashes) - 1
	}
	return Range{Start: r.hashes[prev], End: r.hashes[p]}
}

// AppendHashesIn appends to dst the positions of the entries that lie in
// rg, (Start, End], and returns it: for a range that wraps past zero, those
// after Start and then those up to End. The whole circle gives every entry.
func (r *Ring) AppendHashesIn(dst []uint64, rg Range) []uint64 {
	hs := r.hashes
	if len(hs) == 0 {
		return dst
	}
	if rg.IsFull() {
		return append(dst, hs...)
	}
	after := func(x uint64) int { // index of the first entry > x
		i, found := slices.BinarySearch(hs, x)
		if found {
			for i < len(hs) && hs[i] == x {
				i++
			}
		}
		return i
	}
	lo, hi := after(rg.Start), after(rg.End)
	if rg.Start < rg.End {
		return append(dst, hs[lo:hi]...)
	}
	return append(append(dst, hs[lo:]...), hs[:hi]...)
}
