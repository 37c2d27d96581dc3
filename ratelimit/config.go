package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Errors. Validation errors wrap ErrConfig and name the field.
var (
	ErrConfig = errors.New("ratelimit: invalid configuration")
	// ErrMessage refuses an undecodable or out-of-bounds gossip message.
	ErrMessage = errors.New("ratelimit: bad gossip message")
)

// Mode says whether a limit refuses requests or only counts them.
type Mode string

// The modes.
const (
	// Enforce refuses a request over the limit.
	Enforce Mode = "enforce"
	// Shadow admits every request and counts those it would have refused.
	Shadow Mode = "shadow"
)

// NoView says what a limiter admits while it is in no view (it has not
// heard one, or lost its registration): DRL's "panic mode".
type NoView string

// The no-view policies.
const (
	// PanicShare admits L/N_registered: the fleet as a whole never admits
	// more than L however a partition splits it (the default).
	PanicShare NoView = "panic_share"
	// FailOpen admits every request.
	FailOpen NoView = "fail_open"
	// FailClosed refuses every request.
	FailClosed NoView = "fail_closed"
)

// Bounds of a Limit's fields.
const (
	MaxNameLen      = 64
	MaxKeyLen       = 256
	MaxOverrides    = 1024
	MaxPeriod       = 24 * time.Hour
	MinPeriod       = time.Millisecond
	MaxRequests     = 1e9
	DefaultMaxKeys  = 10_000
	MaxMaxKeys      = 1_000_000
	DefaultNoView   = PanicShare
	DefaultMode     = Enforce
	DefaultPeriod   = time.Second
	maxPerSecond    = 1e12 // tokens per second after scaling a limit by its period
	minIntervalNano = 1    // GCRA interval floor (1 ns per token)
)

// Limit is one named fleet-wide limit: every distinct value of the key
// (a header's value, chosen by the caller) gets Requests per Period across
// the whole fleet, with a token bucket of Burst.
type Limit struct {
	// Name names the limit in headers and metrics: 1-64 of [A-Za-z0-9_.-].
	Name string
	// Requests is the fleet-wide limit L per Period for each key value.
	Requests float64
	// Period is the token bucket's period (default 1 s; 1 ms to 24 h).
	Period time.Duration
	// Burst is the fleet-wide bucket depth in requests (default Requests,
	// at most 100x Requests, at least 1).
	Burst float64
	// Overrides sets Requests for particular key values.
	Overrides map[string]float64
	// Mode is Enforce (default) or Shadow.
	Mode Mode
	// OnNoView is PanicShare (default), FailOpen or FailClosed.
	OnNoView NoView
	// MaxKeys bounds the key values tracked (default 10,000; at most
	// 1,000,000). Values beyond it share one bucket at the default limit.
	MaxKeys int
}

// WithDefaults fills in the documented defaults.
func (l Limit) WithDefaults() Limit {
	if l.Period == 0 {
		l.Period = DefaultPeriod
	}
	if l.Burst == 0 {
		l.Burst = max(1, l.Requests)
	}
	if l.Mode == "" {
		l.Mode = DefaultMode
	}
	if l.OnNoView == "" {
		l.OnNoView = DefaultNoView
	}
	if l.MaxKeys == 0 {
		l.MaxKeys = DefaultMaxKeys
	}
	return l
}

// Validate checks a limit after defaults; the error names the field.
func (l Limit) Validate() error {
	l = l.WithDefaults()
	if err := ValidName("name", l.Name); err != nil {
		return err
	}
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("%w: limit %q: %s: %s", ErrConfig, l.Name, field, fmt.Sprintf(format, args...))
	}
	if err := validRequests(l.Requests); err != nil {
		return bad("requests", "%v", err)
	}
	if l.Period < MinPeriod || l.Period > MaxPeriod {
		return bad("period", "%v is not within [%v, %v]", l.Period, MinPeriod, MaxPeriod)
	}
	if l.Requests/l.Period.Seconds() > maxPerSecond {
		return bad("requests", "%v per %v is over %g per second", l.Requests, l.Period, maxPerSecond)
	}
	if math.IsNaN(l.Burst) || l.Burst < 1 || l.Burst > 100*max(1, l.Requests) {
		return bad("burst", "%v is not within [1, 100 x requests]", l.Burst)
	}
	switch l.Mode {
	case Enforce, Shadow:
	default:
		return bad("mode", "%q is not %q or %q", l.Mode, Enforce, Shadow)
	}
	switch l.OnNoView {
	case PanicShare, FailOpen, FailClosed:
	default:
		return bad("on_no_view", "%q is not %q, %q or %q", l.OnNoView, PanicShare, FailOpen, FailClosed)
	}
	if l.MaxKeys < 1 || l.MaxKeys > MaxMaxKeys {
		return bad("max_keys", "%d is not within [1, %d]", l.MaxKeys, MaxMaxKeys)
	}
	if len(l.Overrides) > MaxOverrides {
		return bad("overrides", "%d entries, at most %d", len(l.Overrides), MaxOverrides)
	}
	for k, v := range l.Overrides {
		if k == "" || len(k) > MaxKeyLen {
			return bad("overrides", "key %q is empty or over %d bytes", k, MaxKeyLen)
		}
		if err := validRequests(v); err != nil {
			return bad("overrides", "key %q: %v", k, err)
		}
		if v/l.Period.Seconds() > maxPerSecond {
			return bad("overrides", "key %q: %v per %v is over %g per second", k, v, l.Period, maxPerSecond)
		}
	}
	return nil
}

func validRequests(v float64) error {
	if math.IsNaN(v) || v <= 0 || v > MaxRequests {
		return fmt.Errorf("%v is not within (0, %g]", v, float64(MaxRequests))
	}
	return nil
}

// ValidName checks a limit name: 1-64 bytes of [A-Za-z0-9_.-].
func ValidName(field, s string) error {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s %q: must be 1-%d bytes", ErrConfig, field, s, MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("%w: %s %q: byte %d is not one of [A-Za-z0-9_.-]", ErrConfig, field, s, i)
		}
	}
	return nil
}

// NodeConfig configures a Node's gossip. Zero values mean the defaults.
type NodeConfig struct {
	// Epoch is the gossip period (default 500 ms); Tick is called once an
	// epoch, and demand is measured over it.
	Epoch time.Duration
	// Fanout is the number of random view members a node pushes to each
	// epoch (default 2, at most 16).
	Fanout int
	// DemandSmoothing is the weight of the previous demand estimate in each
	// epoch's EWMA (default 0.2; 0 keeps only the last epoch).
	DemandSmoothing float64
	// ShareSmoothing is the weight of the previous share in each epoch's
	// EWMA (default 0.2); it also blends the share across a view change.
	ShareSmoothing float64
	// MaxGossipKeys bounds the keys a node carries in push-sum (default:
	// the sum of its limits' MaxKeys, at least 1024). Mass for keys beyond
	// it is dropped.
	MaxGossipKeys int
	// Seed seeds the choice of peers; it must be the same at every node
	// (each epoch's overlay is derived from it, the view and the epoch's
	// number on the clock).
	Seed uint64
	// UnsafePlainPushSum sends each epoch's parts as they are, with no
	// running sums, acknowledgements or resends: Kempe's push-sum, which a
	// lost or duplicated message biases. Only for negative controls.
	UnsafePlainPushSum bool
}

// Defaults of NodeConfig.
const (
	DefaultEpoch  = 500 * time.Millisecond
	DefaultFanout = 2
	MaxFanout     = 16
)

// WithDefaults fills in the documented defaults.
func (c NodeConfig) WithDefaults() NodeConfig {
	if c.Epoch == 0 {
		c.Epoch = DefaultEpoch
	}
	if c.Fanout == 0 {
		c.Fanout = DefaultFanout
	}
	if c.DemandSmoothing == 0 {
		c.DemandSmoothing = 0.2
	}
	if c.ShareSmoothing == 0 {
		c.ShareSmoothing = 0.2
	}
	return c
}

// Validate checks the fields after defaults.
func (c NodeConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Epoch < time.Millisecond || c.Epoch > time.Minute:
		return fmt.Errorf("%w: epoch %v is not within [1ms, 1m]", ErrConfig, c.Epoch)
	case c.Fanout < 1 || c.Fanout > MaxFanout:
		return fmt.Errorf("%w: fanout %d is not within [1, %d]", ErrConfig, c.Fanout, MaxFanout)
	case !(c.DemandSmoothing >= 0 && c.DemandSmoothing < 1):
		return fmt.Errorf("%w: demand smoothing %v is not within [0, 1)", ErrConfig, c.DemandSmoothing)
	case !(c.ShareSmoothing >= 0 && c.ShareSmoothing < 1):
		return fmt.Errorf("%w: share smoothing %v is not within [0, 1)", ErrConfig, c.ShareSmoothing)
	case c.MaxGossipKeys < 0:
		return fmt.Errorf("%w: max gossip keys %d is negative", ErrConfig, c.MaxGossipKeys)
	}
	return nil
}
