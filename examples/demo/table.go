package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/fuge-project/fuge/lease"
)

// move is a share of the key space that changed hands between two tables.
type move struct {
	from, to string // owner names; "" is a free range
}

// diffTables walks the common refinement of two lease tables (as
// lb.Lookup.Entries returns them: sorted by End, covering the circle) and
// returns the share of keys that changed owner, by (from, to), and the share
// that kept its owner under a new generation.
func diffTables(a, b []lease.Entry) (moved map[move]float64, regranted float64) {
	moved = map[move]float64{}
	if len(a) == 0 || len(b) == 0 {
		return moved, 0
	}
	ends := make([]uint64, 0, len(a)+len(b))
	for _, e := range a {
		ends = append(ends, e.Range.End)
	}
	for _, e := range b {
		ends = append(ends, e.Range.End)
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	for i, end := range ends {
		share := 1.0
		if len(ends) > 1 {
			prev := ends[(i+len(ends)-1)%len(ends)]
			share = float64(end-prev) / (1 << 64) // wraps for the first arc
		}
		ea, eb := at(a, end), at(b, end)
		switch {
		case ea.Owner != eb.Owner:
			moved[move{ea.Owner, eb.Owner}] += share
		case ea.Gen != eb.Gen:
			regranted += share
		}
	}
	return moved, regranted
}

// at returns the entry of es holding position h: the first whose End is at
// or after h, wrapping to the first.
func at(es []lease.Entry, h uint64) lease.Entry {
	i := sort.Search(len(es), func(i int) bool { return es[i].Range.End >= h })
	if i == len(es) {
		i = 0
	}
	return es[i]
}

// shares returns each owner's share of the key space ("" for free ranges).
func shares(es []lease.Entry) map[string]float64 {
	s := map[string]float64{}
	for _, e := range es {
		s[e.Owner] += e.Range.Share()
	}
	return s
}

// name shows an owner, or a free range.
func name(owner string) string {
	if owner == "" {
		return "(free)"
	}
	return owner
}

// formatShares shows owners and their shares in name order: "p1 33.4%  p2 …".
func formatShares(s map[string]float64) string {
	var b strings.Builder
	for i, o := range slices.Sorted(maps.Keys(s)) {
		if i > 0 {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%s %.1f%%", name(o), 100*s[o])
	}
	return b.String()
}

// formatMoves shows the moves, largest first: "p2 -> p1 16.2%, p2 -> p3 …".
func formatMoves(moved map[move]float64) string {
	ms := slices.Collect(maps.Keys(moved))
	slices.SortFunc(ms, func(x, y move) int {
		if moved[x] != moved[y] {
			if moved[x] > moved[y] {
				return -1
			}
			return 1
		}
		return strings.Compare(x.from+"\x00"+x.to, y.from+"\x00"+y.to)
	})
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s -> %s %.1f%%", name(m.from), name(m.to), 100*moved[m])
	}
	return strings.Join(parts, ", ")
}
