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
}

// Validate checks a report from outside: every figure finite, not
// negative, at most MaxLoad; Groups empty or LoadGroups long. The error
// names the field.
func (l LoadReport) Validate() error {
	if err := validLoad("load.rate", l.Rate); err != nil {
		return err
	}
	if n := len(l.Groups); n != 0 && n != LoadGroups {
		return fmt.Errorf("%w: load.groups has %d figures; want 0 or %d", ErrInvalid, n, LoadGroups)
	}
	for i, g := range l.Groups {
		if err := validLoad(fmt.Sprintf("load.groups[%d]", i), g); err != nil {
			return err
		}
	}
	return nil
}

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
