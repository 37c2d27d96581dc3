package lb

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

const (
	// xdsManagerNonce is the manager incarnation the shell gives the core:
	// every table it feeds is a snapshot, so one constant serves.
	xdsManagerNonce = 1
	// outQueue bounds the requests waiting for a stream's writer; a manager
	// that lets it fill is not reading, and the stream is dropped.
	outQueue = 64
)

// session is the Lookup's stream goroutine: it owns the Core, the blocks
// held and the current stream, and is the only goroutine that touches them.
// Each stream has a reader goroutine, which posts what arrives as events,
// and a writer goroutine, which sends what the session queues.
type session struct {
	l        *Lookup
	cfg      LookupConfig
	core     *Core
	node     *corev3.Node
	dialOpts []grpc.DialOption
	bits     uint32               // the bit count of the blocks held; 0 before the first
	names    []string             // the namespace's block names at bits, by number
	held     map[string]heldBlock // blocks held, by name, all of bits
	// table is the table last applied, the arcs of the blocks held then
	// in ring order, at the core's LSN (lsn); nil before the first, or
	// when the next must be built whole (as after a step the core did not
	// take). touched are the blocks set or removed since (by number, of
	// bits): the next table is table with those blocks' arcs replaced.
	table   *chunked
	touched map[uint32]struct{}
	lsn     uint64 // local LSN of the snapshots fed to the core
	events  chan streamEvent
	ctx     context.Context
	wg      sync.WaitGroup // reader goroutines

	conn        *conn  // current stream, nil between streams
	nextID      uint64 // id of the last stream started
	addr        string // manager to try next
	idx         int    // index in Managers of the last address tried from the list
	attempt     int    // failed streams since a table was last applied
	redirectRun int    // redirects followed since a table was last applied
	// standbyMissed: a stream to the node the leader's "fuge-standby"
	// trailer named ended before a table was applied, and streams ask the
	// leader to serve them until one is.
	standbyMissed bool
	backoffT      *time.Timer
	backoffC      <-chan time.Time

	timerC    <-chan time.Time // protocol timer (staleness, StreamTimeout)
	timerStop func() bool
	armedAt   time.Time
}

// conn is one stream to one manager.
type conn struct {
	id       uint64
	addr     string
	ctx      context.Context
	cancel   context.CancelFunc
	out      chan *discovery.DeltaDiscoveryRequest // nil asks the writer to half-close
	lastRecv time.Time                             // by the Lookup's clock
	applied  bool                                  // a table was applied from this stream
	synced   bool                                  // the last ArcBlock response was applied: heartbeats count
	closing  bool                                  // half-closed after a NACK; what arrives is ignored
	grace    *time.Timer
	// viaStandby: the leader named this stream's node ("fuge-standby");
	// fallback: the stream asks the leader to serve it (wire.LeaderFallbackKey).
	viaStandby, fallback bool
}

// streamEvent is what a reader posts: a response, or the end of its stream.
type streamEvent struct {
	id     uint64
	resp   *discovery.DeltaDiscoveryResponse
	err    error  // the stream ended (resp is nil)
	leader string // the stream's "fuge-leader" trailer
	// standby is the stream's "fuge-standby" trailer: the leader leaves
	// Lookups to its standbys and names one.
	standby string
}

func newSession(l *Lookup, core *Core) *session {
	cfg := l.cfg
	// Fixed windows, as a ConnPool's: with grpc-go's estimated ones every
	// push after a quiet spell costs a BDP ping that the manager must read
	// and answer, for every Lookup.
	opts := append(dialOptions(cfg.KeepaliveTime, cfg.KeepaliveTimeout, cfg.MaxMessageBytes),
		grpc.WithStaticStreamWindowSize(poolStreamWindow), grpc.WithStaticConnWindowSize(poolStreamWindow))
	first := 0
	if !cfg.InOrder {
		first = rand.IntN(len(cfg.Managers))
	}
	return &session{
		l:        l,
		cfg:      cfg,
		core:     core,
		node:     node(cfg.Namespace, cfg.Name),
		dialOpts: append(opts, cfg.DialOptions...),
		held:     map[string]heldBlock{},
		events:   make(chan streamEvent, 16),
		addr:     cfg.Managers[first],
		idx:      first,
	}
}

func (s *session) now() time.Time { return s.cfg.Clock.Now() }

func (s *session) run(ctx context.Context) {
	s.ctx = ctx
	defer s.shutdown()
	s.core.Start(s.now()) // the core's polls are not sent: the leader pushes
	s.connect(false)
	for {
		s.arm()
		select {
		case <-ctx.Done():
			return
		case ev := <-s.events:
			s.handle(ev)
		case <-s.timerC:
			s.timerC, s.armedAt = nil, time.Time{}
			s.tick()
		case <-s.backoffC:
			s.backoffC = nil
			s.connect(false)
		}
		s.l.setCoreStats(s.core.Stats())
	}
}

func (s *session) shutdown() {
	if s.timerStop != nil {
		s.timerStop()
	}
	if s.backoffT != nil {
		s.backoffT.Stop()
	}
	if c := s.conn; c != nil {
		c.cancel()
		if c.grace != nil {
			c.grace.Stop()
		}
	}
	s.wg.Wait()
}

// connect starts a stream to s.addr and queues the two wildcard
// subscriptions, the ArcBlock one with the versions of the blocks held.
func (s *session) connect(viaStandby bool) {
	s.nextID++
	c := &conn{id: s.nextID, addr: s.addr, out: make(chan *discovery.DeltaDiscoveryRequest, outQueue), lastRecv: s.now(),
		viaStandby: viaStandby, fallback: s.standbyMissed}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	if s.l.attempts.Add(1) > 1 {
		s.l.reconnects.Add(1)
	}
	var versions map[string]string
	for name, h := range s.held {
		if h.version == "" {
			continue // removed by the server: nothing to send back
		}
		if versions == nil {
			versions = make(map[string]string, len(s.held))
		}
		versions[name] = h.version
	}
	c.out <- subscribe(ArcBlockTypeURL, s.node, versions)
	c.out <- subscribe(HeartbeatTypeURL, s.node, nil)
	s.conn = c
	s.l.log.Debug("connecting", "manager", c.addr, "held", len(s.held))
	s.wg.Add(1)
	go s.read(c)
}

// read runs the stream c and posts what arrives, then its end.
func (s *session) read(c *conn) {
	defer s.wg.Done()
	tr, err := s.recv(c)
	select {
	case s.events <- streamEvent{id: c.id, err: err, leader: first(tr, LeaderTrailer), standby: first(tr, StandbyTrailer)}:
	case <-s.ctx.Done():
	}
}

// recv runs the stream c until it ends, and returns its trailer.
func (s *session) recv(c *conn) (trailer metadata.MD, err error) {
	var cc *grpc.ClientConn
	if pool := s.cfg.Conns; pool != nil {
		var release func()
		if cc, release, err = pool.get(c.addr); err != nil {
			return nil, err
		}
		defer release()
	} else {
		if cc, err = grpc.NewClient(c.addr, s.dialOpts...); err != nil {
			return nil, err
		}
		defer cc.Close()
	}
	// Name the stream a Lookup's: the nodes gate those (a standby out of
	// contact names the leader, the leader names a standby).
	ctx := metadata.AppendToOutgoingContext(c.ctx, wire.ClientKindKey, wire.ClientLookup)
	if c.fallback {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.LeaderFallbackKey, "1")
	}
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go write(c, st, done)
	defer func() {
		c.cancel()
		<-done
	}()
	for {
		resp, err := st.Recv()
		if err != nil {
			return st.Trailer(), err
		}
		select {
		case s.events <- streamEvent{id: c.id, resp: resp}:
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		}
	}
}

// first is md's first value for key, or "".
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// write sends what the session queues on c until c ends.
func write(c *conn, st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-c.ctx.Done():
			return
		case req := <-c.out:
			if req == nil {
				_ = st.CloseSend()
			} else if st.Send(req) != nil {
				return // Recv reports the error
			}
		}
	}
}

// send queues req on c; a full queue drops the stream.
func (s *session) send(c *conn, req *discovery.DeltaDiscoveryRequest) {
	select {
	case c.out <- req:
	default:
		s.l.log.Warn("manager is not reading; dropping the stream", "manager", c.addr)
		c.cancel()
	}
}

func (s *session) handle(ev streamEvent) {
	c := s.conn
	if c == nil || ev.id != c.id {
		return // a stream already given up
	}
	if ev.resp == nil {
		s.ended(c, ev)
		return
	}
	c.lastRecv = s.now()
	if c.closing {
		return
	}
	switch ev.resp.GetTypeUrl() {
	case ArcBlockTypeURL:
		s.onBlocks(c, ev.resp)
	case HeartbeatTypeURL:
		s.onHeartbeat(c, ev.resp)
	default:
		s.l.log.Warn("ignoring a response of an unexpected type", "manager", c.addr, "type", ev.resp.GetTypeUrl())
	}
}

// onBlocks applies an ArcBlock response to the blocks held: each block
// sent replaces the arcs of that block, and a block removed is held empty.
// When the table is then complete, it is fed to the core: the blocks
// touched since the last table as changes (applyTouched), or the whole
// table as a snapshot, which the core diffs against its own.
func (s *session) onBlocks(c *conn, resp *discovery.DeltaDiscoveryResponse) {
	u, err := decodeBlocks(s.cfg.Namespace, resp)
	if err != nil {
		// The server now believes we hold what we refused; a new stream,
		// sending the versions we do hold, resynchronizes. Until a table
		// is applied again, heartbeats do not count.
		s.l.nacks.Add(1)
		s.l.log.Warn("NACK; restarting the stream", "manager", c.addr, "nonce", resp.GetNonce(), "err", err)
		c.synced = false
		s.send(c, ack(resp, err))
		c.closing = true
		s.send(c, nil)
		c.grace = time.AfterFunc(DefaultCloseGrace, c.cancel)
		return
	}
	// Blocks of another size than those sent (the manager cut the table
	// anew: a namespace created again with another ring size) are
	// dropped: they cover other parts of the circle.
	resized := u.bits != 0 && s.bits != 0 && u.bits != s.bits
	if u.bits != 0 && u.bits != s.bits {
		maps.DeleteFunc(s.held, func(_ string, h heldBlock) bool { return h.bits != u.bits })
		s.bits, s.names = u.bits, blockNames(s.cfg.Namespace, u.bits)
		s.table = nil
	}
	for _, name := range u.removed {
		s.held[name] = heldBlock{bits: s.bits}
		s.touch(name)
	}
	for name := range u.set {
		s.touch(name)
	}
	maps.Copy(s.held, u.set)
	// The ACK goes out once the response is dealt with, so a manager that
	// sees it knows the table is published and the loss upcall queued
	// (unless the stream is closed first: nothing may follow CloseSend).
	defer func() {
		if !c.closing {
			s.send(c, ack(resp, nil))
		}
	}()

	if lsn, err := strconv.ParseUint(resp.GetSystemVersionInfo(), 10, 64); err == nil {
		s.l.servedLSN.Store(lsn)
	}
	if strings.HasSuffix(resp.GetSystemVersionInfo(), wire.MorePartsSuffix) {
		// A part of a larger answer (a whole table at a large ring
		// size): the rest follows on this stream, and the table is
		// judged, and applied, at the last part, so that it is applied
		// at one version.
		s.l.log.Debug("part of an answer; the rest follows", "manager", c.addr, "blocks", len(u.set))
		return
	}
	if s.table != nil && len(s.touched) <= len(s.names)/incrementalShare {
		if s.applyTouched(c) {
			return
		}
	}
	entries, err := tableOf(s.names, s.held, u.arena)
	if err != nil {
		c.synced = false
		s.l.rejected.Add(1)
		s.l.log.Warn("the table held is not complete; not applied", "manager", c.addr, "err", err)
		if resized {
			// The manager believes we hold blocks of the old size under
			// the new names: a new stream, sending only the versions of
			// the blocks we hold of the new size, receives the others.
			c.closing = true
			s.send(c, nil)
			c.grace = time.AfterFunc(DefaultCloseGrace, c.cancel)
		}
		return
	}
	s.lsn++
	snapshots := s.core.Stats().Snapshots
	out := s.core.Step(lease.LookupResponse{
		Namespace: s.cfg.Namespace, ManagerNonce: xdsManagerNonce, Snapshot: true, LSN: s.lsn, Entries: entries,
	}, s.now())
	var t *chunked
	if s.core.Stats().Snapshots == snapshots {
		// Not taken (older than the core's table): the core's stands.
		s.table = nil
		t = chunkedOf(s.core.Entries(), chunkSize)
	} else {
		t = chunkedOf(entries, chunkSize)
		s.table, s.touched = t, nil
	}
	s.applied(c, t, out)
}

// incrementalShare: a response that touches at most 1/incrementalShare of
// the blocks is applied as changes to the table (applyTouched); more, and
// the table is built whole.
const incrementalShare = 4

// touch records that the block named name was set or removed.
func (s *session) touch(name string) {
	b, ok := blockIndex(s.cfg.Namespace, name)
	if !ok || b >= uint32(len(s.names)) {
		s.table = nil
		return
	}
	if s.touched == nil {
		s.touched = map[uint32]struct{}{}
	}
	s.touched[b] = struct{}{}
}

// applyTouched applies the blocks touched since the last table as changes:
// the core updates the arcs they hold, and signals loss, at a cost that
// grows with what changed, where a whole table (65,536 arcs at the
// largest ring) was rebuilt, sorted and compared for every push. It
// reports false, changing nothing, when the arcs around a touched block no
// longer follow each other (the table is then built whole, which says
// why).
func (s *session) applyTouched(c *conn) bool {
	blocks := slices.Sorted(maps.Keys(s.touched))
	t, changes, err := spliceBlocks(s.table, s.bits, blocks, func(b uint32) []lease.Entry { return s.held[s.names[b]].entries })
	if err != nil {
		s.table = nil
		return false
	}
	for i := range changes {
		changes[i].LSN = s.lsn + 1
	}
	applied := s.core.Stats().Applied
	out := s.core.Step(lease.LookupResponse{
		Namespace: s.cfg.Namespace, ManagerNonce: xdsManagerNonce, FromLSN: s.lsn, LSN: s.lsn + 1, Changes: changes,
	}, s.now())
	if s.core.Stats().Applied == applied {
		s.table = nil
		return false
	}
	s.lsn++
	s.table, s.touched = t, nil
	s.applied(c, t, out)
	return true
}

// applied publishes the table the core took from entries and delivers its
// loss upcall.
func (s *session) applied(c *conn, t *chunked, out Output) {
	c.synced, c.applied = true, true
	s.attempt, s.redirectRun, s.standbyMissed = 0, 0, false
	// The table the core holds is t with adjacent arcs of equal owner,
	// address and generation merged: when none were (as from a manager,
	// whose views are merged already), t is it, and readers get t itself,
	// sharing the chunks a push did not reach with the table before.
	if t.n < 2 || s.core.Len() != t.n {
		t = chunkedOf(s.core.Entries(), chunkSize)
	}
	s.l.publish(t, s.core.Stats())
	s.deliver(out)
}

// onHeartbeat acknowledges a heartbeat and, on a stream whose table is up
// to date, tells the core the manager was heard: an empty change response
// continuing from our LSN refreshes its staleness clock.
func (s *session) onHeartbeat(c *conn, resp *discovery.DeltaDiscoveryResponse) {
	if err := checkHeartbeats(s.cfg.Namespace, resp); err != nil {
		s.l.nacks.Add(1)
		s.l.log.Warn("NACK", "manager", c.addr, "nonce", resp.GetNonce(), "err", err)
		s.send(c, ack(resp, err))
		return
	}
	defer s.send(c, ack(resp, nil))
	if !c.synced {
		return
	}
	s.core.Step(lease.LookupResponse{
		Namespace: s.cfg.Namespace, ManagerNonce: xdsManagerNonce, FromLSN: s.lsn, LSN: s.lsn,
	}, s.now())
	s.l.heartbeats.Add(1)
}

// ended handles the end of the current stream: follow a standby's leader
// trailer or the leader's standby trailer, retry the manager that served
// us, or try the next one.
func (s *session) ended(c *conn, ev streamEvent) {
	s.conn = nil
	c.cancel()
	if c.grace != nil {
		c.grace.Stop()
	}
	if c.viaStandby && !c.applied {
		// The standby the leader named did not serve us (unreachable, or
		// out of contact and naming the leader back): until a table is
		// applied, ask the leader to serve us (wire.LeaderFallbackKey).
		s.standbyMissed = true
	}
	switch {
	case status.Code(ev.err) == codes.FailedPrecondition && ev.leader != "":
		s.l.log.Info("following the leader", "standby", c.addr, "leader", ev.leader)
		if !s.redirect(ev.leader, false) {
			s.retry(c, ev.leader, ev.err)
		}
	case status.Code(ev.err) == codes.Unavailable && ev.standby != "":
		s.l.log.Info("going to a standby", "leader", c.addr, "standby", ev.standby)
		if !s.redirect(ev.standby, true) {
			s.retry(c, "", ev.err) // back and forth: pace it, from the list
		}
	case c.applied:
		s.retry(c, c.addr, ev.err)
	default:
		s.retry(c, "", ev.err)
	}
}

// redirect connects at once to the node a trailer named (a standby the
// leader named: viaStandby), unless as many redirects as there are
// managers were followed since a table was last applied (nodes sending the
// Lookup back and forth): then it returns false and the caller paces the
// next attempt.
func (s *session) redirect(to string, viaStandby bool) bool {
	s.l.redirects.Add(1)
	s.redirectRun++
	if s.redirectRun > len(s.cfg.Managers) {
		return false
	}
	s.addr = to
	s.connect(viaStandby)
	return true
}

// retry schedules the next stream after a backoff, to next or, when next
// is empty, to the next manager in the list.
func (s *session) retry(c *conn, next string, err error) {
	if next == "" {
		s.idx = (s.idx + 1) % len(s.cfg.Managers)
		next = s.cfg.Managers[s.idx]
	}
	s.addr = next
	d := s.cfg.Backoff.Delay(s.attempt, rand.Float64())
	s.attempt++
	s.l.log.Info("stream ended", "manager", c.addr, "err", err, "next", next, "backoff", d)
	s.backoffT = time.NewTimer(d)
	s.backoffC = s.backoffT.C
}

// tick runs the core's timer (the staleness bound) and abandons a stream
// on which nothing arrived for StreamTimeout.
func (s *session) tick() {
	now := s.now()
	s.deliver(s.core.Tick(now))
	c := s.conn
	if c == nil || c.closing || s.cfg.StreamTimeout <= 0 || now.Before(c.lastRecv.Add(s.cfg.StreamTimeout)) {
		return
	}
	s.l.stalls.Add(1)
	s.conn = nil
	c.cancel()
	s.retry(c, "", fmt.Errorf("nothing received for %v", s.cfg.StreamTimeout))
}

func (s *session) deliver(out Output) {
	if len(out.Loss) == 0 {
		return
	}
	s.l.log.Info("loss", "ranges", len(out.Loss), "all", out.LossAll)
	s.l.notify(out.Loss, out.LossAll)
}

// arm sets the protocol timer for the earlier of the core's deadline and
// the current stream's StreamTimeout.
func (s *session) arm() {
	d := s.core.NextDeadline()
	if c := s.conn; c != nil && !c.closing && s.cfg.StreamTimeout > 0 {
		if sd := c.lastRecv.Add(s.cfg.StreamTimeout); d.IsZero() || sd.Before(d) {
			d = sd
		}
	}
	if s.timerC != nil && d.Equal(s.armedAt) {
		return
	}
	if s.timerStop != nil {
		s.timerStop()
	}
	s.timerC, s.timerStop, s.armedAt = nil, nil, d
	if d.IsZero() {
		return
	}
	wait := d.Sub(s.now())
	if tc, ok := s.cfg.Clock.(TimerClock); ok {
		s.timerC, s.timerStop = tc.NewTimer(wait)
		return
	}
	t := time.NewTimer(wait)
	s.timerC, s.timerStop = t.C, t.Stop
}
