package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fuge-project/fuge/lb"
)

// Proxy is fuge-proxy: a fasthttp reverse proxy that sends each request to
// the owner its Balancer picks for the routing header. Its methods are safe
// for concurrent use.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	lookup   *lb.Lookup  // nil when cfg.Balancer is set
	bal      lb.Balancer // routes keyed requests
	fallback lb.Balancer // routes keyless requests; nil: reject them
	server   *fasthttp.Server
	owners   *owners
	spin     *spinner // Config.SpinWait
	c        counters
	m        *metrics
	scratch  sync.Pool // *scratch

	// rl is the fleet-wide rate limits (ratelimit.go); nil: none.
	rl atomic.Pointer[rateLimiter]

	mu        sync.Mutex
	running   bool // background started
	started   bool // Start called
	closed    bool
	stop      chan struct{}
	watchDone chan struct{}
	ln        net.Listener
	serveDone chan struct{}
	admin     *http.Server
	adminLn   net.Listener
	adminDone chan struct{}
}

// New validates cfg and returns a Proxy that is not yet serving. Unless
// cfg.Balancer is set, it creates the Lookup that Start (or Serve) starts.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Managers = append([]string(nil), cfg.Managers...)
	p := &Proxy{cfg: cfg, log: cfg.Logger.With("component", "fuge-proxy"), stop: make(chan struct{})}
	p.scratch.New = func() any { return new(scratch) }

	p.bal, p.fallback = cfg.Balancer, cfg.Fallback
	if p.bal == nil {
		var opts []grpc.DialOption
		if cfg.ManagerTLS != nil {
			opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.ManagerTLS)))
		}
		l, err := lb.NewLookup(lb.LookupConfig{
			Managers: cfg.Managers, Namespace: cfg.Namespace, Name: cfg.LookupName,
			StalenessBound: cfg.LookupStalenessBound,
			DialOptions:    opts,
			Logger:         cfg.Logger.With("component", "lookup"),
		})
		if err != nil {
			return nil, err
		}
		p.lookup = l
		rr := lb.NewLookupRoundRobin(l)
		if cfg.Balance == BalanceRoundRobin {
			p.bal = rr
		} else {
			p.bal = lb.NewLeaseBalancer(l)
		}
		if p.fallback == nil {
			p.fallback = rr
		}
	}
	if cfg.MissingKey == MissingKeyReject {
		p.fallback = nil
	}

	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		dial = func(addr string) (net.Conn, error) { return d.Dial("tcp", addr) }
	}
	p.spin = newSpinner(cfg.SpinWait)
	// The pools count their exchanges in p.spin only if it may spin: two
	// atomic operations on one shared word per request, for nothing when
	// it is off.
	poolSpin := p.spin
	if cfg.SpinWait <= 0 {
		poolSpin = nil
	}
	p.owners = newOwners(func(addr string) *owner {
		return &owner{addr: addr, pool: newPipelinedPool(addr, dial, cfg.BackendTLS, cfg.DialTimeout, cfg.MaxConnsPerOwner, cfg.PipelineConns, cfg.PipelineDepth, poolSpin)}
	})
	p.m = newMetrics(&p.c, p.spin, p.Healthy, p.owners.len, p.owners.latency)
	p.server = &fasthttp.Server{
		Handler:                      p.handle,
		ErrorHandler:                 p.handleError,
		Logger:                       fastLogger{p.log},
		ReadTimeout:                  cfg.ReadTimeout,
		WriteTimeout:                 cfg.WriteTimeout,
		IdleTimeout:                  cfg.IdleTimeout,
		Concurrency:                  cfg.MaxConns,
		ReadBufferSize:               cfg.MaxHeaderBytes,
		MaxRequestBodySize:           cfg.MaxBodyBytes,
		CloseOnShutdown:              true,
		NoDefaultServerHeader:        true,
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
	}
	return p, nil
}

// Start listens on ListenAddr and AdminAddr, starts the Lookup and serves
// until Shutdown. It returns once both listeners are open.
func (p *Proxy) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case p.started:
		return ErrStarted
	}
	tcpLn, err := net.Listen("tcp", p.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("proxy: listen: %w", err)
	}
	ln := limitPerIP(withRawIO(tcpLn, p.spin), p.cfg.MaxConnsPerIP, &p.c.refusedConns)
	adminLn, err := net.Listen("tcp", p.cfg.AdminAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("proxy: admin listen: %w", err)
	}
	if err := p.startBackgroundLocked(); err != nil {
		ln.Close()
		adminLn.Close()
		return err
	}
	p.started = true
	p.ln, p.adminLn = ln, adminLn
	p.serveDone, p.adminDone = make(chan struct{}), make(chan struct{})
	p.admin = &http.Server{Handler: p.AdminHandler(), ReadHeaderTimeout: p.cfg.ReadTimeout}
	go func() {
		defer close(p.serveDone)
		if err := p.server.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			p.log.Error("serve", "err", err)
		}
	}()
	go func() {
		defer close(p.adminDone)
		if err := p.admin.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("admin serve", "err", err)
		}
	}()
	p.log.Info("serving", "addr", ln.Addr().String(), "admin", adminLn.Addr().String())
	return nil
}

// Serve serves proxied traffic on ln until Shutdown (for listeners that Start
// does not make, such as fasthttputil.InmemoryListener), with the same
// limits as Start's. It starts the Lookup on first use. Call Shutdown only
// once Serve has started.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	err := p.startBackgroundLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.server.Serve(limitPerIP(withRawIO(ln, p.spin), p.cfg.MaxConnsPerIP, &p.c.refusedConns))
}

// startBackgroundLocked starts the Lookup and the owner watcher once.
func (p *Proxy) startBackgroundLocked() error {
	if p.closed {
		return ErrClosed
	}
	if p.running {
		return nil
	}
	if p.lookup != nil {
		if err := p.lookup.Start(context.Background()); err != nil {
			return err
		}
	}
	p.running = true
	p.watchDone = make(chan struct{})
	go p.watchOwners()
	return nil
}

// Addr is the proxied listener's address, nil before Start.
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// AdminAddr is the admin listener's address, nil before Start.
func (p *Proxy) AdminAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.adminLn == nil {
		return nil
	}
	return p.adminLn.Addr()
}

// Handler is the proxying fasthttp handler, for embedding the proxy in a
// server of one's own (Serve and Start use it).
func (p *Proxy) Handler() fasthttp.RequestHandler { return p.handle }

// Healthy reports whether the balancer has a table (see Config.Balancer).
func (p *Proxy) Healthy() bool {
	r, ok := p.bal.(interface{ Ready() <-chan struct{} })
	if !ok {
		return true
	}
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// AdminHandler serves GET /metrics (Prometheus text format) and GET /healthz
// (200 "ok" once the balancer has a table, 503 before).
func (p *Proxy) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.m.handler())
	mux.HandleFunc("GET /ratelimit", p.serveRateLimit) // ratelimit.go
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !p.Healthy() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "no lease table yet")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	var s Stats
	for k := range s.Responses {
		s.Responses[k] = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.responses[k] })
	}
	s.Attempts = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.attempts })
	s.Retries = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.retries })
	s.Misroutes = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.misroutes })
	s.Refused = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.refused })
	s.UpstreamErrors = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.upstreamErrors })
	s.GiveUps = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.giveUps })
	s.Pipelined = p.c.sum(func(c *counterShard) *atomic.Uint64 { return &c.pipelined })
	s.Spins, s.SpinAnswered = p.spin.spins.Load(), p.spin.answered.Load()
	s.Owners = p.owners.len()
	s.RefusedConns = p.c.refusedConns.Load()
	return s
}

// Shutdown stops accepting connections, lets in-flight requests finish
// (including their retries) until ctx ends, then stops the admin listener,
// the Lookup and the owner pools. Connections idle at shutdown are closed at
// once, and responses sent while draining carry Connection: close. It
// returns ctx's error if draining did not finish. Shutdown is idempotent.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	running := p.running
	p.mu.Unlock()

	err := p.server.ShutdownWithContext(ctx)
	if p.ln != nil {
		p.ln.Close() // in case Serve had not registered it yet
		<-p.serveDone
	}
	if p.admin != nil {
		if aerr := p.admin.Shutdown(ctx); aerr != nil {
			p.admin.Close()
			err = errors.Join(err, aerr)
		}
		<-p.adminDone
	}
	if running {
		close(p.stop)
		<-p.watchDone
	}
	if p.lookup != nil {
		p.lookup.Close()
	}
	p.owners.closeIdle()
	p.log.Info("stopped", "err", err)
	return err
}

// watchOwners drops the pools of owners that left, after each update of a
// balancer that lists its addresses, abandoning the attempts that wait on
// them (owners.retain).
func (p *Proxy) watchOwners() {
	defer close(p.watchDone)
	type lister interface{ Addrs() []string }
	var ls []lister
	for _, b := range []lb.Balancer{p.bal, p.fallback} {
		if l, ok := b.(lister); ok {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		<-p.stop
		return
	}
	for {
		upd := p.bal.Updated()
		var fupd <-chan struct{}
		if p.fallback != nil {
			fupd = p.fallback.Updated()
		}
		var keep []string
		for _, l := range ls {
			keep = append(keep, l.Addrs()...)
		}
		for _, o := range p.owners.retain(keep) {
			go abandonWaiting(o, &p.c.abandoned, p.stop)
		}
		select {
		case <-upd:
		case <-fupd:
		case <-p.stop:
			return
		}
	}
}

// fastLogger hands fasthttp's messages to slog, at debug level: they are
// mostly about clients' bad requests, which the metrics count.
type fastLogger struct{ l *slog.Logger }

func (f fastLogger) Printf(format string, args ...any) {
	f.l.Debug(fmt.Sprintf(format, args...), "from", "fasthttp")
}
