package lease

import (
	"fmt"
	"math"
)

// LoadGroups is the number of range groups a load report may break an
// owner's load into: group g is the 1/64 of the circle whose hashes have g
// as their top six bits, the same split as the lookups' ArcBlock resources.
const LoadGroups = 64

// MaxLoad bounds every figure of a load report: far above any request rate
// (10^12 per second) or custom figure, far below where sums of a few
// thousand owners' reports lose precision.
const MaxLoad = 1e12

// MaxHotKeys bounds LoadReport.Hot: an owner reports at most this many of
// its busiest keys.
const MaxHotKeys = 8

// LoadGroup is the range group of a key hash.
func LoadGroup(h uint64) int { return int(h >> 58) }

// LoadReport is an owner's load as it reports it on its lease requests:
// soft state that the manager's leader keeps for its balancing policy and
// never commits. By default (ownerguard) Rate is the request rate the
// owner's guards admitted, per second, smoothed; an application may report
// any figure of its own (CPU, memory), as long as all owners of a namespace
// report the same kind.
type LoadReport struct {
	// Rate is the owner's total load; finite, 0 to MaxLoad.
	Rate float64
	// Groups is empty, or exactly LoadGroups figures: the load of the
	// owner's ranges in each range group. They need not sum to Rate
	// exactly (an application may report a total only).
	Groups []float64
	// Hot is empty, or up to MaxHotKeys of the owner's busiest keys (by
	// their hash) with their load, in the unit of Rate: it tells the
	// balancing policy where in a group the load sits when a few keys
	// carry most of it (a key's arc is then known exactly, which the
	// groups cannot say). Hashes are distinct.
	Hot []HotKey
}

// HotKey is one busy key of a LoadReport.
type HotKey struct {
	Hash uint64  // the key's hash (XXH64 of the routing value)
	Rate float64 // its load; finite, 0 to MaxLoad
}

// Validate checks a report from outside: every figure finite, not
// negative, at most MaxLoad; Groups empty or LoadGroups long; at most
// MaxHotKeys hot keys, no hash twice. The error names the field. It costs
// O(LoadGroups + MaxHotKeys²).
func (l LoadReport) Validate() error {
	if err := validLoad("load.rate", l.Rate); err != nil {
		return err
	}
	if n := len(l.Groups); n != 0 && n != LoadGroups {
		return fmt.Errorf("%w: load.groups has %d figures; want 0 or %d", ErrInvalid, n, LoadGroups)
	}
	for i, g := range l.Groups {
		if !goodLoad(g) { // the field's name is formatted only for an error
			return validLoad(fmt.Sprintf("load.groups[%d]", i), g)
		}
	}
	if n := len(l.Hot); n > MaxHotKeys {
		return fmt.Errorf("%w: load.hot has %d keys; want at most %d", ErrInvalid, n, MaxHotKeys)
	}
	for i, k := range l.Hot {
		if !goodLoad(k.Rate) {
			return validLoad(fmt.Sprintf("load.hot[%d].rate", i), k.Rate)
		}
		for j := range i {
			if l.Hot[j].Hash == k.Hash {
				return fmt.Errorf("%w: load.hot[%d].hash %#x repeats load.hot[%d]", ErrInvalid, i, k.Hash, j)
			}
		}
	}
	return nil
}

// goodLoad is validLoad without the error: finite, 0 to MaxLoad (NaN
// fails both comparisons).
func goodLoad(x float64) bool { return x >= 0 && x <= MaxLoad }

func validLoad(what string, x float64) error {
	switch {
	case math.IsNaN(x):
		return fmt.Errorf("%w: %s is NaN", ErrInvalid, what)
	case math.IsInf(x, 0):
		return fmt.Errorf("%w: %s is infinite", ErrInvalid, what)
	case x < 0:
		return fmt.Errorf("%w: %s %g is negative", ErrInvalid, what, x)
	case x > MaxLoad:
		return fmt.Errorf("%w: %s %g is above %g", ErrInvalid, what, x, MaxLoad)
	}
	return nil
}
