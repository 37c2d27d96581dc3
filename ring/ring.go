package ring

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Errors returned by this package.
var (
	ErrEmptyName     = errors.New("ring: owner name is empty")
	ErrDuplicateName = errors.New("ring: duplicate owner name")
	ErrNegative      = errors.New("ring: negative virtual-node count")
	ErrRingSize      = errors.New("ring: ring size must be a power of two in [1, 2^23]")
)

// MaxRingSize is the largest ring Fuge accepts (Envoy's own limit is 2^23).
const MaxRingSize = 1 << 23

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

// Ring is an immutable ring. Lookups are safe for concurrent use and do not
// allocate.
type Ring struct {
	hashes  []uint64 // sorted entry positions, parallel to entries
	entries []Entry
	owners  []Owner
}

// ValidRingSize reports whether r is a power of two in [1, MaxRingSize].
func ValidRingSize(r int) bool { return r >= 1 && r <= MaxRingSize && r&(r-1) == 0 }

// New builds the ring of the given owners. Owners with VNodes == 0 are members
// without entries. Entries with equal hashes (a 2^-64 event) are ordered by
// owner name and index so that the result does not depend on input order.
func New(owners []Owner) (*Ring, error) {
	own := slices.Clone(owners)
	sort.Slice(own, func(i, j int) bool { return own[i].Name < own[j].Name })
	total := 0
	for i, o := range own {
		if o.Name == "" {
			return nil, ErrEmptyName
		}
		if i > 0 && own[i-1].Name == o.Name {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateName, o.Name)
		}
		if o.VNodes < 0 {
			return nil, fmt.Errorf("%w: %q has %d", ErrNegative, o.Name, o.VNodes)
		}
		total += o.VNodes
	}
	entries := make([]Entry, 0, total)
	for oi, o := range own {
		for i := 0; i < o.VNodes; i++ {
			entries = append(entries, Entry{Hash: EntryHash(o.Name, i), Owner: int32(oi), Index: int32(i)})
		}
	}
	// Owners are sorted by name, so (hash, owner index, index) is a total
	// order independent of the caller's order.
	slices.SortFunc(entries, func(a, b Entry) int {
		switch {
		case a.Hash < b.Hash:
			return -1
		case a.Hash > b.Hash:
			return 1
		case a.Owner != b.Owner:
			return int(a.Owner - b.Owner)
		}
		return int(a.Index - b.Index)
	})
	hashes := make([]uint64, len(entries))
	for i, e := range entries {
		hashes[i] = e.Hash
	}
	return &Ring{hashes: hashes, entries: entries, owners: own}, nil
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
func (r *Ring) Lookup(h uint64) int {
	hs := r.hashes
	n := len(hs)
	if n == 0 {
		return -1
	}
	// Lower bound, written out so that it inlines and does not allocate.
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if hs[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == n {
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
