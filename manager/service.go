package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Errors of the manager service.
var (
	ErrNotLeader = errors.New("manager: not the leader")
	// ErrLookupsOnStandbys refuses a Lookup stream on the leader while a
	// standby in contact serves them (CheckLookup).
	ErrLookupsOnStandbys = errors.New("manager: the leader leaves Lookup streams to its standbys")
	ErrOwnerInUse        = errors.New("manager: owner name held by another live session")
	ErrShuttingDown      = errors.New("manager: shutting down")
)

// Clock is the service's time source. The lease core never reads a clock;
// the service passes it Now(). Tests inject their own.
type Clock interface{ Now() time.Time }

// Observer hears every change to a namespace's replicated lookup view, on
// every node, as the raft FSM applies it. Entries is the whole view after
// the change (it must not be modified). The xds package implements it to
// serve the lease table to lookups.
type Observer interface {
	NamespaceView(ns string, entries []LookupEntry, version uint64)
	NamespaceDeleted(ns string)
}

// ViewObserver is an Observer that takes a namespace's view as the
// replicated state keeps it (lease.View, immutable) with the ranges that
// changed, so that neither side handles the whole view per commit: at
// R = 65536 a copy of it was 4 MB, and comparing it with the last one
// 65,536 entries. The FSM calls NamespaceViewChanged instead of
// NamespaceView when its observer implements it, at the same moments.
// Changed lists the ranges the applied commit set (the view differs from
// the previous call's only in them and in the merging of their
// neighbours); nil means the whole view may have changed (a created
// namespace, a restored snapshot).
type ViewObserver interface {
	Observer
	NamespaceViewChanged(ns string, view lease.View, changed []ring.Range, version uint64)
}

// LookupEntry is one range of a namespace's lookup view (lease.Entry, named
// here so that implementers of Observer need not import lease).
type LookupEntry = lease.Entry

// RingObserver is an Observer that also hears each namespace's desired
// ring, which the xds package serves to Envoy and proxyless gRPC clients.
// The FSM calls NamespaceRing when the Observer it is given implements it:
// on every node, as raft applies the change, when a namespace is created and
// after every commit that changes its owner records (an owner joins, leaves,
// expires, drains or restarts), and for every namespace when a snapshot is
// restored. Version is the raft index of the log entry that made the change
// (for a restored snapshot, the last one it holds); it is the same on every
// node and grows with every change. Calls for one namespace come in log
// order, before its NamespaceView for the same entry (so that the ring
// size, RingView.RingSize, is known before a namespace's first view: the
// xds package sizes the blocks it serves the view in by it), from raft's
// apply goroutine; they must not block.
type RingObserver interface {
	Observer
	NamespaceRing(ns string, view RingView, version uint64)
}

// RingView is a namespace's desired ring as Envoy and gRPC clients route by
// it (lease.RingView, named here for implementers of RingObserver).
type RingView = lease.RingView

// ServerConfig configures a manager node. Every protocol duration derives
// from LeaseDuration, so tests run the same protocol in milliseconds.
type ServerConfig struct {
	NodeID   string // stable raft server ID (default "node1")
	DataDir  string // raft log, stable store and snapshots (default "./fuge-data")
	RaftAddr string // raft transport (default 127.0.0.1:7400)
	GRPCAddr string // owner protocol and xDS (default 127.0.0.1:7401)
	HTTPAddr string // admin API, /metrics, /healthz (default 127.0.0.1:7402)
	// Advertise*Addr, when set, are the addresses the other members and
	// clients are told to use instead of the bound ones (a NAT, a
	// Kubernetes Service, or the fault harness's relays).
	AdvertiseRaftAddr, AdvertiseGRPCAddr, AdvertiseHTTPAddr string
	// Join is the admin HTTP address of a running member; empty means
	// bootstrap a single-node cluster when there is no state yet.
	Join string

	LeaseDuration time.Duration // owner lease T (default 8 s); the manager holds T·65/60
	// LogRetention is how long the replicated state keeps each change in
	// its change log (Config.LogRetention); default 0, none. Nothing in
	// the server reads the log: Lookups over xDS resume from their block
	// versions. At ten times PRS's scale (R=65536) a 5-minute log held
	// 33 MB of the leader's heap (the core's copy and the replicated
	// state's), 17 MB of each standby's, and went into every snapshot.
	LogRetention time.Duration

	HeartbeatInterval time.Duration // lookup heartbeat (default T/6)

	// Raft timing; zero means hashicorp/raft's defaults. Tests shorten them.
	RaftHeartbeatTimeout, RaftElectionTimeout, RaftLeaderLeaseTimeout time.Duration
	// RaftCommitTimeout is hashicorp/raft's CommitTimeout: while nothing
	// new is appended, how often (randomly once to twice in it) the leader
	// sends each follower the commit index (default raft's, 50 ms). The
	// leader does not wait for it after its own commits (see nudges in
	// server.go); tests set it long to prove that.
	RaftCommitTimeout time.Duration

	// Namespaces are created at start when missing.
	Namespaces []NamespaceConfig

	MaxMessageBytes int // gRPC message limit (default 4 MiB)
	// MaxStreamsPerConn bounds the concurrent gRPC streams of one client
	// connection (default 1024: a router multiplexes a few, a load
	// generator hundreds).
	MaxStreamsPerConn int
	// SessionRate and SessionBurst bound the owner sessions one client (its
	// certificate's ID, or its IP address without TLS) may open: a token
	// bucket (defaults DefaultSessionRate per second, DefaultSessionBurst).
	SessionRate, SessionBurst int
	// ProxyLease is a rate-limiting proxy's registration T (default
	// DefaultProxyLease, 4 s) and ViewInterval the least time between two
	// of a namespace's proxy views (default DefaultViewInterval, 3 s):
	// proxysvc.go, views.go.
	ProxyLease, ViewInterval time.Duration

	// TLS, when set, makes every port mutual TLS with its certificates
	// (see tls.go for who may do what). nil serves plaintext with no
	// authentication: tests, and fuge-manager --insecure.
	TLS *fugetls.Source

	// AdminToken, when set, is required as "Authorization: Bearer <token>"
	// on every admin write (namespace create and delete, drain, cluster
	// join) and on /debug/pprof; a joining node sends it too.
	AdminToken string
	// Pprof serves /debug/pprof on the admin address (admins only).
	Pprof bool
	// LeaderServesLookups makes the leader serve Lookup streams even while
	// a standby in contact could. Off (the default), the leader sends them
	// to its standbys, which serve them from their own raft state, and
	// keeps its cores for the owners' streams and the commits; it serves
	// Lookups only when no standby is in contact (CheckLookup).
	LeaderServesLookups bool

	// UnsafeNoInputChecks switches off the bounds on owner requests, the
	// checks on cluster joins and the refusal of cross-origin admin writes:
	// only for the hostile-client tests' negative controls.
	UnsafeNoInputChecks bool

	// UnsafeReplace is Config.UnsafeReplace: only for the fault harness's
	// negative control. It breaks the single-copy guarantee.
	UnsafeReplace bool

	Logger   *slog.Logger // default: discard
	Clock    Clock        // default: the wall clock
	Observer Observer     // optional: the lease table's xDS publisher
	// Heartbeat, when set, is called every HeartbeatInterval on the leader
	// for each namespace (the xds package rewrites its heartbeat resource).
	Heartbeat func(ns string)
	// LookupStreams, when set, reports open lookup streams for /metrics.
	LookupStreams func() int
	// RecheckLookups, when set, marks one in share of this node's Lookup
	// streams (rounded up) to ask CheckLookup again at their next request
	// (the xds package's LeaseTable.RecheckLookups), and returns how many
	// it marked: a node that became leader hands the Lookups it served to
	// its standbys with it, a share every heartbeat interval.
	RecheckLookups func(share int) int
	// XDSNACKs, when set, reports the xDS requests that carried an
	// error_detail (NACKs) since start, for /metrics.
	XDSNACKs func() uint64
	// XDSWholeTables, when set, reports the Lookup streams' whole tables
	// that waited for a slot since start, and those sent without one after
	// waiting too long (the xds package's Stats.WholeWaits and
	// WholeBypasses), for /metrics.
	XDSWholeTables func() (waits, bypasses uint64)
	// GRPCOptions are further options for the gRPC server: the xds
	// package's (LeaseTable.ServerOptions, its codec).
	GRPCOptions []grpc.ServerOption
}

// DefaultServerConfig returns the documented defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		NodeID:          "node1",
		DataDir:         "./fuge-data",
		RaftAddr:        "127.0.0.1:7400",
		GRPCAddr:        "127.0.0.1:7401",
		HTTPAddr:        "127.0.0.1:7402",
		LeaseDuration:   DefaultLeaseDuration,
		MaxMessageBytes: 4 << 20,
	}
}

// Validate checks the fields against each other, after defaults.
func (c ServerConfig) Validate() error {
	switch {
	case c.NodeID == "":
		return fmt.Errorf("%w: NodeID is empty", ErrConfig)
	case c.DataDir == "":
		return fmt.Errorf("%w: DataDir is empty", ErrConfig)
	case c.RaftAddr == "" || c.GRPCAddr == "" || c.HTTPAddr == "":
		return fmt.Errorf("%w: raft, gRPC and HTTP addresses are required", ErrConfig)
	case c.LeaseDuration <= 0:
		return fmt.Errorf("%w: LeaseDuration %v must be positive", ErrConfig, c.LeaseDuration)
	case c.LogRetention < 0:
		return fmt.Errorf("%w: LogRetention %v must not be negative", ErrConfig, c.LogRetention)
	case c.RaftCommitTimeout < 0:
		return fmt.Errorf("%w: RaftCommitTimeout %v must not be negative", ErrConfig, c.RaftCommitTimeout)
	case c.HeartbeatInterval < 0 || c.HeartbeatInterval >= c.LeaseDuration:
		return fmt.Errorf("%w: HeartbeatInterval %v must be under LeaseDuration", ErrConfig, c.HeartbeatInterval)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: MaxMessageBytes must not be negative", ErrConfig)
	case c.MaxStreamsPerConn < 0 || c.SessionRate < 0 || c.SessionBurst < 0:
		return fmt.Errorf("%w: MaxStreamsPerConn, SessionRate and SessionBurst must not be negative", ErrConfig)
	}
	for _, nc := range c.Namespaces {
		if err := nc.defaults(Config{LeaseDuration: c.LeaseDuration}); err != nil {
			return err
		}
	}
	return nil
}

func (c ServerConfig) withDefaults() ServerConfig {
	d := DefaultServerConfig()
	if c.NodeID == "" {
		c.NodeID = d.NodeID
	}
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.RaftAddr == "" {
		c.RaftAddr = d.RaftAddr
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = d.GRPCAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = d.HTTPAddr
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = d.LeaseDuration
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseDuration / 6
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.MaxStreamsPerConn == 0 {
		c.MaxStreamsPerConn = 1024
	}
	if c.SessionRate == 0 {
		c.SessionRate = DefaultSessionRate
	}
	if c.SessionBurst == 0 {
		c.SessionBurst = DefaultSessionBurst
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = newMonoClock()
	}
	return c
}

// monoClock is the wall time at start plus the monotonic time since: it
// never jumps when the wall clock is stepped, which the lease timers, kept
// as Unix nanoseconds, rely on.
type monoClock struct{ start time.Time }

func newMonoClock() monoClock { return monoClock{start: time.Now()} }

func (c monoClock) Now() time.Time { return c.start.Add(time.Since(c.start)).Round(0) }
