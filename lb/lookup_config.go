package lb

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/ring"
)

// The xDS contract between a Lookup and the manager's xds package.
const (
	// ArcBlockTypeURL is the type of the lease-table resources: the
	// 2^block_bits fuge.v1.ArcBlock of a namespace (wire.BlockBits of its
	// ring size), block b named wire.BlockName(namespace, b) and holding
	// the arcs that end in it.
	ArcBlockTypeURL = "type.googleapis.com/fuge.v1.ArcBlock"
	// HeartbeatTypeURL is the type of the one resource HeartbeatName(ns),
	// a fuge.v1.Heartbeat the leader rewrites every heartbeat interval.
	HeartbeatTypeURL = "type.googleapis.com/fuge.v1.Heartbeat"
	// NamespaceMetadataKey is the node.metadata key naming the namespace
	// (node.cluster names it too).
	NamespaceMetadataKey = "fuge.namespace"
	// LeaderTrailer is the trailer in which a standby names the leader's
	// gRPC address when it refuses a stream with FAILED_PRECONDITION.
	LeaderTrailer = "fuge-leader"
	// StandbyTrailer is the trailer in which the leader names a standby's
	// gRPC address when it refuses a stream with UNAVAILABLE: it leaves
	// Lookups to its standbys while one is in contact.
	StandbyTrailer = "fuge-standby"
)

// HeartbeatName is the xDS name of a namespace's heartbeat resource.
func HeartbeatName(namespace string) string { return namespace + "/heartbeat" }

// Defaults of LookupConfig.
const (
	DefaultBackoffBase      = clientshell.DefaultBackoffBase
	DefaultBackoffMax       = clientshell.DefaultBackoffMax
	DefaultBackoffJitter    = clientshell.DefaultBackoffJitter
	DefaultMaxMessageBytes  = 16 << 20
	DefaultKeepaliveTime    = 10 * time.Second // grpc-go's floor for client pings
	DefaultKeepaliveTimeout = 5 * time.Second
	// DefaultCloseGrace bounds how long a stream that the Lookup half-closed
	// after a NACK may take to end before it is cancelled.
	DefaultCloseGrace = time.Second
)

// Errors of the network Lookup.
var (
	ErrNoManagers = errors.New("lb: no manager addresses")
	ErrBackoff    = errors.New("lb: " + clientshell.BackoffRule)
	ErrStarted    = errors.New("lb: lookup already started")
	ErrClosed     = errors.New("lb: lookup closed")
)

// Clock is the Lookup's time source for the staleness bound. Its times must
// not jump. If it also implements TimerClock, the Lookup's protocol timers
// (staleness, StreamTimeout) run on it; otherwise they are real timers for
// the durations it reports.
type Clock interface{ Now() time.Time }

// TimerClock is a Clock that makes timers firing by its own time, such as a
// fake clock in tests that fires them when it is advanced.
type TimerClock interface {
	Clock
	// NewTimer returns a channel that receives once d has passed by this
	// clock, and a function that stops the timer.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// BackoffConfig paces reconnection after a failed stream, as grpc-go does:
// attempt k (from 0) waits min(Max, Base·2^k), scaled by a random factor in
// [1-Jitter, 1+Jitter]. The count restarts when a stream applies a table.
// Zero fields mean the Default* values.
type BackoffConfig = clientshell.Backoff

// LookupConfig configures a network Lookup. Zero values mean the documented
// defaults.
type LookupConfig struct {
	// Managers lists every manager's gRPC address. The Lookup starts with
	// one at random, so that Lookups spread over the nodes (every standby
	// in contact with the leader serves them, and the leader too when no
	// standby is in contact or it is configured to), follows a standby's
	// "fuge-leader" trailer to the leader and the leader's "fuge-standby"
	// trailer to a standby, and otherwise tries the addresses in turn.
	// Required.
	Managers []string
	// InOrder starts with Managers[0] instead of one at random: for a
	// list already in order of preference.
	InOrder bool
	// Namespace is the namespace whose lease table the Lookup follows.
	// Required.
	Namespace string
	// Name is the Lookup's xDS node id, for the manager's records. Optional.
	Name string

	// OnLoss is the loss-notification upcall (PRS's recovery notification):
	// the ranges whose generation changed, merged, in ring order, or, with
	// all set, [ring.Full()] after StalenessBound without word from the
	// leader. It is called from one goroutine, in order, after the table
	// that caused it is published (so Lookup already returns the new
	// generations), never from the stream goroutine. It must not call Close.
	OnLoss func(ranges []ring.Range, all bool)

	// StalenessBound: when the Lookup has not heard from the leader for this
	// long, by Clock (an applied table or a heartbeat on an up-to-date
	// stream), it calls OnLoss on everything once. Zero means
	// DefaultStalenessBound (30 s). The core's SyncInterval is not used:
	// over xDS the leader pushes changes as they commit and its heartbeat
	// replaces polling, so the manager's heartbeat interval must be well
	// below StreamTimeout.
	StalenessBound time.Duration
	// StreamTimeout abandons a stream on which nothing arrived for this long,
	// by Clock (a node that lost leadership but keeps its streams, a wedged
	// manager), and tries the next manager. Zero means StalenessBound/2;
	// negative disables it.
	StreamTimeout time.Duration

	// Backoff paces reconnection (default: base 50 ms, max 2 s, jitter 0.2).
	Backoff BackoffConfig
	// KeepaliveTime and KeepaliveTimeout are the gRPC client keepalive: ping
	// after KeepaliveTime without data and drop the connection if the ping
	// is not answered within KeepaliveTimeout, so a dead connection is
	// noticed. Zero means 10 s (grpc-go's floor) and 5 s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// DialOptions are appended to the Lookup's own (insecure transport
	// credentials, keepalive, receive limit), so they override them.
	DialOptions []grpc.DialOption
	// Conns, when set, carries the Lookup's streams on connections shared
	// with other Lookups (see ConnPool), dialled with the pool's options:
	// DialOptions, KeepaliveTime, KeepaliveTimeout and MaxMessageBytes must
	// then be left zero. Nil: the Lookup dials a connection of its own
	// for each stream.
	Conns *ConnPool
	// MaxMessageBytes limits received messages. Zero means 16 MiB.
	MaxMessageBytes int

	// Logger receives connection events. Nil means discard.
	Logger *slog.Logger
	// Clock is the time source for the staleness bound. Nil means the
	// monotonic clock (as wall time since the Lookup was created).
	Clock Clock
}

func (c LookupConfig) withDefaults() LookupConfig {
	if c.StalenessBound == 0 {
		c.StalenessBound = DefaultStalenessBound
	}
	if c.StreamTimeout == 0 {
		c.StreamTimeout = c.StalenessBound / 2
	}
	// The reconnect backoff scales with the staleness bound.
	if c.Backoff.Max == 0 {
		c.Backoff.Max = min(DefaultBackoffMax, c.StalenessBound/20)
	}
	if c.Backoff.Base == 0 {
		c.Backoff.Base = min(DefaultBackoffBase, c.Backoff.Max)
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.KeepaliveTime == 0 {
		c.KeepaliveTime = DefaultKeepaliveTime
	}
	if c.KeepaliveTimeout == 0 {
		c.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clientshell.NewMonoClock()
	}
	return c
}

// coreConfig is the Core's config. The core polls every SyncInterval; the
// shell drops those requests (see StalenessBound), so the interval only has
// to satisfy the core's rule SyncInterval < StalenessBound.
func (c LookupConfig) coreConfig() CoreConfig {
	return CoreConfig{
		Namespace:      c.Namespace,
		Name:           c.Name,
		SyncInterval:   c.StalenessBound / 2,
		StalenessBound: c.StalenessBound,
	}
}

// Validate reports the first problem with c, after defaults. Errors wrap the
// package's sentinels.
func (c LookupConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Managers) == 0 {
		return ErrNoManagers
	}
	for _, m := range c.Managers {
		if m == "" {
			return fmt.Errorf("%w: empty address in %q", ErrNoManagers, c.Managers)
		}
	}
	if c.StalenessBound <= 0 {
		return fmt.Errorf("%w: %v", ErrStalenessBound, c.StalenessBound)
	}
	if err := c.coreConfig().Validate(); err != nil {
		return err
	}
	if err := c.Backoff.Check(ErrBackoff); err != nil {
		return err
	}
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("lb: MaxMessageBytes %d must not be negative", c.MaxMessageBytes)
	}
	if c.Conns != nil && (len(c.DialOptions) > 0 || c.KeepaliveTime != DefaultKeepaliveTime ||
		c.KeepaliveTimeout != DefaultKeepaliveTimeout || c.MaxMessageBytes != DefaultMaxMessageBytes) {
		return ErrPoolOptions
	}
	if c.KeepaliveTime < 0 || c.KeepaliveTimeout < 0 {
		return fmt.Errorf("lb: keepalive %v/%v must not be negative", c.KeepaliveTime, c.KeepaliveTimeout)
	}
	return nil
}

// LookupStats counts a Lookup's connection and message events.
type LookupStats struct {
	Attempts   uint64 // streams started, to any manager
	Reconnects uint64 // streams started after the first
	Redirects  uint64 // "fuge-leader" and "fuge-standby" trailers followed
	Stalls     uint64 // streams abandoned after StreamTimeout
	Updates    uint64 // ArcBlock responses applied to the table (Version)
	Rejected   uint64 // ArcBlock responses acknowledged but not applied: the table held was not complete
	NACKs      uint64 // responses refused because a resource was malformed
	Heartbeats uint64 // heartbeats that refreshed the staleness clock
	// LossNotifications counts OnLoss upcalls (queued), LossAll those on
	// everything after the staleness bound.
	LossNotifications uint64
	LossAll           uint64
	// ServedLSN is the LSN the manager node served the last ArcBlock
	// response at (its system_version_info: the LSN of the last view the
	// node published). Every node publishes the same views at the same
	// LSNs, so a standby's trails the leader's by its lag.
	ServedLSN uint64
	Core      CoreStats
}
