package ownerguard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Errors returned by CoreConfig.Validate and NewCore.
var (
	ErrNoNamespace      = errors.New("ownerguard: namespace is empty")
	ErrNoName           = errors.New("ownerguard: owner name is empty")
	ErrNoAddr           = errors.New("ownerguard: owner address is empty")
	ErrNoIncarnation    = errors.New("ownerguard: incarnation nonce is zero")
	ErrLeaseDuration    = errors.New("ownerguard: lease duration must be positive")
	ErrRenewInterval    = errors.New("ownerguard: renew interval must be positive and shorter than the lease duration")
	ErrRaceBackoff      = errors.New("ownerguard: race backoff must satisfy 0 <= min <= max <= renew interval")
	ErrMigrationTimeout = errors.New("ownerguard: migration timeouts must not be negative")
)

// DefaultLeaseDuration is the owner's lease T, the manager's default
// (manager.DefaultLeaseDuration): 8 s, renewed every 2 s.
const DefaultLeaseDuration = 8 * time.Second

// CoreConfig configures a Core. A zero duration means its default, which
// scales with LeaseDuration so that tests can run the protocol in
// milliseconds by setting LeaseDuration alone.
type CoreConfig struct {
	// Namespace is the pool the owner serves. Required.
	Namespace string
	// Name is the owner's stable name: its ring hash_key. Required.
	Name string
	// Addr is where lookups send the owner's requests. Required.
	Addr string
	// Incarnation is this process incarnation's nonce: nonzero, and new on
	// every start (a random number does). Required.
	Incarnation uint64

	// LeaseDuration is T: the owner holds the leases of an accepted
	// response until T after it sent the request that response
	// acknowledges. Zero means DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewInterval is the period of the owner's requests. Zero means T/4.
	// It must be shorter than T.
	RenewInterval time.Duration
	// RaceBackoffMin and RaceBackoffMax bound the uniformly random delay
	// before a fresh request is sent after a racing response was dropped.
	// Zero means T/600 and T/60 respectively.
	RaceBackoffMin time.Duration
	RaceBackoffMax time.Duration
	// Rand is the source of the backoff jitter. Nil means a generator
	// seeded from Incarnation, so a Core is deterministic given its config.
	Rand *rand.Rand

	// DisableRaceFilter skips the stale-sequence check and the "does it
	// acknowledge my latest request" check. It breaks the single-copy
	// guarantee and exists only for negative controls in simulations.
	DisableRaceFilter bool

	// MigrationAddr is where the owner serves MigrationService, or ""
	// (the default): the owner takes part in no state migration
	// (core_migrate.go).
	MigrationAddr string
	// ImportTimeout bounds an import: a range granted as an import that
	// has not been imported this long after the grant is given up, and
	// regranted with a loss notification. Zero means min(T/2, 2 s).
	ImportTimeout time.Duration
	// ExportTimeout is how long a range recalled as a migration stays
	// offered to its new owner. Zero means 2·ImportTimeout + RenewInterval:
	// the new owner's grant follows our release by up to a renewal.
	ExportTimeout time.Duration
}

// DefaultCoreConfig returns a config with every duration at its default and
// the identity fields (Namespace, Name, Addr, Incarnation) empty.
func DefaultCoreConfig() CoreConfig {
	return CoreConfig{}.withDefaults()
}

// withDefaults returns c with zero durations replaced by their defaults.
func (c CoreConfig) withDefaults() CoreConfig {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 4
	}
	if c.RaceBackoffMin == 0 {
		c.RaceBackoffMin = c.LeaseDuration / 600
	}
	if c.RaceBackoffMax == 0 {
		c.RaceBackoffMax = c.LeaseDuration / 60
	}
	if c.ImportTimeout == 0 {
		c.ImportTimeout = min(c.LeaseDuration/2, DefaultImportTimeout)
	}
	if c.ExportTimeout == 0 {
		c.ExportTimeout = 2*c.ImportTimeout + c.RenewInterval
	}
	return c
}

// Validate reports the first problem with c, after zero durations are
// replaced by their defaults. Errors wrap the package's sentinels.
func (c CoreConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Namespace == "":
		return ErrNoNamespace
	case c.Name == "":
		return ErrNoName
	case c.Addr == "":
		return ErrNoAddr
	case c.Incarnation == 0:
		return ErrNoIncarnation
	case c.LeaseDuration < 0:
		return fmt.Errorf("%w: %v", ErrLeaseDuration, c.LeaseDuration)
	case c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseDuration:
		return fmt.Errorf("%w: %v with lease %v", ErrRenewInterval, c.RenewInterval, c.LeaseDuration)
	case c.RaceBackoffMin < 0 || c.RaceBackoffMax < c.RaceBackoffMin || c.RaceBackoffMax > c.RenewInterval:
		return fmt.Errorf("%w: [%v, %v] with renew interval %v",
			ErrRaceBackoff, c.RaceBackoffMin, c.RaceBackoffMax, c.RenewInterval)
	case c.ImportTimeout < 0 || c.ExportTimeout < 0:
		return fmt.Errorf("%w: import %v, export %v", ErrMigrationTimeout, c.ImportTimeout, c.ExportTimeout)
	}
	return nil
}
