package ring

import "fmt"

// Range is the arc (Start, End] walked clockwise on the 64-bit circle,
// wrapping from the maximum hash to zero. Start == End is the whole circle.
type Range struct {
	Start uint64 // exclusive
	End   uint64 // inclusive
}

// Full is the whole circle.
func Full() Range { return Range{} }

// IsFull reports whether r is the whole circle.
func (r Range) IsFull() bool { return r.Start == r.End }

// Contains reports whether h lies in (Start, End].
func (r Range) Contains(h uint64) bool {
	if r.Start == r.End {
		return true
	}
	if r.Start < r.End {
		return h > r.Start && h <= r.End
	}
	return h > r.Start || h <= r.End
}

// Size is the number of points in r; the whole circle reports 0 with full=true.
func (r Range) Size() (n uint64, full bool) {
	if r.Start == r.End {
		return 0, true
	}
	return r.End - r.Start, false
}

// Share is the fraction of the circle r covers.
func (r Range) Share() float64 {
	n, full := r.Size()
	if full {
		return 1
	}
	return float64(n) / 18446744073709551616.0
}

func (r Range) String() string {
	return fmt.Sprintf("(%016x,%016x]", r.Start, r.End)
}
