package ring

import (
	"errors"
	"fmt"
	"slices"
)

// ErrMove is returned by MoveVNodes for a move that cannot be made.
var ErrMove = errors.New("ring: cannot move virtual nodes")

// Apportion divides total virtual nodes among the named owners so that the
// counts sum to total and differ by at most one. Which owners get the extra
// node is decided by the hash of their names, so that the choice is stable
// and does not depend on the order of names. Total must be a valid ring size.
func Apportion(names []string, total int) ([]Owner, error) {
	if !ValidRingSize(total) {
		return nil, fmt.Errorf("%w: %d", ErrRingSize, total)
	}
	if len(names) == 0 {
		return nil, nil
	}
	own := make([]Owner, len(names))
	for i, n := range names {
		if n == "" {
			return nil, ErrEmptyName
		}
		own[i] = Owner{Name: n}
	}
	// Order by (hash(name), name): the first total%n get one more.
	slices.SortFunc(own, func(a, b Owner) int {
		ha, hb := HashString(a.Name), HashString(b.Name)
		switch {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for i := 1; i < len(own); i++ {
		if own[i].Name == own[i-1].Name {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateName, own[i].Name)
		}
	}
	base, extra := total/len(own), total%len(own)
	for i := range own {
		own[i].VNodes = base
		if i < extra {
			own[i].VNodes++
		}
	}
	slices.SortFunc(own, func(a, b Owner) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return own, nil
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
