package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/textproto"
	"strings"
	"time"

	"github.com/fuge-project/fuge/lb"
)

// Defaults of Config.
const (
	DefaultListenAddr = "127.0.0.1:8080"
	DefaultAdminAddr  = "127.0.0.1:8081"
	DefaultNamespace  = "default"
	DefaultHeader     = "X-Fuge-Key"
	// DefaultRetryBudget covers the longest gap a crashed owner leaves
	// under the default lease (T·65/60 = 8.67 s after its last renewal),
	// so that a request arriving in the gap waits for the new owner
	// instead of failing.
	DefaultRetryBudget      = 10 * time.Second
	DefaultBackoffBase      = 5 * time.Millisecond
	DefaultReadTimeout      = 10 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultUpstreamTimeout  = 10 * time.Second
	DefaultDialTimeout      = time.Second
	DefaultMaxConns         = 10000
	DefaultMaxHeaderBytes   = 16 << 10
	DefaultMaxBodyBytes     = 4 << 20
	DefaultMaxConnsPerOwner = 512
	// DefaultPipelineConns and DefaultPipelineDepth: see Config.PipelineConns.
	DefaultPipelineConns = 4
	DefaultPipelineDepth = 8
	// DefaultSpinWait: see Config.SpinWait. MaxSpinWait bounds it.
	DefaultSpinWait = 50 * time.Microsecond
	MaxSpinWait     = time.Millisecond
	// DefaultMaxConnsPerIP lets one client address hold a busy front end's
	// pool of connections, but not the proxy's MaxConns.
	DefaultMaxConnsPerIP = 256
	// DefaultLookupName is the xDS node id of the proxy's Lookup.
	DefaultLookupName = "fuge-proxy"
)

// GenerationHeader is the request header in which the proxy names the lease
// generation it routed under; ownerguard refuses a request whose generation
// is newer than the one it holds.
const GenerationHeader = "Fuge-Generation"

// LostHeader marks an owner's 503 given in place of an answer computed
// while its lease was lost (ownerguard.LostHeader): the proxy retries an
// idempotent request elsewhere, and passes the 503 on for any other.
const LostHeader = "Fuge-Lost"

// Balance names how the proxy picks an owner.
type Balance string

// The balancing modes.
const (
	// BalanceLease routes each key to its lease holder (lb.LeaseBalancer)
	// and stamps the generation.
	BalanceLease Balance = "lease"
	// BalanceRoundRobin hands requests to the owners in turn, ignoring the
	// key (lb.RoundRobin over the lease table's owners): the baseline.
	BalanceRoundRobin Balance = "round-robin"
)

// MissingKeyPolicy says what to do with a request without the routing
// header (or with an empty one).
type MissingKeyPolicy string

// The missing-key policies.
const (
	// MissingKeyReject answers 400.
	MissingKeyReject MissingKeyPolicy = "reject"
	// MissingKeyRoundRobin sends the request to the owners in turn, without
	// a generation.
	MissingKeyRoundRobin MissingKeyPolicy = "round-robin"
)

// Errors returned by Config.Validate, wrapped with detail.
var (
	ErrNoManagers = errors.New("proxy: no manager addresses and no balancer")
	ErrConfig     = errors.New("proxy: invalid configuration")
)

// Errors of the Proxy's life cycle.
var (
	ErrStarted = errors.New("proxy: already started")
	ErrClosed  = errors.New("proxy: shut down")
)

// Config configures fuge-proxy. Zero values mean the documented defaults;
// cmd/fuge-proxy fills it from flags and FUGE_PROXY_* variables.
type Config struct {
	// ListenAddr is where Start serves proxied traffic. Default
	// 127.0.0.1:8080; port 0 lets the kernel choose (see Proxy.Addr).
	ListenAddr string
	// AdminAddr is where Start serves GET /metrics (Prometheus) and
	// GET /healthz, on a listener of their own so that they never shadow a
	// proxied path. Default 127.0.0.1:8081.
	AdminAddr string

	// Managers lists every manager's gRPC address; the proxy follows the
	// namespace's lease table from them with an lb.Lookup. Required unless
	// Balancer is set.
	Managers []string
	// Namespace is the pool's namespace. Default "default".
	Namespace string
	// LookupName is the Lookup's xDS node id. Default "fuge-proxy".
	LookupName string
	// LookupStalenessBound is the Lookup's StalenessBound. Zero means lb's
	// default (30 s).
	LookupStalenessBound time.Duration
	// Balance picks the owner: BalanceLease (default) or BalanceRoundRobin.
	Balance Balance
	// Balancer, if set, replaces the Lookup and Balance: the proxy routes
	// by it, and Managers and Namespace are not used. For tests and
	// embedding. If it also has Ready() <-chan struct{}, /healthz answers
	// 200 once that is closed (otherwise at once); if it has
	// Addrs() []string, the proxy closes the connections of owners no
	// longer listed after each update (both lb balancers have both).
	Balancer lb.Balancer

	// Header is the routing header; its one value is hashed with XXH64
	// (ring.Hash). Default X-Fuge-Key.
	Header string
	// MissingKey is the policy for requests without the header:
	// MissingKeyReject (default, 400) or MissingKeyRoundRobin.
	MissingKey MissingKeyPolicy
	// Fallback is the balancer for requests without a key under
	// MissingKeyRoundRobin. Nil means round robin over the Lookup's owners;
	// required with MissingKeyRoundRobin when Balancer is set.
	Fallback lb.Balancer

	// RetryBudget bounds the time a request may spend being retried, from
	// its arrival; its last attempt ends UpstreamTimeout after the budget
	// at the latest, waiting for a free connection included. Default 10 s
	// (DefaultRetryBudget).
	RetryBudget time.Duration
	// BackoffBase is the first wait before a retry when the table has not
	// changed; each wait doubles it. A table change ends the wait early.
	// Default 5 ms.
	BackoffBase time.Duration

	// ReadTimeout bounds reading a whole request, header and body, from the
	// moment the proxy starts reading it, so a client sending it slowly is
	// cut off. Default 10 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response. Default 10 s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle for this long.
	// Default 60 s.
	IdleTimeout time.Duration
	// UpstreamTimeout bounds writing a request to an owner and reading its
	// response, per attempt. Default 10 s.
	UpstreamTimeout time.Duration
	// DialTimeout bounds connecting to an owner, the TLS handshake included
	// with BackendTLS. Default 1 s.
	DialTimeout time.Duration

	// MaxConns limits concurrent client connections, idle ones included;
	// beyond it a new connection gets 503 and is closed. Default 10000.
	MaxConns int
	// MaxConnsPerIP limits the concurrent connections from one client
	// address (IPv4 or IPv6, each address apart), so that one client
	// holding idle connections cannot take all of MaxConns; beyond it a new
	// connection from that address gets 429 and is closed. It must be below
	// MaxConns. Zero means 256 (DefaultMaxConnsPerIP), or MaxConns/2 if that
	// is smaller; negative means no limit (a load generator, or a front end
	// that all clients come through).
	MaxConnsPerIP int
	// MaxHeaderBytes limits a request's line and header; a larger one gets
	// 431. Default 16 KiB.
	MaxHeaderBytes int
	// MaxBodyBytes limits a request body; a larger one gets 413. Default
	// 4 MiB.
	MaxBodyBytes int
	// MaxConnsPerOwner limits connections to each owner. A request finding
	// all of them busy waits for one up to RetryBudget. Default 512.
	MaxConnsPerOwner int
	// PipelineConns and PipelineDepth set HTTP/1.1 pipelining to owners
	// over plain TCP. While fewer than PipelineConns connections to an
	// owner carry requests, each request gets a connection of its own, as
	// without pipelining. Beyond, an idempotent request is written at once
	// behind the others on the busy connection with the fewest in flight,
	// if fewer than PipelineDepth are (never behind a non-idempotent
	// one), and if the owner's fastest answer among its last 256 took at
	// most 200 µs; otherwise it takes an idle or new connection. A busy,
	// fast owner then reads several requests at once and answers them in
	// one write, and the proxy reads several answers at once. The cost: a
	// request waits for the answers before its own (head-of-line
	// blocking), and if one of those fails, it fails after it was sent
	// (retried, as it is idempotent). A slow owner (an answer never under
	// 200 µs) gets its requests in parallel, as without pipelining.
	// Defaults 4 and 8; PipelineDepth 1 turns pipelining off.
	PipelineConns int
	PipelineDepth int
	// SpinWait is how long a request that is the only one in flight, once
	// written to its owner (plain TCP, on Linux), polls the owner's socket
	// for the answer before sleeping. A CPU that sleeps while the owner
	// works wakes up late, on a virtual machine by about ten microseconds
	// each time; an in-memory owner answers within tens of microseconds.
	// It costs CPU at low load only, up to SpinWait per request (with
	// one client connection here: ~10 µs more CPU and ~10 µs less p50 per
	// request); it yields to every other goroutine, and stops as soon as
	// another request waits for an owner or a client socket has
	// something, so under load it does not run; nor for an owner whose
	// fastest answer of its last 256 took longer than SpinWait. Default
	// 50 µs; negative turns it off; at most MaxSpinWait.
	SpinWait time.Duration

	// Dial, if set, connects to an owner (for tests: an in-memory
	// listener). Nil means TCP with DialTimeout.
	Dial func(addr string) (net.Conn, error)
	// BackendTLS, if set, makes the proxy speak TLS to every owner with
	// this configuration: it presents the proxy's certificate and must
	// accept only owners (cmd/fuge-proxy --backend-tls uses
	// fugetls.Source.ClientConfig(fugetls.RoleOwner)). The handshake is
	// part of connecting: it must finish within DialTimeout, and a failed
	// one counts as a refused connection (nothing was sent, so any request
	// is retried). An empty ServerName is the owner's host. Nil means plain
	// HTTP to owners, which is what ownerguard's servers speak by default.
	BackendTLS *tls.Config
	// ManagerTLS, if set, is the TLS configuration of the Lookup's gRPC
	// connections to the managers (cmd/fuge-proxy: mutual TLS with the
	// proxy's certificate, fugetls.Source.ClientConfig(fugetls.RoleManager)).
	// Nil means plain gRPC (tests, --insecure). Unused when Balancer is set.
	ManagerTLS *tls.Config
	// Logger receives life-cycle events, and fasthttp's errors (mostly
	// clients' bad requests) at debug level. Nil means discard.
	Logger *slog.Logger
}

// DefaultConfig returns a config with every default filled in and no
// manager addresses.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defD := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defN := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	def(&c.ListenAddr, DefaultListenAddr)
	def(&c.AdminAddr, DefaultAdminAddr)
	def(&c.Namespace, DefaultNamespace)
	def(&c.LookupName, DefaultLookupName)
	def(&c.Header, DefaultHeader)
	if c.Balance == "" {
		c.Balance = BalanceLease
	}
	if c.MissingKey == "" {
		c.MissingKey = MissingKeyReject
	}
	defD(&c.RetryBudget, DefaultRetryBudget)
	defD(&c.BackoffBase, DefaultBackoffBase)
	defD(&c.ReadTimeout, DefaultReadTimeout)
	defD(&c.WriteTimeout, DefaultWriteTimeout)
	defD(&c.IdleTimeout, DefaultIdleTimeout)
	defD(&c.UpstreamTimeout, DefaultUpstreamTimeout)
	defD(&c.DialTimeout, DefaultDialTimeout)
	defN(&c.MaxConns, DefaultMaxConns)
	defN(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	defN(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	defN(&c.MaxConnsPerOwner, DefaultMaxConnsPerOwner)
	defN(&c.PipelineConns, DefaultPipelineConns)
	defN(&c.PipelineDepth, DefaultPipelineDepth)
	defD(&c.SpinWait, DefaultSpinWait)
	defN(&c.MaxConnsPerIP, max(1, min(DefaultMaxConnsPerIP, c.MaxConns/2)))
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first problem with c, after defaults. Errors wrap
// ErrNoManagers or ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Balancer == nil {
		if len(c.Managers) == 0 {
			return ErrNoManagers
		}
		for _, m := range c.Managers {
			if m == "" {
				return fmt.Errorf("%w: empty address in %q", ErrNoManagers, c.Managers)
			}
		}
	}
	switch c.Balance {
	case BalanceLease, BalanceRoundRobin:
	default:
		return fmt.Errorf("%w: balance %q is not %q or %q", ErrConfig, c.Balance, BalanceLease, BalanceRoundRobin)
	}
	switch c.MissingKey {
	case MissingKeyReject:
	case MissingKeyRoundRobin:
		if c.Balancer != nil && c.Fallback == nil {
			return fmt.Errorf("%w: missing-key policy %q with a Balancer needs a Fallback", ErrConfig, c.MissingKey)
		}
	default:
		return fmt.Errorf("%w: missing-key policy %q is not %q or %q", ErrConfig, c.MissingKey, MissingKeyReject, MissingKeyRoundRobin)
	}
	if !validToken(c.Header) {
		return fmt.Errorf("%w: header %q is not a valid header name", ErrConfig, c.Header)
	}
	if k := textproto.CanonicalMIMEHeaderKey(c.Header); k == GenerationHeader || k == "X-Forwarded-For" || hopByHop(k) {
		return fmt.Errorf("%w: header %q is set or removed by the proxy", ErrConfig, c.Header)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"retry budget", c.RetryBudget}, {"backoff base", c.BackoffBase},
		{"read timeout", c.ReadTimeout}, {"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout},
		{"upstream timeout", c.UpstreamTimeout}, {"dial timeout", c.DialTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrConfig, d.name, d.v)
		}
	}
	if c.LookupStalenessBound < 0 {
		return fmt.Errorf("%w: lookup staleness bound %v is negative", ErrConfig, c.LookupStalenessBound)
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"max connections", c.MaxConns}, {"max header bytes", c.MaxHeaderBytes},
		{"max body bytes", c.MaxBodyBytes}, {"max connections per owner", c.MaxConnsPerOwner},
		{"pipeline connections", c.PipelineConns}, {"pipeline depth", c.PipelineDepth},
	} {
		if n.v < 0 {
			return fmt.Errorf("%w: %s %d is negative", ErrConfig, n.name, n.v)
		}
	}
	if c.SpinWait > MaxSpinWait {
		return fmt.Errorf("%w: spin wait %v is over %v: a longer one is a busy loop, not a wait for an answer", ErrConfig, c.SpinWait, MaxSpinWait)
	}
	if c.MaxConnsPerIP >= c.MaxConns && c.MaxConns > 1 {
		return fmt.Errorf("%w: max connections per IP %d must be below max connections %d, or one client can take them all",
			ErrConfig, c.MaxConnsPerIP, c.MaxConns)
	}
	if c.MaxHeaderBytes < 1024 {
		return fmt.Errorf("%w: max header bytes %d is below 1024", ErrConfig, c.MaxHeaderBytes)
	}
	return nil
}

// validToken reports whether s is an HTTP token (RFC 9110 §5.6.2).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c < 0x80 && c > ' ' && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
