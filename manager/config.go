package manager

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Errors returned by the lease core.
var (
	ErrConfig           = errors.New("manager: invalid configuration")
	ErrUnknownNamespace = errors.New("manager: unknown namespace")
	ErrNamespaceExists  = errors.New("manager: namespace exists")
	ErrUnknownOwner     = errors.New("manager: unknown owner")
	ErrBadRequest       = errors.New("manager: bad request")
	// ErrIncarnationReplaced refuses a request from an incarnation of an
	// owner name that a newer incarnation has replaced.
	ErrIncarnationReplaced = errors.New("manager: owner incarnation replaced by a newer one under the same name")
	// ErrAddressInUse refuses a session whose address is that of another
	// live owner (a new pod on a dead one's IP): Envoy keeps only the first
	// endpoint per address, so two owners with one address would give it a
	// ring other than the lease ring. The refused owner retries, and is let
	// in once the other one leaves or its session expires.
	ErrAddressInUse = errors.New("manager: address in use by another live owner")
	// ErrNamespaceFull refuses a new owner name in a namespace that has as
	// many live sessions as its ring has entries: a further owner would get
	// no virtual node, and each costs the leader memory and time.
	ErrNamespaceFull = errors.New("manager: namespace full")
)

// DefaultLeaseDuration is the default owner lease T. The manager holds a
// lease T·65/60 = 8.67 s after the last renewal it received, so a crashed
// owner's keys are granted again within about 9 s, like a load balancer's
// health check (HAProxy marks a server down after 3 failed checks 2 s
// apart). The price of a short T: every owner renews every T/4 = 2 s (500
// owners are 250 requests a second on the leader), and an owner cut off
// from every manager for longer than T stops serving. Centrifuge's 60 s
// suits a pool that can wait a minute after a crash; set it per namespace.
const DefaultLeaseDuration = 8 * time.Second

// Config configures the lease core. Durations are in the manager's own clock.
type Config struct {
	// Nonce identifies this manager incarnation (PRS §4.2); nonzero.
	Nonce uint64
	// LeaseDuration is the default owner lease T for new namespaces
	// (default DefaultLeaseDuration, 8 s). The manager holds a lease for
	// T·65/60.
	LeaseDuration time.Duration
	// LogRetention is how long the change log keeps a change (default 5 min),
	// for Lookup's deltas (PRS §4.2). 0 keeps none: Lookup then answers
	// with snapshots. fuge-manager runs so, since its lookups read the
	// table over xDS and resume from their block versions, not from the log.
	LogRetention time.Duration
	// RaceBackoffMin and RaceBackoffMax bound the random delay before the
	// manager re-sends after dropping a racing request (defaults T/600, T/60).
	RaceBackoffMin, RaceBackoffMax time.Duration
	// Rand draws the backoff; nil means a source seeded from Nonce.
	Rand *rand.Rand
	// DisableRaceFilter turns off the sequence-number checks. Only for the
	// simulator's negative controls: it breaks the single-copy guarantee.
	DisableRaceFilter bool
	// UnsafeReplace lets a new incarnation of an owner name take over its
	// predecessor's arcs at once, as Fuge did before, instead of waiting
	// until they expire. Only for the simulator's negative controls: it
	// breaks the single-copy guarantee when the predecessor still runs.
	UnsafeReplace bool
	// UnsafeBalanceNoRecall makes a balancing move hand the arcs it moves
	// to their new owner at once, without recalling them from the old one
	// first. Only for the simulator's negative control: it breaks the
	// single-copy guarantee.
	UnsafeBalanceNoRecall bool
	// UnsafeNoBounds accepts requests listing more ranges than the ring has
	// arcs. Only for the hostile-client tests' negative controls.
	UnsafeNoBounds bool
	// DisableMigration makes every recall a plain one: no range is handed
	// over with its state (migrate.go), whatever the owners support. For
	// benchmarks that compare the two.
	DisableMigration bool
}

// DefaultConfig returns the documented defaults (with Nonce 1).
func DefaultConfig() Config {
	return Config{
		Nonce:          1,
		LeaseDuration:  DefaultLeaseDuration,
		LogRetention:   5 * time.Minute,
		RaceBackoffMin: DefaultLeaseDuration / 600,
		RaceBackoffMax: DefaultLeaseDuration / 60,
	}
}

// Validate checks the fields against each other.
func (c Config) Validate() error {
	switch {
	case c.Nonce == 0:
		return fmt.Errorf("%w: Nonce must be nonzero", ErrConfig)
	case c.LeaseDuration <= 0:
		return fmt.Errorf("%w: LeaseDuration %v must be positive", ErrConfig, c.LeaseDuration)
	case c.LogRetention < 0:
		return fmt.Errorf("%w: LogRetention %v must not be negative", ErrConfig, c.LogRetention)
	case c.RaceBackoffMin <= 0 || c.RaceBackoffMax < c.RaceBackoffMin:
		return fmt.Errorf("%w: race backoff [%v, %v] must be positive and ordered", ErrConfig, c.RaceBackoffMin, c.RaceBackoffMax)
	case c.RaceBackoffMax >= c.LeaseDuration/4:
		return fmt.Errorf("%w: race backoff %v must be well under the renewal interval %v", ErrConfig, c.RaceBackoffMax, c.LeaseDuration/4)
	}
	return nil
}

// NamespaceConfig describes one pool of owners.
type NamespaceConfig struct {
	Name string
	// RingSize is R = Σ V_h, a power of two (default 4096).
	RingSize int
	// Header is the routing header (default X-Fuge-Key); the core only
	// stores it for the services built on it.
	Header string
	// LeaseDuration is the owner lease T; 0 means Config.LeaseDuration.
	LeaseDuration time.Duration
	// Balance names the balancing policy the leader runs on the owners'
	// load reports: BalanceOff, BalanceSeeds or BalanceFit; "" means
	// DefaultBalance.
	Balance string `json:",omitempty"`
	// BalanceInterval is the least time between policy rounds (0 means
	// DefaultBalanceInterval, 15 s, or T/4 if longer); from T/4 to 1 h
	// (or T if longer).
	BalanceInterval time.Duration `json:",omitempty"`
	// BalanceMaxMoves bounds the virtual nodes one round moves (0 means
	// DefaultBalanceMaxMoves, 256, or RingSize if smaller); from 1 to
	// RingSize.
	BalanceMaxMoves int `json:",omitempty"`
	// BalanceMinLoad is the mean load below which a round moves nothing
	// (0 means DefaultBalanceMinLoad, 10); finite, 0 to lease.MaxLoad; a
	// negative value means 0.
	BalanceMinLoad float64 `json:",omitempty"`
}

// HoldDuration is how long the manager keeps a lease unavailable to others
// after receiving the request it answers: T·65/60 (Centrifuge §2.3.1).
func HoldDuration(t time.Duration) time.Duration { return t / 60 * 65 }

func (nc *NamespaceConfig) defaults(c Config) error {
	if nc.Name == "" {
		return fmt.Errorf("%w: namespace name is empty", ErrBadRequest)
	}
	if err := lease.ValidName("namespace name", nc.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if nc.RingSize == 0 {
		nc.RingSize = 4096
	}
	if !ring.ValidRingSize(nc.RingSize) {
		return fmt.Errorf("%w: namespace %q: %w: %d", ErrBadRequest, nc.Name, ring.ErrRingSize, nc.RingSize)
	}
	if nc.Header == "" {
		nc.Header = "X-Fuge-Key"
	}
	if nc.LeaseDuration == 0 {
		nc.LeaseDuration = c.LeaseDuration
	}
	if nc.LeaseDuration < 0 {
		return fmt.Errorf("%w: namespace %q: negative lease duration", ErrBadRequest, nc.Name)
	}
	if err := nc.balanceDefaults(); err != nil {
		return err
	}
	if err := lease.ValidHeaderName("header", nc.Header); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", ErrBadRequest, nc.Name, err)
	}
	if err := lease.ValidLeaseDuration("lease duration", nc.LeaseDuration); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", ErrBadRequest, nc.Name, err)
	}
	return nil
}

// balanceDefaults fills in and checks the balancing fields.
func (nc *NamespaceConfig) balanceDefaults() error {
	if nc.Balance == "" {
		nc.Balance = DefaultBalance
	}
	if !ValidBalance(nc.Balance) {
		return fmt.Errorf("%w: namespace %q: balance %.40q is not %s, %s or %s", ErrBadRequest, nc.Name, nc.Balance, BalanceOff, BalanceSeeds, BalanceFit)
	}
	if nc.BalanceInterval == 0 {
		nc.BalanceInterval = max(DefaultBalanceInterval, nc.LeaseDuration/4)
	}
	if hi := max(time.Hour, nc.LeaseDuration); nc.BalanceInterval < nc.LeaseDuration/4 || nc.BalanceInterval > hi {
		return fmt.Errorf("%w: namespace %q: balance interval %v must be from T/4 (%v) to %v", ErrBadRequest, nc.Name, nc.BalanceInterval, nc.LeaseDuration/4, hi)
	}
	if nc.BalanceMaxMoves == 0 {
		nc.BalanceMaxMoves = min(DefaultBalanceMaxMoves, nc.RingSize)
	}
	if nc.BalanceMaxMoves < 1 || nc.BalanceMaxMoves > nc.RingSize {
		return fmt.Errorf("%w: namespace %q: balance max moves %d must be from 1 to the ring size %d", ErrBadRequest, nc.Name, nc.BalanceMaxMoves, nc.RingSize)
	}
	switch {
	case nc.BalanceMinLoad == 0:
		nc.BalanceMinLoad = DefaultBalanceMinLoad
	case nc.BalanceMinLoad < 0:
		nc.BalanceMinLoad = 0
	}
	if err := (lease.LoadReport{Rate: nc.BalanceMinLoad}).Validate(); err != nil {
		return fmt.Errorf("%w: namespace %q: balance min load: %w", ErrBadRequest, nc.Name, err)
	}
	return nil
}
