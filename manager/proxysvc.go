package manager

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ratelimit"
)

// proxyMethodPrefix is ProxyService's methods: proxies only.
const proxyMethodPrefix = "/fuge.v1.ProxyService/"

// proxyTick is how often the leader looks at the registrations, and at
// the views and limits committed, to push them.
const proxyTick = 100 * time.Millisecond

// proxyHub is ProxyService: the proxies' sessions on the leader, each
// namespace's viewCore, and the relay between sessions.
type proxyHub struct {
	fugev1.UnimplementedProxyServiceServer
	s               *Server
	lease, interval time.Duration

	mu      sync.Mutex
	leading bool
	ns      map[string]*nsProxies
}

type nsProxies struct {
	core       *viewCore
	sessions   map[string]*proxySession
	sentView   uint64
	sentLimits uint64
}

type proxySession struct {
	name, ns string
	out      chan *fugev1.ProxySessionResponse
	cancel   context.CancelFunc
}

// startProxyService creates the hub and starts its loop (until Stop).
func (s *Server) startProxyService() *proxyHub {
	h := &proxyHub{s: s, lease: s.cfg.ProxyLease, interval: s.cfg.ViewInterval, ns: map[string]*nsProxies{}}
	if h.lease <= 0 {
		h.lease = DefaultProxyLease
	}
	if h.interval <= 0 {
		h.interval = DefaultViewInterval
	}
	s.mu.Lock()
	s.proxies = h
	s.mu.Unlock()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); h.loop() }()
	return h
}

// proxySvc returns the hub (nil before Start).
func (s *Server) proxySvc() *proxyHub {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proxies
}

func (h *proxyHub) loop() {
	t := time.NewTicker(proxyTick)
	defer t.Stop()
	for {
		select {
		case <-h.s.stop:
			h.stepDown()
			return
		case <-t.C:
			h.tick()
		}
	}
}

// tick runs every namespace's viewCore, commits the views they call for,
// and pushes what changed to the sessions.
func (h *proxyHub) tick() {
	if !h.s.IsLeader() {
		h.stepDown()
		return
	}
	now := h.s.cfg.Clock.Now()
	h.mu.Lock()
	h.takeOverLocked(now)
	type proposal struct {
		ns string
		v  ProxyView
	}
	var props []proposal
	for name, n := range h.ns {
		if v, ok := n.core.tick(now); ok {
			v.Namespace = name
			props = append(props, proposal{name, v})
		}
	}
	h.mu.Unlock()
	for _, p := range props {
		err := h.s.apply(command{Op: opProxyView, ProxyView: &p.v})
		committed, _ := h.s.fsm.proxyView(p.ns)
		h.mu.Lock()
		if n := h.ns[p.ns]; n != nil {
			n.core.committed(committed, err == nil)
		}
		h.mu.Unlock()
		if err != nil {
			h.s.log.Warn("committing a proxy view", "namespace", p.ns, "err", err)
		} else {
			h.s.log.Info("proxy view", "namespace", p.ns, "id", committed.ID, "members", len(committed.Members), "registered", committed.Registered)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, n := range h.ns {
		if v, ok := h.s.fsm.proxyView(name); ok && v.ID != n.sentView {
			n.sentView = v.ID
			h.broadcastLocked(n, viewResponse(v))
		}
		if l := h.s.fsm.rateLimits(name); l.Version != n.sentLimits {
			n.sentLimits = l.Version
			h.broadcastLocked(n, limitsResponse(l))
		}
	}
}

// takeOverLocked starts leading: every namespace's committed view is
// taken over, its members counted as renewed now, as leases are.
func (h *proxyHub) takeOverLocked(now time.Time) {
	if h.leading {
		return
	}
	h.leading = true
	h.s.fsm.mu.RLock()
	defer h.s.fsm.mu.RUnlock()
	for name, v := range h.s.fsm.st.ProxyViews {
		h.nsLocked(name).core.restore(v, now)
	}
}

// stepDown ends every session: the proxies go to the new leader.
func (h *proxyHub) stepDown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.leading && len(h.ns) == 0 {
		return
	}
	for _, n := range h.ns {
		for _, ss := range n.sessions {
			ss.cancel()
		}
	}
	h.ns = map[string]*nsProxies{}
	h.leading = false
}

func (h *proxyHub) nsLocked(name string) *nsProxies {
	n := h.ns[name]
	if n == nil {
		n = &nsProxies{core: newViewCore(h.lease, h.interval), sessions: map[string]*proxySession{}}
		n.core.current.Namespace = name
		h.ns[name] = n
	}
	return n
}

// broadcastLocked queues m to every session of n; a session too slow to
// take it is ended (it reconnects and gets the latest state).
func (h *proxyHub) broadcastLocked(n *nsProxies, m *fugev1.ProxySessionResponse) {
	for _, ss := range n.sessions {
		select {
		case ss.out <- m:
		default:
			ss.cancel()
		}
	}
}

func viewResponse(v ProxyView) *fugev1.ProxySessionResponse {
	u := &fugev1.ViewUpdate{Id: v.ID, Registered: uint32(v.Registered), Namespace: v.Namespace}
	for _, m := range v.Members {
		u.Members = append(u.Members, &fugev1.ViewMember{Name: m.Name, GossipAddr: m.GossipAddr})
	}
	return &fugev1.ProxySessionResponse{Msg: &fugev1.ProxySessionResponse_View{View: u}}
}

func limitsResponse(set RateLimitSet) *fugev1.ProxySessionResponse {
	c := &fugev1.RateLimitConfig{Version: set.Version}
	for _, r := range set.Limits {
		c.Limits = append(c.Limits, &fugev1.RateLimitRule{
			Name: r.Name, RoutePrefix: r.RoutePrefix, Header: r.Header, Requests: r.Requests,
			PeriodMs: time.Duration(r.Period).Milliseconds(), Burst: r.Burst, Overrides: r.Overrides,
			Mode: r.Mode, OnNoView: r.OnNoView, MaxKeys: uint32(r.MaxKeys),
		})
	}
	return &fugev1.ProxySessionResponse{Msg: &fugev1.ProxySessionResponse_Limits{Limits: c}}
}

// registrations lists a namespace's registrations (name, address, age).
func (h *proxyHub) registrations(ns string) []map[string]any {
	out := []map[string]any{}
	if h == nil {
		return out
	}
	now := h.s.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.ns[ns]
	if n == nil {
		return out
	}
	for _, r := range n.core.regs {
		_, connected := n.sessions[r.name]
		out = append(out, map[string]any{"name": r.name, "gossip_addr": r.addr,
			"renewed_ago": now.Sub(r.renewed).String(), "connected": connected})
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return cmp.Compare(a["name"].(string), b["name"].(string)) })
	return out
}

// Session serves one proxy's registration.
func (h *proxyHub) Session(stream fugev1.ProxyService_SessionServer) error {
	s := h.s
	ctx := stream.Context()
	if err := s.CheckLeader(ctx); err != nil {
		return err
	}
	if !s.sessions.allow(s.clientKey(ctx), s.cfg.Clock.Now()) {
		return status.Errorf(codes.ResourceExhausted, "manager: too many sessions from this client")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	if reg == nil {
		return status.Error(codes.InvalidArgument, "manager: a proxy session starts with a register")
	}
	if err := validRegister(reg); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if id, on, err := s.peerIdentity(ctx); on {
		if err != nil {
			return status.Error(codes.Unauthenticated, err.Error())
		}
		if want := fugetls.ProxyID(reg.Name); id != want {
			return status.Errorf(codes.PermissionDenied, "manager: a proxy registering as %q needs a certificate naming %v; this one names %v", reg.Name, want, id)
		}
	}
	if !s.fsm.hasNamespace(reg.Namespace) {
		return status.Errorf(codes.NotFound, "%v: %q", ErrUnknownNamespace, reg.Namespace)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ss := &proxySession{name: reg.Name, ns: reg.Namespace, out: make(chan *fugev1.ProxySessionResponse, 256), cancel: cancel}
	if err := h.open(ctx, ss, reg); err != nil {
		return err
	}
	clean := false
	defer func() { h.closed(ss, clean) }()

	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				recvErr <- nil
				return
			}
			if err != nil {
				recvErr <- err
				return
			}
			if err := h.handle(ss, reg, m); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	for {
		select {
		case m := <-ss.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-recvErr:
			if err == nil {
				clean = true
				return nil
			}
			return err
		case <-sctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return s.CheckLeader(ctx) // replaced, too slow, or leadership ended
		}
	}
}

func validRegister(r *fugev1.ProxyRegister) error {
	if err := lease.ValidName("namespace", r.Namespace); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := lease.ValidName("name", r.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := lease.ValidAddr("gossip_addr", r.GossipAddr); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// open registers ss, replacing an older session of the same name, and
// queues the registration's answer, the limits and the view.
func (h *proxyHub) open(ctx context.Context, ss *proxySession, reg *fugev1.ProxyRegister) error {
	now := h.s.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.s.IsLeader() {
		return h.s.CheckLeader(ctx)
	}
	h.takeOverLocked(now)
	n := h.nsLocked(ss.ns)
	if old := n.sessions[ss.name]; old != nil {
		old.cancel()
	}
	if !n.core.register(reg.Name, reg.GossipAddr, reg.Incarnation, now) {
		return status.Errorf(codes.ResourceExhausted, "manager: namespace %q has %d proxies registered", ss.ns, maxProxiesPerNamespace)
	}
	n.sessions[ss.name] = ss
	ss.out <- &fugev1.ProxySessionResponse{Msg: &fugev1.ProxySessionResponse_Renewed{Renewed: &fugev1.ProxyRenewed{
		LeaseMs: h.lease.Milliseconds(), Registered: uint32(n.core.registered())}}}
	ss.out <- limitsResponse(h.s.fsm.rateLimits(ss.ns))
	if v, ok := h.s.fsm.proxyView(ss.ns); ok {
		ss.out <- viewResponse(v)
	}
	return nil
}

// closed ends ss; a proxy that closed its stream cleanly leaves at once.
func (h *proxyHub) closed(ss *proxySession, clean bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.ns[ss.ns]
	if n == nil || n.sessions[ss.name] != ss {
		return
	}
	delete(n.sessions, ss.name)
	if clean {
		n.core.leave(ss.name)
	}
}

// handle applies one message of a session.
func (h *proxyHub) handle(ss *proxySession, reg *fugev1.ProxyRegister, m *fugev1.ProxySessionRequest) error {
	now := h.s.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.ns[ss.ns]
	if n == nil || n.sessions[ss.name] != ss {
		return status.Error(codes.Aborted, "manager: session replaced")
	}
	switch msg := m.Msg.(type) {
	case *fugev1.ProxySessionRequest_Renew:
		if !n.core.renew(ss.name, now) && !n.core.register(reg.Name, reg.GossipAddr, reg.Incarnation, now) {
			return status.Errorf(codes.ResourceExhausted, "manager: namespace %q is full", ss.ns)
		}
		r := &fugev1.ProxyRenewed{Seq: msg.Renew.Seq, LeaseMs: h.lease.Milliseconds(), Registered: uint32(n.core.registered())}
		select {
		case ss.out <- &fugev1.ProxySessionResponse{Msg: &fugev1.ProxySessionResponse_Renewed{Renewed: r}}:
		default:
		}
	case *fugev1.ProxySessionRequest_LinkReport:
		if len(msg.LinkReport.Broken) > maxProxiesPerNamespace {
			return status.Error(codes.InvalidArgument, "manager: link_report.broken: too many names")
		}
		n.core.report(msg.LinkReport.ViewId, msg.LinkReport.Broken, now)
	case *fugev1.ProxySessionRequest_Relay:
		if len(msg.Relay.Payload) > ratelimit.MaxMessageBytes {
			return status.Errorf(codes.InvalidArgument, "manager: relay.payload: %d bytes, at most %d", len(msg.Relay.Payload), ratelimit.MaxMessageBytes)
		}
		if to := n.sessions[msg.Relay.To]; to != nil {
			r := &fugev1.GossipRelay{From: ss.name, To: to.name, Payload: msg.Relay.Payload}
			select {
			case to.out <- &fugev1.ProxySessionResponse{Msg: &fugev1.ProxySessionResponse_Relay{Relay: r}}:
			default: // gossip tolerates loss
			}
		}
	case *fugev1.ProxySessionRequest_Register:
		return status.Error(codes.InvalidArgument, "manager: a session registers once")
	default:
		return status.Error(codes.InvalidArgument, "manager: empty proxy session message")
	}
	return nil
}
