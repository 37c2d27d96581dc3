package ownerguard

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Errors of the Owner library. Errors that a manager returned wrap both one
// of these sentinels and the gRPC status, so errors.Is and status.Code both
// work on Owner.Err.
var (
	ErrNoManagers = errors.New("ownerguard: no manager addresses")
	ErrBackoff    = errors.New("ownerguard: " + clientshell.BackoffRule)
	ErrStarted    = errors.New("ownerguard: owner already started")
	ErrClosed     = errors.New("ownerguard: owner closed")

	// ErrUnknownNamespace: the manager does not know the namespace (NOT_FOUND).
	ErrUnknownNamespace = errors.New("ownerguard: manager does not know the namespace")
	// ErrOwnerInUse: another incarnation holds a live session under this
	// owner name, or a newer incarnation replaced this one (ALREADY_EXISTS).
	// The first clears once that session's stream ends.
	ErrOwnerInUse = errors.New("ownerguard: owner name in use by another incarnation")
	// ErrAddressInUse: another live owner has this owner's address
	// (ALREADY_EXISTS naming an address). It clears once that owner leaves
	// or its session expires, T·65/60 after its last renewal.
	ErrAddressInUse = errors.New("ownerguard: address in use by another live owner")
	// ErrRejected: the manager refused the session for another permanent
	// reason (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED,
	// UNIMPLEMENTED).
	ErrRejected = errors.New("ownerguard: manager rejected the session")
)

// Defaults of OwnerConfig.
const (
	DefaultBackoffBase     = clientshell.DefaultBackoffBase
	DefaultBackoffMax      = clientshell.DefaultBackoffMax
	DefaultBackoffJitter   = clientshell.DefaultBackoffJitter
	DefaultMaxMessageBytes = 16 << 20
	DefaultCloseTimeout    = time.Second
	// MinKeepaliveTime is grpc-go's floor for client keepalive pings.
	MinKeepaliveTime = 10 * time.Second
)

// Clock is the Owner's time source. Its times must not jump: the Owner
// compares them as Unix nanoseconds (see the package documentation).
type Clock interface{ Now() time.Time }

// BackoffConfig paces reconnection after a failed stream: attempt k (from 0)
// waits min(Max, Base·2^k), scaled by a random factor in [1-Jitter, 1+Jitter].
// The count restarts when a manager accepts the session. Zero fields mean
// the Default* values.
type BackoffConfig = clientshell.Backoff

// OwnerConfig configures an Owner. Zero values mean the documented defaults;
// every protocol duration derives from LeaseDuration, so tests run the same
// protocol in milliseconds by setting LeaseDuration alone.
type OwnerConfig struct {
	// Managers lists every manager's gRPC address. The Owner tries them in
	// turn and follows a standby's "fuge-leader" trailer to the leader.
	// Required.
	Managers []string
	// Namespace, Name and Addr identify the session: the pool, the owner's
	// stable name (its ring hash_key) and where lookups send its requests.
	// Required.
	Namespace, Name, Addr string

	// LeaseDuration is T. It must equal the namespace's T at the manager
	// (nothing on the wire checks it). Zero means DefaultLeaseDuration
	// (60 s). Requests go out every T/4.
	LeaseDuration time.Duration
	// OnOwnership, if set, hears every change of the held set: the ranges
	// newly held (or held under a new generation) and the ranges no longer
	// held. It is called from one goroutine, in order, never concurrently,
	// and never from the session goroutine, so a slow callback does not
	// delay renewals. It must not call Close.
	OnOwnership func(granted, revoked []ring.Range)

	// Backoff paces reconnection (default: base 50 ms, max min(2 s, T/20),
	// jitter 0.2).
	Backoff BackoffConfig
	// ResponseTimeout abandons a stream that has answered none of the
	// requests sent on it for this long (a manager that is up but wedged,
	// or a connection the keepalive has not caught yet). Zero means T/2;
	// negative disables it.
	ResponseTimeout time.Duration
	// KeepaliveTime and KeepaliveTimeout are the gRPC client keepalive:
	// ping after KeepaliveTime without data from the manager, and drop the
	// connection if the ping is not answered within KeepaliveTimeout. Zero
	// means max(T/3, 10 s) and max(T/12, 1 s): longer than the renew
	// interval (T/4), so that a live session's responses keep the
	// connection from pinging (at T/4, with responses T/4 apart, most
	// renewals also cost the manager a ping and its answer), and short
	// enough that a dead connection is dropped (T/3 + T/12) before
	// ResponseTimeout (T/2). The manager's keepalive enforcement policy
	// must permit pings this often.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// CloseTimeout bounds how long Close waits for the manager to end the
	// stream after the Owner half-closes it. Zero means 1 s; negative
	// means do not wait.
	CloseTimeout time.Duration
	// DialOptions are appended to the Owner's own (insecure transport
	// credentials, keepalive, message size limits), so they override them.
	DialOptions []grpc.DialOption
	// MaxMessageBytes limits gRPC messages both ways. Zero means 16 MiB.
	MaxMessageBytes int

	// Migration, if set, moves the application's state with a range on
	// clean handoffs (a drain, Close, a rebalancing move) instead of
	// letting it be lost and republished: see Migrator. Nil means off.
	Migration *MigrationConfig
	// LoadWindow is the time constant of the moving average of the
	// admitted request rate that the Owner reports as its load on every
	// lease request (see CountRequest, DefaultLoadWindow: 5 s). Negative
	// means report no load.
	LoadWindow time.Duration
	// LoadFunc, if set, is called on every lease request (every T/4, from
	// the session goroutine; it must be quick) for the load to report
	// instead: the application's own figure. A figure that
	// lease.LoadReport.Validate refuses is not sent.
	LoadFunc func() lease.LoadReport

	// Logger receives connection events. Nil means discard.
	Logger *slog.Logger
	// Clock is the time source for leases and timers. Nil means the
	// monotonic clock (as wall time since the Owner was created).
	Clock Clock
}

// DefaultOwnerConfig returns a config with every default filled in and the
// identity fields (Managers, Namespace, Name, Addr) empty.
func DefaultOwnerConfig() OwnerConfig { return OwnerConfig{}.withDefaults() }

func (c OwnerConfig) withDefaults() OwnerConfig {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	t := c.LeaseDuration
	// Every duration scales with T: a reconnect backoff longer than a
	// small fraction of the lease would let leases lapse in a failover.
	if c.Backoff.Max == 0 {
		c.Backoff.Max = min(DefaultBackoffMax, t/20)
	}
	if c.Backoff.Base == 0 {
		c.Backoff.Base = min(DefaultBackoffBase, c.Backoff.Max)
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = t / 2
	}
	if c.KeepaliveTime == 0 {
		c.KeepaliveTime = max(t/3, MinKeepaliveTime)
	}
	if c.KeepaliveTimeout == 0 {
		c.KeepaliveTimeout = max(t/12, time.Second)
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Migration != nil {
		m := c.Migration.withDefaults(t)
		c.Migration = &m
	}
	if c.LoadWindow == 0 {
		c.LoadWindow = DefaultLoadWindow
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clientshell.NewMonoClock()
	}
	return c
}

// coreConfig is the Core's config for one incarnation.
func (c OwnerConfig) coreConfig(incarnation uint64) CoreConfig {
	cc := CoreConfig{
		Namespace:     c.Namespace,
		Name:          c.Name,
		Addr:          c.Addr,
		Incarnation:   incarnation,
		LeaseDuration: c.LeaseDuration,
	}
	if c.Migration != nil {
		cc.MigrationAddr, cc.ImportTimeout = c.Migration.Addr, c.Migration.ImportTimeout
	}
	return cc
}

// Validate reports the first problem with c, after defaults. Errors wrap the
// package's sentinels.
func (c OwnerConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Managers) == 0 {
		return ErrNoManagers
	}
	for _, m := range c.Managers {
		if m == "" {
			return fmt.Errorf("%w: empty address in %q", ErrNoManagers, c.Managers)
		}
	}
	if err := c.coreConfig(1).Validate(); err != nil {
		return err
	}
	if c.Migration != nil {
		if err := c.Migration.validate(); err != nil {
			return err
		}
	}
	if err := c.Backoff.Check(ErrBackoff); err != nil {
		return err
	}
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("ownerguard: MaxMessageBytes %d must not be negative", c.MaxMessageBytes)
	}
	if c.KeepaliveTime < 0 || c.KeepaliveTimeout < 0 {
		return fmt.Errorf("ownerguard: keepalive %v/%v must not be negative", c.KeepaliveTime, c.KeepaliveTimeout)
	}
	return nil
}

// OwnerStats counts an Owner's connection and message events.
type OwnerStats struct {
	Attempts   uint64 // streams started, to any manager
	Reconnects uint64 // streams started after the first
	Redirects  uint64 // "fuge-leader" trailers followed
	Sessions   uint64 // streams on which a manager accepted the session
	Stalls     uint64 // streams abandoned after ResponseTimeout
	Requests   uint64 // requests handed to a stream (counted before the send)
	Responses  uint64 // responses received from a stream
	Malformed  uint64 // responses that failed to decode (dropped)
	Unsent     uint64 // requests the core made while no stream was open
	// LastWait is how long the manager took to answer the last time: from
	// writing the oldest unanswered request to reading the next response.
	LastWait time.Duration
	Core     CoreStats
	// Migration counts state transfers (OwnerConfig.Migration).
	Migration MigrationCounters
}
