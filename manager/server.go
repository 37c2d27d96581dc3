package manager

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
)

// LeaderTrailer is the gRPC trailer in which a standby names the leader.
const LeaderTrailer = "fuge-leader"

// raftLogCache is how many of the latest raft entries a node keeps in
// memory (raft.NewLogCache): the ones followers are sent next. Few: an
// entry of a join storm holds thousands of changes.
const raftLogCache = 32

// serverStreamWindow and serverConnWindow are the gRPC server's fixed
// flow-control windows (see Start): a stream's and a connection's credit
// for what clients send. A stream's is grpc-go's initial window, which its
// estimate would only have grown.
const (
	serverStreamWindow = 64 << 10
	serverConnWindow   = 1 << 20
)

// Server is one manager node: raft-replicated state, the lease core on the
// leader, the owner protocol over gRPC and the admin API over HTTP.
type Server struct {
	cfg     ServerConfig
	log     *slog.Logger
	fsm     *fsm
	raft    *raft.Raft
	trans   *raft.NetworkTransport
	store   *raftboltdb.BoltStore
	grpc    *grpc.Server
	http    *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener
	metrics *metrics
	events  *eventHub // the event log and its subscribers (events.go)

	heartbeatTimeout time.Duration // raft's: after it, a standby stops naming the leader
	sessions         *sessionLimiter
	proxies          *proxyHub   // ProxyService (proxysvc.go); guarded by mu
	peers            peerContact // the standbys in contact, on the leader (standby.go)

	mu     sync.Mutex
	leader *leaderState // non-nil while this node leads
	// leaderSet is closed, and replaced, whenever leader is set or
	// cleared (under mu): what a wait for leadership waits on.
	leaderSet chan struct{}
	wg        sync.WaitGroup
	stop      chan struct{}
	once      sync.Once
	nudge     chan struct{} // to runNudges; one pending at most
}

// NewServer validates the configuration; Start brings the node up.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), leaderSet: make(chan struct{}), nudge: make(chan struct{}, 1), sessions: newSessionLimiter(cfg.SessionRate, cfg.SessionBurst),
		peers: peerContact{ok: map[raft.ServerID]bool{}}}
	s.fsm = newFSM(cfg.LogRetention, cfg.LeaseDuration, cfg.Observer)
	s.events = newEventHub(cfg.Clock, defaultEventBacklog, defaultMaxSubscribers)
	s.fsm.events = s.events
	s.metrics = newMetrics(s)
	s.metrics.reg.MustRegister(&dashCollector{s: s}) // raft state, holdings, event streams: dashmetrics.go
	s.fsm.onApply = s.metrics.applied
	return s, nil
}

// Start opens the data directory and raft, binds the three listeners, joins
// or bootstraps the cluster, and returns once the node serves. register, if
// not nil, adds services (the xds package's) to the node's gRPC server.
func (s *Server) Start(register func(*grpc.Server)) (err error) {
	defer func() {
		if err != nil {
			s.closeAll()
		}
	}()
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("manager: data dir: %w", err)
	}
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("manager: grpc listener: %w", err)
	}
	if s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("manager: http listener: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Output: os.Stderr, Level: hclog.Warn})
	if s.cfg.Logger.Handler() == slog.DiscardHandler {
		hlog = hclog.NewNullLogger()
	}
	var adv net.Addr
	if a := s.cfg.AdvertiseRaftAddr; a != "" {
		if adv, err = net.ResolveTCPAddr("tcp", a); err != nil {
			return fmt.Errorf("manager: raft advertise address: %w", err)
		}
	}
	if s.trans, err = s.raftTransport(adv, hlog); err != nil {
		return fmt.Errorf("manager: raft transport: %w", err)
	}
	if s.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(s.cfg.DataDir, "raft.db")}); err != nil {
		return fmt.Errorf("manager: raft store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("manager: snapshots: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.cfg.NodeID)
	rc.Logger = hlog
	if s.cfg.RaftHeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = s.cfg.RaftHeartbeatTimeout
	}
	if s.cfg.RaftElectionTimeout > 0 {
		rc.ElectionTimeout = s.cfg.RaftElectionTimeout
	}
	if s.cfg.RaftLeaderLeaseTimeout > 0 {
		rc.LeaderLeaseTimeout = s.cfg.RaftLeaderLeaseTimeout
	}
	if s.cfg.RaftCommitTimeout > 0 {
		rc.CommitTimeout = s.cfg.RaftCommitTimeout
	}
	s.heartbeatTimeout = rc.HeartbeatTimeout
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("%w: raft: %w", ErrConfig, err)
	}
	existing, err := raft.HasExistingState(s.store, s.store, snaps)
	if err != nil {
		return fmt.Errorf("manager: raft state: %w", err)
	}
	// The last entries in memory: the leader reads the entry before each
	// follower's next one for every AppendEntries, and while nothing is
	// committed it sends one every CommitTimeout to each follower, which
	// read and decoded that entry from bolt (4% of an idle leader's CPU
	// at make bench-manager SCALE=10).
	logs, err := raft.NewLogCache(raftLogCache, s.store)
	if err != nil {
		return fmt.Errorf("manager: raft log cache: %w", err)
	}
	if s.raft, err = raft.NewRaft(rc, s.fsm, logs, s.store, snaps, s.trans); err != nil {
		return fmt.Errorf("manager: raft: %w", err)
	}
	peers := s.observePeers()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); peers() }()
	if !existing && s.cfg.Join == "" {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: s.trans.LocalAddr()}}}
		if err := s.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("manager: bootstrap: %w", err)
		}
	}
	s.grpc = grpc.NewServer(append(append(s.grpcOptions(), s.cfg.GRPCOptions...),
		grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.cfg.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(s.cfg.MaxStreamsPerConn)),
		// Thousands of client connections: keep per-connection buffers
		// small, or they dominate the manager's memory. Reads: 64 KiB each
		// by default. Writes: a shared buffer is taken from a pool for each
		// flush, but when a heartbeat or a table change goes to every
		// lookup at once most connections hold one (32 KiB by default);
		// larger messages bypass the buffer.
		grpc.ReadBufferSize(8<<10),
		grpc.WriteBufferSize(8<<10),
		// Fixed flow-control windows. With grpc-go's default (a window
		// grown by its bandwidth estimate), the first data frame after a
		// quiet spell on a connection makes the server write a window
		// update and a BDP ping, and read the ping's ack: an owner's
		// renewal every T/4 or a Lookup's acknowledgement is such a frame,
		// so most messages cost the manager two syscalls more than the
		// message itself. Clients send small messages (requests,
		// acknowledgements); a stream's window bounds what one can make the
		// manager buffer unread, 64 KiB where the estimate allowed 16 MiB.
		grpc.StaticStreamWindowSize(serverStreamWindow),
		grpc.StaticConnWindowSize(serverConnWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		// Clients ping the manager (and a dead owner's session expires after
		// its hold time anyway): the server's own pings only reclaim
		// connections of clients that vanished, so they can be rare.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}),
	)...)
	fugev1.RegisterOwnerServiceServer(s.grpc, &ownerService{s: s})
	fugev1.RegisterProxyServiceServer(s.grpc, s.startProxyService())
	if register != nil {
		register(s.grpc)
	}
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second,
		// TLS handshake failures (a client without TLS, a scanner) are
		// not the operator's errors.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	if s.cfg.TLS != nil {
		s.httpLn = tls.NewListener(s.httpLn, s.cfg.TLS.ServerConfig(true))
	}
	s.wg.Add(4)
	go func() { defer s.wg.Done(); _ = s.grpc.Serve(s.grpcLn) }()
	go func() { defer s.wg.Done(); _ = s.http.Serve(s.httpLn) }()
	go func() { defer s.wg.Done(); s.watchLeadership() }()
	go func() { defer s.wg.Done(); s.runNudges() }()
	if s.cfg.Join != "" && !existing {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.joinLoop() }()
	}
	s.log.Info("manager node started", "id", s.cfg.NodeID, "raft", s.trans.LocalAddr(), "grpc", s.grpcLn.Addr(), "http", s.httpLn.Addr())
	return nil
}

// Stop stops the node. A leader first hands leadership to another voter,
// so a clean stop costs the cluster no election timeout.
func (s *Server) Stop(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		if s.raft != nil && s.raft.State() == raft.Leader && s.Voters() > 1 {
			if e := s.raft.LeadershipTransfer().Error(); e != nil {
				s.log.Warn("leadership transfer", "err", e)
			}
		}
		close(s.stop)
		s.stepDown()
		if s.raft != nil {
			err = s.raft.Shutdown().Error()
		}
		s.closeAll()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	})
	return err
}

// Kill stops the node at once, as a crash would: no leadership transfer,
// no goodbye to clients. Failover tests use it; a person uses Stop.
func (s *Server) Kill() {
	s.once.Do(func() {
		close(s.stop)
		if s.raft != nil {
			// No leadership transfer; waiting for raft's goroutines to end
			// only keeps them off the closed store.
			_ = s.raft.Shutdown().Error()
		}
		s.closeAll()
		s.stepDown()
	})
}

func (s *Server) closeAll() {
	if s.grpc != nil {
		s.grpc.Stop()
	} else if s.grpcLn != nil {
		s.grpcLn.Close()
	}
	if s.http != nil {
		s.http.Close()
	} else if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.trans != nil {
		s.trans.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
}

// Voters is the number of voters in this node's latest raft
// configuration, committed or not: a node that lists the others can take
// part in electing a leader without the current one.
func (s *Server) Voters() int {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// Addrs are the bound addresses (useful with port 0).
func (s *Server) Addrs() (raftAddr, grpcAddr, httpAddr string) {
	if s.trans != nil {
		raftAddr = string(s.trans.LocalAddr())
	}
	if s.grpcLn != nil {
		grpcAddr = s.grpcLn.Addr().String()
	}
	if s.httpLn != nil {
		httpAddr = s.httpLn.Addr().String()
	}
	return
}

// IsLeader reports whether this node leads and runs the lease core.
func (s *Server) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader != nil
}

// leadership reports whether this node leads, and a channel closed when
// that next changes.
func (s *Server) leadership() (leading bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader != nil, s.leaderSet
}

// leadershipChanged wakes the waits on leaderSet. s.mu is held.
func (s *Server) leadershipChanged() {
	close(s.leaderSet)
	s.leaderSet = make(chan struct{})
}

// Leader returns the leader's node ID and its gRPC and HTTP addresses, or
// empty strings while there is none.
func (s *Server) Leader() (id, grpcAddr, httpAddr string) {
	if s.raft == nil {
		return "", "", ""
	}
	_, lid := s.raft.LeaderWithID()
	if lid == "" {
		return "", "", ""
	}
	// A standby that has not heard from the leader within the heartbeat
	// timeout names nobody, so clients try the other nodes instead of
	// bouncing off a leader that is gone.
	if string(lid) != s.cfg.NodeID && time.Since(s.raft.LastContact()) > s.heartbeatTimeout {
		return "", "", ""
	}
	n, _ := s.fsm.node(string(lid))
	return string(lid), n.GRPCAddr, n.HTTPAddr
}

// CheckLeader returns nil on the leader. Elsewhere it sets the "fuge-leader"
// trailer on the gRPC stream in ctx to the leader's gRPC address and returns
// a FAILED_PRECONDITION status. Lookup streams (xds) call it too.
func (s *Server) CheckLeader(ctx context.Context) error {
	if s.IsLeader() {
		return nil
	}
	_, addr, _ := s.Leader()
	_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, addr))
	return status.Errorf(codes.FailedPrecondition, "%v; leader: %q", ErrNotLeader, addr)
}

// watchLeadership starts and stops the lease core as leadership comes and
// goes.
func (s *Server) watchLeadership() {
	for {
		select {
		case <-s.stop:
			return
		case isLeader := <-s.raft.LeaderCh():
			if isLeader {
				if err := s.becomeLeader(); err != nil {
					s.log.Warn("taking over as leader failed", "err", err)
				}
			} else {
				s.stepDown()
			}
		}
	}
}

// becomeLeader waits until every committed entry is applied, registers
// this node's addresses, creates the configured namespaces, and restores the
// lease core from the replicated state, every lease renewed as of now.
func (s *Server) becomeLeader() error {
	if err := s.raft.Barrier(10 * time.Second).Error(); err != nil {
		return err
	}
	_, g, h := s.advertised()
	me := NodeInfo{ID: s.cfg.NodeID, GRPCAddr: g, HTTPAddr: h}
	if n, ok := s.fsm.node(me.ID); !ok || n != me {
		if err := s.apply(command{Op: "node", Node: &me}); err != nil {
			return err
		}
	}
	for _, nc := range s.cfg.Namespaces {
		if !s.fsm.hasNamespace(nc.Name) {
			nc := nc
			if err := s.apply(command{Op: "create", Namespace: &nc}); err != nil && !errors.Is(err, ErrNamespaceExists) {
				return err
			}
		}
	}
	now := s.cfg.Clock.Now()
	core, err := Restore(s.coreConfig(), s.fsm.states(), now)
	if err != nil {
		return err
	}
	if beforeLeading != nil {
		beforeLeading(s)
	}
	l := newLeaderState(s, core)
	// Stop may have come while this node was taking over (the barrier and
	// the restore take seconds with thousands of owners): it stepped down
	// before there was a leader loop to stop, so one started now would run
	// on, and Stop would wait for it until its deadline (the last node of
	// a 3-node cluster at ten times PRS's scale exited with "stop failed"
	// after 10 s). Under s.mu, which stepDown takes after s.stop is
	// closed, either Stop sees the loop and stops it, or no loop starts.
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		return fmt.Errorf("%w: the node is stopping", ErrNotLeader)
	default:
	}
	s.leader = l
	s.leadershipChanged()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); l.run() }()
	s.mu.Unlock()
	s.metrics.leaderChanges.Inc()
	s.log.Info("leading", "id", s.cfg.NodeID, "term", s.raft.CurrentTerm())
	return nil
}

// beforeLeading, when set (by tests), runs in becomeLeader just before the
// leader loop starts.
var beforeLeading func(*Server)

func (s *Server) coreConfig() Config {
	c := DefaultConfig()
	c.Nonce = rand.Uint64() | 1
	c.LeaseDuration = s.cfg.LeaseDuration
	c.LogRetention = s.cfg.LogRetention
	c.RaceBackoffMin, c.RaceBackoffMax = s.cfg.LeaseDuration/600, s.cfg.LeaseDuration/60
	c.UnsafeReplace = s.cfg.UnsafeReplace
	c.UnsafeNoBounds = s.cfg.UnsafeNoInputChecks
	return c
}

func (s *Server) stepDown() {
	s.mu.Lock()
	l := s.leader
	s.leader = nil
	s.leadershipChanged()
	s.mu.Unlock()
	if l != nil {
		l.stop()
		s.log.Info("stepped down", "id", s.cfg.NodeID)
	}
}

// apply commits a command and returns the FSM's verdict.
func (s *Server) apply(c command) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	start := time.Now()
	f := s.raft.Apply(b, 10*time.Second)
	if err = s.await(f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		return err
	}
	s.metrics.commitLatency.Observe(time.Since(start).Seconds())
	s.nudgeFollowers()
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// await waits for a raft future's answer, or until the node stops.
// raft answers an applied entry's future (a command's, a barrier's) from
// its FSM goroutine, which ends at Shutdown without answering what it had
// not applied yet: the future's Error would then wait for ever, and the
// leader loop with it (a test's Kill hung 6m30s on that, 1 run in 8 of the
// ownerguard package). So the wait also ends when the node stops.
func (s *Server) await(f raft.Future) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		return err
	case <-s.stop:
		return fmt.Errorf("%w: the node is stopping", ErrNotLeader)
	}
}

// advertised returns the addresses other members and clients are told:
// the Advertise*Addr settings, else the bound ones.
func (s *Server) advertised() (raftAddr, grpcAddr, httpAddr string) {
	raftAddr, grpcAddr, httpAddr = s.Addrs() // raft's LocalAddr is already its advertised one
	if s.cfg.AdvertiseGRPCAddr != "" {
		grpcAddr = s.cfg.AdvertiseGRPCAddr
	}
	if s.cfg.AdvertiseHTTPAddr != "" {
		httpAddr = s.cfg.AdvertiseHTTPAddr
	}
	return
}

// joinLoop asks a running member to add this node as a voter, retrying
// until it is in.
func (s *Server) joinLoop() {
	r, g, h := s.advertised()
	body, _ := json.Marshal(joinRequest{ID: s.cfg.NodeID, RaftAddr: r, GRPCAddr: g, HTTPAddr: h})
	backoff := 100 * time.Millisecond
	for {
		err := s.postJSON(s.cfg.Join, "/v1/cluster/join", body, s.cfg.AdminToken)
		if err == nil {
			s.log.Info("joined", "via", s.cfg.Join)
			return
		}
		s.log.Warn("join", "via", s.cfg.Join, "err", err)
		select {
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// nudgeFollowers has runNudges append a barrier: the leader has just
// committed an entry, and its followers apply it only when they learn the
// commit index, which raft sends with the next AppendEntries. With nothing
// more to append, that is the next CommitTimeout tick, 50 to 100 ms away
// by default: a standby's Lookups and xDS clients saw the last commit of a
// change (an owner's return, the grant that ends a move) that much later
// than the leader's (measured at ten times PRS's scale: 75-125 ms from
// the grant to the first lookup of a standby, 25-50 ms with the barrier).
// A barrier is an entry of raft's own, which no FSM sees: appending one
// sends every follower an AppendEntries with the new commit index at once.
// A shorter CommitTimeout would do it too, but on every tick of an idle
// cluster (5 ms took an idle leader from 2.5% to 9% of a core); a barrier
// costs one small entry per commit, and none while nothing commits.
func (s *Server) nudgeFollowers() {
	if skipNudges.Load() {
		return
	}
	select {
	case s.nudge <- struct{}{}:
	default: // one is pending: it will carry this commit too
	}
}

// skipNudges switches nudgeFollowers off: only for the negative control of
// its test.
var skipNudges atomic.Bool

// runNudges appends a barrier for each nudge, one at a time: commits made
// while one is in flight share the next. A node alone in its cluster
// appends none. It runs until the node stops.
func (s *Server) runNudges() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.nudge:
		}
		if s.raft.State() != raft.Leader || s.alone() {
			continue
		}
		if s.await(s.raft.Barrier(10*time.Second)) == nil {
			s.metrics.nudges.Inc()
		}
	}
}

// alone reports whether this node is the only server in raft's latest
// configuration: it has no follower to nudge.
func (s *Server) alone() bool {
	f := s.raft.GetConfiguration()
	return f.Error() != nil || len(f.Configuration().Servers) <= 1
}
