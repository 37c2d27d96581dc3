// Command fuge-proxy runs Fuge's reverse proxy in front of a pool of owners:
// it follows a namespace's lease table from the managers and sends each
// request to the owner holding its key (the X-Fuge-Key header by default),
// retrying briefly while a range changes hands. It reaches the managers
// with mutual TLS, with the certificates that fugectl certs init writes
// (--tls-dir), unless --insecure, and the owners with TLS under
// --backend-tls.
//
// Run fuge-proxy --help for the settings; cmd/README.md has examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/proxy"
)

// defaultManagers is fuge-manager's default gRPC address.
const defaultManagers = "127.0.0.1:7401"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run serves until ctx ends, then drains in-flight requests. It returns the
// exit code: 0 after a clean stop or --help, 1 when the proxy fails to start
// or to drain in time, 2 for a bad configuration or certificates that do not
// load.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	s, err := load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "fuge-proxy: %v\nRun 'fuge-proxy --help' for usage.\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: s.logLevel}))
	cfg := s.cfg
	cfg.Logger = log
	if s.tls.Insecure {
		fmt.Fprintln(stderr, fugetls.InsecureWarning("fuge-proxy"))
	} else {
		src, err := s.tls.Source(fugetls.ProxyBase)
		if err != nil {
			fmt.Fprintf(stderr, "fuge-proxy: %v\n", err)
			return 2
		}
		cfg.ManagerTLS = src.ClientConfig(fugetls.RoleManager)
		if s.backendTLS {
			cfg.BackendTLS = src.ClientConfig(fugetls.RoleOwner)
		}
		if s.rateLimit.Name == "" {
			s.rateLimit.Name = src.ID().Name // the certificate's spiffe://fuge/proxy/<name>
		}
	}
	p, err := proxy.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fuge-proxy: %v\n", err)
		return 2
	}
	if s.rateLimits {
		stopLimits, err := p.EnableRateLimits(s.rateLimit)
		if err != nil {
			fmt.Fprintf(stderr, "fuge-proxy: %v\n", err)
			return 2
		}
		defer stopLimits()
	}
	if err := p.Start(); err != nil {
		log.Error("start failed", "err", err)
		return 1
	}
	fmt.Fprintf(stdout, "fuge-proxy: namespace %s, balance %s, proxy %s, admin %s\n",
		cfg.Namespace, cfg.Balance, p.Addr(), p.AdminAddr())
	if s.rateLimits {
		fmt.Fprintf(stdout, "fuge-proxy: rate limits as %s, gossip %s\n", s.rateLimit.Name, p.GossipAddr())
	}

	<-ctx.Done()
	log.Info("draining", "timeout", s.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.shutdownTimeout)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		log.Error("drain failed", "err", err)
		return 1
	}
	return 0
}

// settings is the parsed command line.
type settings struct {
	cfg             proxy.Config
	tls             fugetls.Options // run loads the certificates (fugetls.ProxyBase)
	backendTLS      bool
	logLevel        slog.Level
	shutdownTimeout time.Duration
	rateLimits      bool // --ratelimit
	rateLimit       proxy.RateLimitConfig
}

// envPrefix prefixes the environment variable of every flag: --max-conns is
// FUGE_PROXY_MAX_CONNS.
const envPrefix = "FUGE_PROXY_"

func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// newFlagSet binds every flag to s, with the defaults.
func newFlagSet(s *settings) *flag.FlagSet {
	d := proxy.DefaultConfig()
	s.cfg = d
	s.cfg.Logger = nil
	s.logLevel = slog.LevelInfo
	s.shutdownTimeout = 30 * time.Second
	c := &s.cfg
	fs := flag.NewFlagSet("fuge-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.ListenAddr, "listen", d.ListenAddr, "address to serve proxied requests on")
	fs.StringVar(&c.AdminAddr, "admin", d.AdminAddr, "address to serve /metrics and /healthz on")
	fs.Func("managers", "manager gRPC addresses, comma-separated (default "+defaultManagers+")", func(v string) error {
		c.Managers = nil
		for _, m := range strings.Split(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				c.Managers = append(c.Managers, m)
			}
		}
		if len(c.Managers) == 0 {
			return errors.New("no address")
		}
		return nil
	})
	c.Managers = []string{defaultManagers}
	fs.StringVar(&c.Namespace, "namespace", d.Namespace, "the pool's namespace")
	fs.StringVar(&c.Header, "header", d.Header, "routing header, hashed with XXH64")
	fs.Func("missing-key", "requests without the header: reject (400) or round-robin (default reject)", func(v string) error {
		c.MissingKey = proxy.MissingKeyPolicy(v)
		return nil
	})
	fs.Func("balance", "lease (to the key's lease holder) or round-robin (the baseline) (default lease)", func(v string) error {
		c.Balance = proxy.Balance(v)
		return nil
	})
	fs.DurationVar(&c.RetryBudget, "retry-budget", d.RetryBudget, "time a request may spend being retried")
	fs.DurationVar(&c.BackoffBase, "backoff", d.BackoffBase, "first wait before a retry, doubling")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", d.ReadTimeout, "time to read a whole request")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", d.WriteTimeout, "time to write a response")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", d.IdleTimeout, "keep-alive connection idle time")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", d.UpstreamTimeout, "time for an owner to answer, per attempt")
	fs.DurationVar(&c.DialTimeout, "dial-timeout", d.DialTimeout, "time to connect to an owner")
	fs.DurationVar(&c.LookupStalenessBound, "staleness-bound", 0, "notify loss everywhere after this long without the manager (default 30s)")
	fs.IntVar(&c.MaxConns, "max-conns", d.MaxConns, "concurrent client connections, idle ones included")
	fs.IntVar(&c.MaxConnsPerIP, "max-conns-per-ip", 0,
		"concurrent connections from one client address, 429 beyond; below --max-conns; -1: no limit (default 256, or half of --max-conns if less)")
	fs.Var((*sizeValue)(&c.MaxHeaderBytes), "max-header-bytes", "request line and header size limit, 431 beyond (default 16KiB)")
	fs.Var((*sizeValue)(&c.MaxBodyBytes), "max-body-bytes", "request body size limit, 413 beyond (default 4MiB)")
	fs.IntVar(&c.MaxConnsPerOwner, "max-conns-per-owner", d.MaxConnsPerOwner, "connections to each owner")
	fs.IntVar(&c.PipelineConns, "pipeline-conns", d.PipelineConns,
		"connections to an owner that carry requests before idempotent ones are pipelined behind others (plain HTTP to owners only)")
	fs.IntVar(&c.PipelineDepth, "pipeline-depth", d.PipelineDepth, "requests in flight on one owner connection at most; 1: no pipelining")
	fs.DurationVar(&c.SpinWait, "spin-wait", d.SpinWait,
		"how long a request alone in flight polls its owner for the answer before sleeping (CPU for latency at low load; at most 1ms); 0: never")
	fs.StringVar(&s.tls.Dir, "tls-dir", fugetls.DefaultDir,
		"certificates as fugectl certs init writes them: ca.crt, proxy.crt, proxy.key; re-read when they change")
	fs.StringVar(&s.tls.CA, "tls-ca", "", "CA bundle (PEM) instead of --tls-dir; with --tls-cert and --tls-key")
	fs.StringVar(&s.tls.Cert, "tls-cert", "", "the proxy's certificate (URI SAN spiffe://fuge/proxy/<name>)")
	fs.StringVar(&s.tls.Key, "tls-key", "", "the proxy's private key")
	fs.BoolVar(&s.tls.Insecure, "insecure", false, "no TLS and no authentication to the managers: for tests only")
	fs.BoolVar(&s.backendTLS, "backend-tls", false,
		"connect to owners with TLS, presenting the proxy's certificate and accepting only owners' (owners serve plain HTTP unless told)")
	fs.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.DurationVar(&s.shutdownTimeout, "shutdown-timeout", s.shutdownTimeout, "time to drain in-flight requests on SIGINT or SIGTERM")
	fs.BoolVar(&s.rateLimits, "ratelimit", false,
		"enforce the namespace's fleet-wide rate limits (fugectl ratelimits): register with the managers and gossip with the other proxies")
	fs.StringVar(&s.rateLimit.Name, "ratelimit-name", "",
		"the proxy's name in rate-limit views (default: the name in its certificate; required with --insecure)")
	fs.StringVar(&s.rateLimit.GossipAddr, "gossip-addr", "127.0.0.1:0", "UDP address to gossip on with --ratelimit")
	fs.DurationVar(&s.rateLimit.Epoch, "gossip-epoch", 500*time.Millisecond, "gossip period; the same at every proxy of the namespace")
	fs.IntVar(&s.rateLimit.Fanout, "gossip-fanout", 2, "proxies pushed to each epoch (1-16)")
	fs.Uint64Var(&s.rateLimit.Seed, "gossip-seed", 0, "seed of the gossip overlay; the same at every proxy of the namespace")
	fs.Float64Var(&s.rateLimit.GossipLoss, "gossip-loss", 0, "drop this fraction of the gossip messages sent: a fault for tests and benchmarks only")
	return fs
}

// load reads the settings: flags > FUGE_PROXY_* variables > defaults. An
// empty variable counts as unset.
func load(args []string, getenv func(string) string) (settings, error) {
	var s settings
	fs := newFlagSet(&s)
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", envName(f.Name), v, serr)
			}
		}
	})
	if err != nil {
		return s, err
	}
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if s.cfg.SpinWait == 0 {
		s.cfg.SpinWait = -1 // the flag's "never"; Config's zero is the default
	} else if s.cfg.SpinWait < 0 {
		return s, fmt.Errorf("--spin-wait %v is negative; 0 turns spinning off", s.cfg.SpinWait)
	}
	if s.rateLimits && s.tls.Insecure && s.rateLimit.Name == "" {
		return s, errors.New("--ratelimit with --insecure needs --ratelimit-name")
	}
	if s.rateLimits && !(s.rateLimit.GossipLoss >= 0 && s.rateLimit.GossipLoss < 1) {
		return s, fmt.Errorf("--gossip-loss %v: want a fraction in [0, 1)", s.rateLimit.GossipLoss)
	}
	switch {
	case s.tls.Insecure && s.backendTLS:
		return s, errors.New("--backend-tls needs the proxy's certificate: drop --insecure")
	case !s.tls.Insecure:
		if _, err := s.tls.Files(fugetls.ProxyBase); err != nil {
			return s, err
		}
	}
	return s, s.cfg.Validate()
}

// usage prints every flag with its variable and default.
func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: fuge-proxy [flags]

fuge-proxy sends each request to the owner holding its key in the manager's
lease table. Flags override FUGE_PROXY_* variables, which override defaults.

`)
	var s settings
	newFlagSet(&s).VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && !strings.Contains(f.Usage, "(default") {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  --%s  [%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
	})
}

// sizeValue is a byte count: an integer with an optional KiB, MiB or GiB
// suffix.
type sizeValue int

func (v *sizeValue) String() string { return strconv.Itoa(int(*v)) }

func (v *sizeValue) Set(s string) error {
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > (1<<31-1)/mult {
		return fmt.Errorf("bad size %q: want a byte count, optionally with KiB, MiB or GiB", s)
	}
	*v = sizeValue(n * mult)
	return nil
}
