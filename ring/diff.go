package ring

// Move is an arc of the circle whose owner differs between two rings.
type Move struct {
	Range Range
	From  string // owner in the old ring, "" if it is empty
	To    string // owner in the new ring, "" if it is empty
}

// Diff lists the arcs of the circle whose owner differs between ring a and
// ring b. Each Move is maximal: adjacent arcs with the same From and To are
// merged, across the wrap too. Moves come in clockwise order, starting with
// the one that contains or follows the point 0; a single Move can be the
// whole circle (Range.IsFull). A nil ring is an empty ring. Owners are
// compared by name, so the same owner may have different entries in a and b.
func Diff(a, b *Ring) []Move {
	ha, hb := hashesOf(a), hashesOf(b)
	if len(ha) == 0 && len(hb) == 0 {
		return nil
	}
	// The circle is cut at every entry of either ring. Between two
	// consecutive cuts both rings are constant, so one lookup of the arc's
	// end in each ring gives its owners. The merged cuts are walked in
	// order, each ring's lower bound advancing with them, without being
	// listed first (a list of 2R cuts was most of what a manager's join
	// allocated: 2.6 GB in BenchmarkStorm10x's 5,000 joins).
	var prev uint64 // the cut before the current one: the last, for the first
	switch {
	case len(ha) == 0:
		prev = hb[len(hb)-1]
	case len(hb) == 0:
		prev = ha[len(ha)-1]
	default:
		prev = max(ha[len(ha)-1], hb[len(hb)-1])
	}
	var moves []Move
	moved := false // the previous cut ended a Move
	ia, ib := 0, 0
	for ia < len(ha) || ib < len(hb) {
		var x uint64
		switch {
		case ib == len(hb) || (ia < len(ha) && ha[ia] < hb[ib]):
			x = ha[ia]
		default:
			x = hb[ib]
		}
		// Every entry below x is behind ia and ib: they are x's lower
		// bounds.
		from, to := ownerAt(a, ia), ownerAt(b, ib)
		switch n := len(moves); {
		case from == to:
			moved = false
		case n > 0 && moved && moves[n-1].From == from && moves[n-1].To == to:
			moves[n-1].Range.End = x
		default:
			moves = append(moves, Move{Range: Range{Start: prev, End: x}, From: from, To: to})
			moved = true
		}
		prev = x
		for ia < len(ha) && ha[ia] == x {
			ia++
		}
		for ib < len(hb) && hb[ib] == x {
			ib++
		}
	}
	return mergeWrapMoves(moves)
}

// mergeWrapMoves joins the first and last Moves where they meet at the
// wrap: the first begins at the last cut and the last ends there.
func mergeWrapMoves(moves []Move) []Move {
	if n := len(moves); n > 1 {
		f, l := moves[0], moves[n-1]
		if l.Range.End == f.Range.Start && l.From == f.From && l.To == f.To {
			moves[0].Range.Start = l.Range.Start
			moves = moves[:n-1]
		}
	}
	return moves
}

// MovedShare is the fraction of the circle covered by moves, which must not
// overlap (as Diff's do not).
func MovedShare(moves []Move) float64 {
	s := 0.0
	for _, m := range moves {
		s += m.Range.Share()
	}
	return s
}

func hashesOf(r *Ring) []uint64 {
	if r == nil {
		return nil
	}
	return r.hashes
}

// ownerAt is the owner of the entry at lower-bound position p, wrapping.
func ownerAt(r *Ring, p int) string {
	if r == nil || len(r.hashes) == 0 {
		return ""
	}
	if p == len(r.hashes) {
		p = 0
	}
	return r.OwnerName(p)
}
