package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/textproto"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/ratelimit"
)

// Fleet-wide rate limits (package ratelimit): the proxy registers with the
// managers, receives the namespace's limits and its views, gossips with the
// other members of its view over UDP, and refuses a request over its
// share with 429, Retry-After and the IETF draft's RateLimit-Policy and
// RateLimit headers (draft-ietf-httpapi-ratelimit-headers).

// RateLimitConfig configures the proxy's part in fleet-wide rate limits.
type RateLimitConfig struct {
	// Name is the proxy's name in views: the name in its certificate
	// (spiffe://fuge/proxy/<name>) when the managers check identities.
	Name string
	// GossipAddr is the UDP address the proxy gossips on. Default
	// 127.0.0.1:0.
	GossipAddr string
	// Epoch and Fanout are push-sum's (defaults 500 ms and 2); every proxy
	// of a namespace must use the same Epoch and Seed.
	Epoch  time.Duration
	Fanout int
	Seed   uint64
	// GossipLoss drops this fraction of the gossip datagrams the proxy
	// sends, direct or relayed: a fault injected in user space, for tests
	// and benchmarks. Default 0.
	GossipLoss float64
	// Managers, Namespace and TLS reach the managers' ProxyService (the
	// Config's Managers, Namespace and ManagerTLS by default).
	Managers  []string
	Namespace string
	TLS       *tls.Config
}

// The proxy's 429 answer.
const msgRateLimited = "fuge-proxy: rate limit exceeded: "

// brokenAfter is the number of epochs without an acknowledgement after
// which a link is relayed through the manager and reported.
const brokenAfter = 3

// rateLimiter is the shell around a ratelimit.Node.
type rateLimiter struct {
	cfg   RateLimitConfig
	log   *slog.Logger
	base  time.Time // Allow's clock: monotonic time since base
	rules atomic.Pointer[rlRules]
	conn  *net.UDPConn

	mu       sync.Mutex // the Node and everything below
	node     *ratelimit.Node
	addrs    map[string]*net.UDPAddr // members' gossip addresses in the view
	lease    time.Time               // the registration is held until then
	sendSeqs map[uint64]time.Time    // renewals in flight: when each was sent
	session  fugev1.ProxyService_SessionClient
	limitsV  uint64
	lastView *fugev1.ViewUpdate // the newest view the manager sent
	rng      *rand.Rand

	sendMu sync.Mutex // a gRPC stream allows one sender at a time

	limited, shadowed, relayed, dropped atomic.Uint64
	stop                                chan struct{}
	wg                                  sync.WaitGroup
}

// rlRules is the immutable snapshot the hot path reads.
type rlRules struct {
	rules []rlRule
}

type rlRule struct {
	name   string
	prefix []byte
	header []byte // canonical (fasthttp normalizes the request's names so)
	lim    *ratelimit.Limiter
	rule   *fugev1.RateLimitRule
}

// EnableRateLimits starts the proxy's fleet-wide rate limits: it binds
// the gossip socket and opens a session with the managers. Call it before
// Start or Serve; the returned closer stops them (after Shutdown).
func (p *Proxy) EnableRateLimits(c RateLimitConfig) (func(), error) {
	if c.Name == "" {
		return nil, fmt.Errorf("%w: rate limits need the proxy's name", ErrConfig)
	}
	if c.GossipAddr == "" {
		c.GossipAddr = "127.0.0.1:0"
	}
	if c.Managers == nil {
		c.Managers = p.cfg.Managers
	}
	if c.Namespace == "" {
		c.Namespace = p.cfg.Namespace
	}
	if c.TLS == nil {
		c.TLS = p.cfg.ManagerTLS
	}
	if len(c.Managers) == 0 {
		return nil, ErrNoManagers
	}
	if !(c.GossipLoss >= 0 && c.GossipLoss < 1) {
		return nil, fmt.Errorf("%w: gossip loss %v is not within [0, 1)", ErrConfig, c.GossipLoss)
	}
	node, err := ratelimit.NewNode(c.Name, ratelimit.NodeConfig{Epoch: c.Epoch, Fanout: c.Fanout, Seed: c.Seed})
	if err != nil {
		return nil, err
	}
	c.Epoch = node.Config().Epoch
	ua, err := net.ResolveUDPAddr("udp", c.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip address: %w", ErrConfig, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("proxy: gossip listen: %w", err)
	}
	r := &rateLimiter{cfg: c, log: p.log.With("component", "ratelimit"), base: time.Now(), conn: conn, node: node,
		addrs: map[string]*net.UDPAddr{}, sendSeqs: map[uint64]time.Time{}, stop: make(chan struct{}),
		rng: rand.New(rand.NewPCG(c.Seed, uint64(time.Now().UnixNano())))}
	r.rules.Store(&rlRules{})
	p.rl.Store(r)
	p.m.reg.MustRegister(r.collectors()...)
	r.wg.Add(3)
	go func() { defer r.wg.Done(); r.readLoop() }()
	go func() { defer r.wg.Done(); r.tickLoop() }()
	go func() { defer r.wg.Done(); r.sessionLoop() }()
	return r.close, nil
}

// GossipAddr is the bound gossip address, nil without rate limits.
func (p *Proxy) GossipAddr() net.Addr {
	if r := p.rl.Load(); r != nil {
		return r.conn.LocalAddr()
	}
	return nil
}

func (r *rateLimiter) close() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.conn.Close()
	r.wg.Wait()
}

// admit decides one request; false means it has been answered 429. It
// takes no lock and allocates nothing unless it refuses.
func (r *rateLimiter) admit(ctx *fasthttp.RequestCtx) bool {
	return r.admitAt(ctx, ctx.Time())
}

// admitAt is admit with the request's arrival time, which fasthttp's
// server reads (time.Now, with the monotonic clock) as each request
// begins. A RequestCtx made by hand has none, and the difference from a
// zero time takes Time.Sub's slow path: the benchmark passes a real one.
func (r *rateLimiter) admitAt(ctx *fasthttp.RequestCtx, at time.Time) bool {
	rs := r.rules.Load()
	if len(rs.rules) == 0 {
		return true
	}
	path := ctx.Path()
	var now int64
	for i := range rs.rules {
		rl := &rs.rules[i]
		if !bytes.HasPrefix(path, rl.prefix) {
			continue
		}
		key := ctx.Request.Header.PeekCanonical(rl.header)
		if len(key) == 0 {
			continue
		}
		if now == 0 {
			now = int64(at.Sub(r.base))
		}
		d := rl.lim.Allow(key, now)
		if d.Allowed {
			if d.Limited {
				r.shadowed.Add(1)
			}
			continue
		}
		r.limited.Add(1)
		tooMany(ctx, rl.name, d)
		return false
	}
	return true
}

// tooMany answers 429 with Retry-After and the draft's RateLimit headers.
func tooMany(ctx *fasthttp.RequestCtx, name string, d ratelimit.Decision) {
	retry := max(1, int64((d.Reset+time.Second-1)/time.Second))
	ctx.Response.Reset()
	ctx.Response.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	var b [96]byte
	v := strconv.AppendInt(b[:0], retry, 10)
	ctx.Response.Header.SetBytesV("Retry-After", v)
	v = append(append(append(b[:0], '"'), name...), `";q=`...)
	v = strconv.AppendInt(v, d.Quota, 10)
	v = strconv.AppendInt(append(v, ";w="...), d.Window, 10)
	ctx.Response.Header.SetBytesV("RateLimit-Policy", v)
	v = append(append(append(b[:0], '"'), name...), `";r=0;t=`...)
	v = strconv.AppendInt(v, retry, 10)
	ctx.Response.Header.SetBytesV("RateLimit", v)
	ctx.Response.SetBodyString(msgRateLimited)
	ctx.Response.AppendBodyString(name)
	ctx.Response.AppendBodyString("\n")
}

// setLimits installs the manager's limits, keeping the state of limits
// that did not change.
func (r *rateLimiter) setLimitsLocked(c *fugev1.RateLimitConfig) {
	if c.Version == r.limitsV && c.Version != 0 {
		return
	}
	r.limitsV = c.Version
	old := map[string]rlRule{}
	for _, rl := range r.rules.Load().rules {
		old[rl.name] = rl
	}
	reg := max(1, r.node.Stats().Registered)
	var next rlRules
	var lims []*ratelimit.Limiter
	for _, pr := range c.Limits {
		l := ratelimit.Limit{Name: pr.Name, Requests: pr.Requests, Period: time.Duration(pr.PeriodMs) * time.Millisecond,
			Burst: pr.Burst, Overrides: pr.Overrides, Mode: ratelimit.Mode(pr.Mode), OnNoView: ratelimit.NoView(pr.OnNoView), MaxKeys: int(pr.MaxKeys)}
		rl := rlRule{name: pr.Name, prefix: []byte(pr.RoutePrefix), header: []byte(textproto.CanonicalMIMEHeaderKey(pr.Header)), rule: pr}
		if o, ok := old[pr.Name]; ok && reflect.DeepEqual(o.lim.Config(), l.WithDefaults()) {
			rl.lim = o.lim
		} else {
			lim, err := ratelimit.NewLimiter(l, reg)
			if err != nil {
				r.log.Warn("limit refused", "name", pr.Name, "err", err)
				continue
			}
			rl.lim = lim
		}
		next.rules = append(next.rules, rl)
		lims = append(lims, rl.lim)
	}
	r.node.SetLimits(lims)
	r.rules.Store(&next)
	r.log.Info("rate limits", "version", c.Version, "limits", len(next.rules))
}

// setViewLocked installs a view pushed by the manager.
func (r *rateLimiter) setViewLocked(v *fugev1.ViewUpdate) {
	view := ratelimit.View{ID: v.Id, Registered: int(v.Registered)}
	addrs := map[string]*net.UDPAddr{}
	for _, m := range v.Members {
		view.Members = append(view.Members, m.Name)
		if a, err := net.ResolveUDPAddr("udp", m.GossipAddr); err == nil {
			addrs[m.Name] = a
		}
	}
	r.node.SetView(view)
	if r.node.Stats().View == v.Id {
		r.addrs = addrs
	}
	r.log.Info("view", "id", v.Id, "members", len(v.Members), "registered", v.Registered, "member", r.node.Stats().InView)
}

// tickLoop runs an epoch at every multiple of Epoch on the wall clock, so
// that the proxies of a view tick together (ratelimit's overlay).
func (r *rateLimiter) tickLoop() {
	e := r.cfg.Epoch
	for {
		now := time.Now()
		next := now.Truncate(e).Add(e)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		r.mu.Lock()
		if !r.lease.IsZero() && time.Now().After(r.lease) && r.node.Stats().View != 0 {
			r.log.Warn("registration lost: panic share")
			r.node.ClearView()
			r.lease = time.Time{}
		}
		msgs := r.node.Tick(next.UnixNano())
		broken := r.node.BrokenLinks(brokenAfter)
		r.mu.Unlock()
		relay := map[string]bool{}
		for _, b := range broken {
			relay[b] = true
		}
		for _, m := range msgs {
			r.send(m, relay)
		}
		if len(broken) > 0 {
			r.report(broken)
		}
	}
}

// send sends one gossip message: over UDP, and through the manager too if
// the link is broken.
func (r *rateLimiter) send(m ratelimit.Message, relay map[string]bool) {
	b, err := ratelimit.AppendMessage(nil, m)
	if err != nil {
		r.log.Debug("gossip message not sent", "err", err)
		return
	}
	r.mu.Lock()
	to, _ := r.node.Member(m.To)
	addr := r.addrs[to]
	lose := r.cfg.GossipLoss > 0 && r.rng.Float64() < r.cfg.GossipLoss
	st := r.session
	r.mu.Unlock()
	if lose {
		r.dropped.Add(1)
		return
	}
	if addr != nil {
		_, _ = r.conn.WriteToUDP(b, addr)
	}
	if relay[to] && st != nil {
		r.relayed.Add(1)
		r.sendSession(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Relay{Relay: &fugev1.GossipRelay{To: to, Payload: b}}})
	}
}

// receive applies one gossip datagram and answers it.
func (r *rateLimiter) receive(b []byte, relayed bool) {
	m, err := ratelimit.DecodeMessage(b)
	if err != nil {
		return
	}
	r.mu.Lock()
	ack, ok := r.node.Receive(m)
	var relay map[string]bool
	if ok && relayed {
		// Answer a relayed push through the manager too.
		if to, found := r.node.Member(ack.To); found {
			relay = map[string]bool{to: true}
		}
	}
	r.mu.Unlock()
	if ok {
		r.send(ack, relay)
	}
}

func (r *rateLimiter) readLoop() {
	buf := make([]byte, ratelimit.MaxMessageBytes+1)
	for {
		n, _, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		r.receive(buf[:n], false)
	}
}

// sessionLoop keeps a session with the leader, trying the managers in
// turn and following a standby's fuge-leader trailer.
func (r *rateLimiter) sessionLoop() {
	backoff := 50 * time.Millisecond
	hint := ""
	for i := 0; ; i++ {
		addr := r.cfg.Managers[i%len(r.cfg.Managers)]
		if hint != "" {
			addr, hint = hint, ""
		}
		ok, leader := r.runSession(addr)
		if leader != "" {
			hint = leader
		}
		if ok {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-r.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// runSession runs one session until it fails; ok reports that it was
// accepted, leader the leader a standby named.
func (r *rateLimiter) runSession(addr string) (ok bool, leader string) {
	creds := insecure.NewCredentials()
	if r.cfg.TLS != nil {
		creds = credentials.NewTLS(r.cfg.TLS)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false, ""
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := fugev1.NewProxyServiceClient(cc).Session(ctx)
	if err != nil {
		return false, ""
	}
	reg := &fugev1.ProxyRegister{Namespace: r.cfg.Namespace, Name: r.cfg.Name,
		GossipAddr: r.conn.LocalAddr().String(), Incarnation: uint64(r.base.UnixNano())}
	if err := st.Send(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Register{Register: reg}}); err != nil {
		return false, ""
	}
	r.mu.Lock()
	r.session = st
	r.sendSeqs = map[uint64]time.Time{0: time.Now()}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.session == st {
			r.session = nil
		}
		r.mu.Unlock()
	}()
	renewEvery := make(chan time.Duration, 1)
	go r.renewLoop(ctx, renewEvery)
	for {
		m, err := st.Recv()
		if err != nil {
			if md := st.Trailer(); md != nil {
				if v := md.Get("fuge-leader"); len(v) > 0 {
					leader = v[0]
				}
			}
			if ok {
				r.log.Warn("manager session ended", "manager", addr, "err", err)
			}
			return ok, leader
		}
		ok = true
		r.mu.Lock()
		switch m := m.Msg.(type) {
		case *fugev1.ProxySessionResponse_Renewed:
			if sent, found := r.sendSeqs[m.Renewed.Seq]; found {
				r.lease = sent.Add(time.Duration(m.Renewed.LeaseMs) * time.Millisecond)
				delete(r.sendSeqs, m.Renewed.Seq)
				// Registered again after losing the lease: the session is
				// ordered, so the last view it sent is still the current one.
				if !r.node.Stats().InView && r.lastView != nil && time.Now().Before(r.lease) {
					r.setViewLocked(r.lastView)
				}
			}
			r.node.SetRegistered(int(m.Renewed.Registered))
			select {
			case renewEvery <- time.Duration(m.Renewed.LeaseMs) * time.Millisecond / 4:
			default:
			}
		case *fugev1.ProxySessionResponse_Limits:
			r.setLimitsLocked(m.Limits)
		case *fugev1.ProxySessionResponse_View:
			r.lastView = m.View
			r.setViewLocked(m.View)
		case *fugev1.ProxySessionResponse_Relay:
			r.mu.Unlock()
			r.receive(m.Relay.Payload, true)
			continue
		}
		r.mu.Unlock()
	}
}

// renewLoop renews the registration every lease/4.
func (r *rateLimiter) renewLoop(ctx context.Context, every <-chan time.Duration) {
	var d time.Duration
	select {
	case d = <-every:
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		r.sendSeqs[seq] = time.Now()
		delete(r.sendSeqs, seq-8) // answers that never came
		r.mu.Unlock()
		r.sendSession(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Renew{Renew: &fugev1.ProxyRenew{Seq: seq}}})
	}
}

func (r *rateLimiter) sendSession(m *fugev1.ProxySessionRequest) {
	r.mu.Lock()
	st := r.session
	r.mu.Unlock()
	if st == nil {
		return
	}
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	_ = st.Send(m)
}

// report tells the manager which members this proxy cannot reach.
func (r *rateLimiter) report(broken []string) {
	r.mu.Lock()
	id := r.node.Stats().View
	r.mu.Unlock()
	r.sendSession(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_LinkReport{LinkReport: &fugev1.ProxyLinkReport{ViewId: id, Broken: broken}}})
}

// RateLimitStatus is the state of the proxy's rate limits (GET /ratelimit
// on the admin listener).
type RateLimitStatus struct {
	Node     ratelimit.Stats     `json:"node"`
	Keys     []ratelimit.KeyStat `json:"keys"`
	Limited  uint64              `json:"limited"`
	Shadowed uint64              `json:"shadowed"`
	Relayed  uint64              `json:"relayed"`
	Dropped  uint64              `json:"dropped"` // by GossipLoss
}

// RateLimitStatus returns the state of the rate limits; ok is false when
// they are not enabled.
func (p *Proxy) RateLimitStatus() (RateLimitStatus, bool) {
	r := p.rl.Load()
	if r == nil {
		return RateLimitStatus{}, false
	}
	r.mu.Lock()
	s := RateLimitStatus{Node: r.node.Stats(), Keys: r.node.KeyStats()}
	r.mu.Unlock()
	s.Limited, s.Shadowed, s.Relayed, s.Dropped = r.limited.Load(), r.shadowed.Load(), r.relayed.Load(), r.dropped.Load()
	return s, true
}

func (r *rateLimiter) collectors() []prometheus.Collector {
	c := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	g := func(name, help string, f func(ratelimit.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return f(r.node.Stats())
		})
	}
	return []prometheus.Collector{
		c("fuge_proxy_ratelimit_limited_total", "Requests refused with 429 by a fleet-wide limit.", &r.limited),
		c("fuge_proxy_ratelimit_shadowed_total", "Requests over a shadow-mode limit (admitted).", &r.shadowed),
		c("fuge_proxy_ratelimit_relayed_total", "Gossip messages relayed through the manager.", &r.relayed),
		g("fuge_proxy_ratelimit_view", "The id of the proxy's view (0: none).", func(s ratelimit.Stats) float64 { return float64(s.View) }),
		g("fuge_proxy_ratelimit_panic", "1 while the proxy is in no view and limits at its panic share.", func(s ratelimit.Stats) float64 {
			if s.InView {
				return 0
			}
			return 1
		}),
	}
}

// serveRateLimit serves GET /ratelimit: RateLimitStatus as JSON (404
// without rate limits).
func (p *Proxy) serveRateLimit(w http.ResponseWriter, _ *http.Request) {
	s, ok := p.RateLimitStatus()
	if !ok {
		http.Error(w, "rate limits are not enabled", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}
