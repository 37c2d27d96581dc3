package ownerguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// LeaderTrailer is the trailer in which a standby names the leader's gRPC
// address when it refuses a stream with FAILED_PRECONDITION.
const LeaderTrailer = "fuge-leader"

// maxQuickRedirects bounds the redirects followed at once, without backoff,
// since a manager last accepted the session; it stops two confused standbys
// from bouncing the Owner between them in a tight loop.
const maxQuickRedirects = 3

// errStalled ends a stream that answered nothing for ResponseTimeout.
var errStalled = errors.New("ownerguard: no response within the response timeout")

// session is the state of the session goroutine: the only goroutine that
// touches the Core. It multiplexes the current stream's events, one timer
// (the core's next deadline, the reconnect time, the response timeout) and
// the context.
type session struct {
	o       *Owner
	cfg     OwnerConfig
	core    *Core
	events  chan event
	base    context.Context // parent of the streams' contexts: not canceled with the session
	conns   map[string]*grpc.ClientConn
	streams sync.WaitGroup // every stream goroutine started

	cur       *stream   // the open stream, or nil while waiting to reconnect
	open      bool      // a response on cur has been accepted
	waitSince time.Time // first request on cur since its last response; zero if none
	next      string    // the address to try next
	retryAt   time.Time // when to try it (cur == nil)
	failures  int       // failed attempts since the last accepted session
	quick     int       // redirects followed at once since then
}

func newSession(o *Owner, core *Core) *session {
	return &session{
		o:      o,
		cfg:    o.cfg,
		core:   core,
		events: make(chan event),
		conns:  map[string]*grpc.ClientConn{},
		next:   o.cfg.Managers[0],
	}
}

func (s *session) now() time.Time { return s.o.clock.Now() }

// run drives the session until ctx is done.
func (s *session) run(ctx context.Context) {
	s.base = context.WithoutCancel(ctx)
	defer s.shutdown()
	s.connect(s.now())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		timer.Reset(max(s.deadline().Sub(s.now()), 0))
		select {
		case <-ctx.Done():
			return
		case e := <-s.events:
			s.handle(e)
		case r := <-s.migDone():
			s.imported(r)
		case <-timer.C:
			s.onTimer()
		}
	}
}

// deadline is when the timer must next fire.
func (s *session) deadline() time.Time {
	d := s.core.NextDeadline() // zero before the core has started
	earlier := func(t time.Time) {
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	if s.cur == nil {
		earlier(s.retryAt)
	} else if !s.waitSince.IsZero() && s.cfg.ResponseTimeout > 0 {
		earlier(s.waitSince.Add(s.cfg.ResponseTimeout))
	}
	if t := s.expireOffers(); !t.IsZero() {
		earlier(t)
	}
	if d.IsZero() {
		d = s.now().Add(time.Hour) // nothing to do: wait for an event
	}
	return d
}

func (s *session) onTimer() {
	now := s.now()
	if s.cur != nil && !s.waitSince.IsZero() && s.cfg.ResponseTimeout > 0 &&
		!now.Before(s.waitSince.Add(s.cfg.ResponseTimeout)) {
		s.o.stalls.Add(1)
		s.failed(errStalled, "")
	}
	if s.cur == nil && !now.Before(s.retryAt) {
		s.connect(now)
		return
	}
	s.apply(s.core.Tick(now), now)
}

// apply sends what the core asked to send and publishes its state.
func (s *session) apply(out Output, now time.Time) {
	// Publish first: a recalled range must fail the checks before the
	// request releasing it leaves (the manager may regrant it at once),
	// and before it is offered for export.
	s.o.publish(s.core.View(), out.Granted, out.Revoked, s.core.Stats())
	s.migrate(out)
	if out.Send != nil {
		if s.cur != nil {
			s.cur.send(s.request(s.cur, *out.Send))
			if s.waitSince.IsZero() {
				s.waitSince = now
			}
		} else {
			s.o.unsent.Add(1) // lost, like a dropped message
		}
	}
}

// request converts a core's request to the wire, for st: packed if its
// manager reads packed leases.
func (s *session) request(st *stream, r lease.LeaseRequest) *fugev1.LeaseRequest {
	if !r.Leaving {
		r.Load = s.o.loadReport(s.now())
	}
	req := wire.Request(r, st.packed.Load())
	req.LeaseDurationMs = s.cfg.LeaseDuration.Milliseconds() // the manager checks it matches
	return req
}

// connect starts a stream to s.next and sends the core's next request on it:
// the session's first, or a fresh one that reopens it there.
func (s *session) connect(now time.Time) {
	addr := s.next
	conn, err := s.conn(addr)
	if err != nil {
		// Only a malformed target fails here; treat it like a refusal.
		s.o.log.Error("ownerguard: cannot dial manager", "manager", addr, "err", err)
		s.o.setErr(fmt.Errorf("%w: %w", ErrRejected, err))
		s.backoff(now, addr)
		return
	}
	if s.o.attempts.Add(1) > 1 {
		s.o.reconnects.Add(1)
	}
	s.cur = newStream(s.base, addr)
	s.open, s.waitSince = false, time.Time{}
	s.streams.Add(1)
	go func(st *stream) {
		defer s.streams.Done()
		st.run(conn, s.events, s.o, grpc.MaxCallRecvMsgSize(s.cfg.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(s.cfg.MaxMessageBytes))
	}(s.cur)
	var out Output
	if s.core.started {
		out = s.core.Resend(now)
	} else {
		out = s.core.Start(now)
	}
	s.apply(out, now)
}

// sessionWindow is a manager connection's fixed flow-control window, its
// stream's and its own (one stream at a time).
const sessionWindow = 1 << 20

// conn returns the client connection to addr, creating it on first use.
func (s *session) conn(addr string) (*grpc.ClientConn, error) {
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Fixed flow-control windows: with grpc-go's estimated ones, the
		// first response after a quiet spell (each renewal's, every T/4)
		// makes the client send a window update and a BDP ping, which the
		// manager must read and answer, for every owner. A response is at
		// most MaxMessageBytes; 1 MiB of credit keeps the largest to a few
		// window updates.
		grpc.WithStaticStreamWindowSize(sessionWindow),
		grpc.WithStaticConnWindowSize(sessionWindow),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                s.cfg.KeepaliveTime,
			Timeout:             s.cfg.KeepaliveTimeout,
			PermitWithoutStream: false,
		}),
		// gRPC's own reconnect backoff (1 s base by default) would keep a
		// manager that just came back unreachable for longer than ours;
		// it scales with T like every other duration.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  s.cfg.Backoff.Base,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   s.cfg.Backoff.Max,
			},
			MinConnectTimeout: min(20*time.Second, max(s.cfg.LeaseDuration/4, 100*time.Millisecond)),
		}),
	}
	opts = append(opts, s.cfg.DialOptions...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	s.conns[addr] = c
	return c, nil
}

// handle takes one event of a stream.
func (s *session) handle(e event) {
	if e.s != s.cur {
		return // from a stream already abandoned
	}
	if e.resp == nil {
		s.failed(e.err, e.leader)
		return
	}
	now := s.now()
	s.waitSince = time.Time{}
	resp, err := wire.ResponseFrom(e.resp)
	if err != nil {
		s.o.malformed.Add(1)
		s.o.log.Warn("ownerguard: dropping malformed response", "manager", s.cur.addr, "err", err)
		return
	}
	if resp.Namespace == s.cfg.Namespace && resp.Owner == s.cfg.Name {
		s.o.setRoutingHeader(resp.RoutingHeader)
	}
	before := s.core.Stats().Accepted
	out := s.core.Step(resp, now)
	s.apply(out, now)
	if !s.open && s.core.Stats().Accepted > before {
		s.open = true
		s.failures, s.quick = 0, 0
		s.o.log.Info("ownerguard: session open", "manager", s.cur.addr)
		s.o.accepted()
	}
}

// failed abandons the current stream and schedules the next attempt.
func (s *session) failed(err error, leader string) {
	addr := s.cur.addr
	s.cur.cancel()
	s.cur, s.open, s.waitSince = nil, false, time.Time{}
	now := s.now()
	code := status.Code(err)
	switch {
	case code == codes.FailedPrecondition && leader != "":
		s.o.redirects.Add(1)
		s.o.log.Info("ownerguard: following the leader", "from", addr, "leader", leader)
		s.next = leader
		if s.quick < maxQuickRedirects {
			s.quick++
			s.retryAt = now
		} else {
			s.retryAt = now.Add(s.delay())
		}
		return
	case permanent(code):
		perr := classify(code, err)
		s.o.log.Error("ownerguard: manager refused the session", "manager", addr, "err", perr)
		s.o.setErr(perr)
	case s.failures == 0:
		s.o.log.Info("ownerguard: stream to manager ended", "manager", addr, "err", err)
	default:
		s.o.log.Debug("ownerguard: stream to manager ended", "manager", addr, "err", err)
	}
	s.backoff(now, addr)
}

// backoff schedules the next attempt at the manager after addr.
func (s *session) backoff(now time.Time, addr string) {
	ms := s.cfg.Managers
	i := slices.Index(ms, addr) // -1 for an address learned from a trailer
	s.next = ms[(i+1)%len(ms)]
	s.retryAt = now.Add(s.delay())
}

func (s *session) delay() time.Duration {
	d := s.cfg.Backoff.Delay(s.failures, rand.Float64())
	s.failures++
	return d
}

// permanent reports whether a code means the manager refuses this session
// for as long as nothing changes (Err reports it; the Owner still retries).
func permanent(c codes.Code) bool {
	switch c {
	case codes.NotFound, codes.AlreadyExists, codes.InvalidArgument,
		codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return false
}

func classify(c codes.Code, err error) error {
	switch c {
	case codes.NotFound:
		return fmt.Errorf("%w: %w", ErrUnknownNamespace, err)
	case codes.AlreadyExists:
		// The manager says which: its message names an address in use
		// (manager.ErrAddressInUse) or the owner name.
		if strings.Contains(status.Convert(err).Message(), "address in use") {
			return fmt.Errorf("%w: %w", ErrAddressInUse, err)
		}
		return fmt.Errorf("%w: %w", ErrOwnerInUse, err)
	}
	return fmt.Errorf("%w: %w", ErrRejected, err)
}

// shutdown ends the incarnation with a clean leave (Core.Leave): nothing is
// held from now on and the upcall hears it; then the leaving request goes to
// the manager, and the stream is half-closed after it so that the manager
// sees a clean end (io.EOF) rather than a cancellation. It waits at most
// CloseTimeout in all.
func (s *session) shutdown() {
	// Stop believing before telling the manager: the manager regrants what
	// was held here as soon as it accepts the leaving request, so the empty
	// view must be in place, for every check, before that request is handed
	// to the stream. Nothing the Core does from here on is published.
	// With migration, first hand every range over with its state, while
	// the checks still serve what is not yet recalled.
	if !s.o.abandon.Load() {
		s.handover()
	}
	defer s.stopMigration()
	s.o.publish(emptyView(), nil, s.core.View().heldRanges(), s.core.Stats())
	if s.o.abandon.Load() { // Abandon: end as a crash would, telling no one
		if s.cur != nil {
			s.cur.cancel()
		}
		s.streams.Wait()
		s.closeConns()
		s.o.log.Info("ownerguard: session abandoned")
		return
	}
	var timeout <-chan struct{} // closed at the CloseTimeout; nil: no wait
	if s.cfg.CloseTimeout > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
		defer cancel()
		timeout = ctx.Done()
	}
	st := s.cur
	if st != nil && timeout != nil {
		st = s.awaitAnswer(st, timeout)
	}
	out := s.core.Leave(s.now())
	if st == nil {
		if out.Send != nil {
			s.o.unsent.Add(1) // no stream: the leases expire as after a crash
		}
		if s.cur != nil {
			s.cur.cancel()
		}
	} else {
		if out.Send != nil {
			st.send(s.request(st, *out.Send))
		}
		st.closeSend()
		if timeout != nil {
		wait:
			for {
				select {
				case <-st.done:
					break wait
				case <-s.events: // the stream's last events; nobody else reads them
				case <-timeout:
					break wait
				}
			}
		}
		st.cancel()
	}
	// Every other stream was canceled when it was abandoned.
	s.streams.Wait()
	s.closeConns()
	s.o.log.Info("ownerguard: session closed")
}

// awaitAnswer waits, until timeout, for the answer to the request in flight
// on st, if there is one, and hands it to the Core without publishing
// anything: a leaving request sent before that answer arrived would not
// acknowledge it, and the manager would drop it as racing. It returns st,
// or nil if the stream ended.
func (s *session) awaitAnswer(st *stream, timeout <-chan struct{}) *stream {
	for !s.waitSince.IsZero() {
		select {
		case e := <-s.events:
			if e.s != st {
				continue // from a stream already abandoned
			}
			if e.resp == nil {
				return nil // the stream ended: nobody to tell
			}
			resp, err := wire.ResponseFrom(e.resp)
			if err != nil {
				s.o.malformed.Add(1)
				continue
			}
			s.waitSince = time.Time{}
			// What it grants is never believed, nor what it asks sent:
			// the leaving request follows at once.
			s.core.Step(resp, s.now())
		case <-timeout:
			return st
		}
	}
	return st
}

func (s *session) closeConns() {
	for _, c := range s.conns {
		c.Close()
	}
}
