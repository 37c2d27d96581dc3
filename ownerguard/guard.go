package ownerguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/lease"
)

// Checker is what the middleware asks about ownership: the two checks of
// PRS §2.2. *Owner implements it; tests may use a fake. Both methods are
// called from request goroutines concurrently and should neither block nor
// allocate.
type Checker interface {
	GetOwnershipHandle(keyHash uint64) (Handle, bool)
	CheckContinuousOwnership(h Handle) bool
}

var _ Checker = (*Owner)(nil)

// Headers of the middleware. HTTP names are given in canonical form; gRPC
// uses the same names in lower case as metadata keys.
const (
	// DefaultKeyHeader is the routing header whose value is the key (gRPC
	// metadata key "x-fuge-key").
	DefaultKeyHeader = "X-Fuge-Key"
	// GenerationHeader, on a request, is the generation under which the
	// router saw the key's range (decimal); on a response, the generation
	// the answer was served under (gRPC: "fuge-generation" header metadata).
	GenerationHeader = "Fuge-Generation"
	// OwnerHeader, on a response, is GuardConfig.Name of the server that
	// answered (gRPC: "fuge-owner" header metadata).
	OwnerHeader = "Fuge-Owner"
	// LostHeader, with value "1", marks the 503 a guard answers in place of
	// a response computed while the key's lease was lost: nothing of the
	// handler's answer went out, so a router may retry an idempotent
	// request elsewhere.
	LostHeader = "Fuge-Lost"
	// MisdirectedTrailer is the gRPC trailer, with value "1", on an RPC a
	// guard refused because the key is not held here (see IsMisdirected).
	MisdirectedTrailer = "fuge-misdirected"
)

// Defaults of GuardConfig.
const (
	DefaultRetryAfter      = time.Second
	DefaultMaxBufferedBody = 4 << 20
)

// Errors of the middleware.
var (
	ErrNilChecker  = errors.New("ownerguard: guard needs a Checker")
	ErrGuardConfig = errors.New("ownerguard: invalid guard config")
	// ErrOwnershipLost is returned by the net/http ResponseWriter's Write,
	// Flush and Hijack, and by a guarded gRPC stream's SendMsg (as the
	// status error, see the package documentation), once the key's lease
	// was found lost during the request.
	ErrOwnershipLost = errors.New("ownerguard: lease lost during the request")
)

// GuardConfig configures a Guard. Zero values mean the documented defaults.
type GuardConfig struct {
	// Header is the routing header whose value is the key. It must be a
	// token of letters, digits, '-', '_' and '.', and not end in "-bin";
	// gRPC reads it in lower case. Empty means the namespace's, when the
	// Checker is an *Owner: the manager names it in every response
	// (Owner.RoutingHeader), and until the Owner has heard it the guard
	// refuses every request as not held (421), which it is; with any other
	// Checker, empty means DefaultKeyHeader.
	Header string
	// HTTPKey, FastHTTPKey and GRPCKey, when set, replace the header for
	// their transport: they return the key of a request, or false if it
	// has none. They are called concurrently, once per request, and
	// should not allocate. An empty key counts as none.
	HTTPKey     func(r *http.Request) (key string, ok bool)
	FastHTTPKey func(ctx *fasthttp.RequestCtx) (key []byte, ok bool)
	GRPCKey     func(ctx context.Context, fullMethod string) (key string, ok bool)
	// Name is this server's name (its ring hash_key, as a rule), stamped as
	// OwnerHeader on every answer. Empty means none. Printable ASCII.
	Name string
	// RetryAfter is sent, rounded up to whole seconds, as Retry-After on
	// the 503 that replaces an answer when the lease was lost during the
	// request. Zero means DefaultRetryAfter (1 s).
	RetryAfter time.Duration
	// HTTPNoContext, if true, leaves the handle out of the net/http
	// request's context. Attaching it costs an allocation per request (a
	// copy of the request, as http.Request.WithContext makes, with the
	// context node, about 350 bytes); without it the guard allocates
	// nothing, and handlers read the handle with HandleFromResponseWriter,
	// which works either way.
	HTTPNoContext bool
	// MaxBufferedBody is the largest response body, in bytes, that the
	// net/http guard buffers so that it can still replace the answer after
	// the handler. A larger response is streamed from the point where it
	// outgrows the buffer (see the package documentation for what happens
	// when the lease is then lost). Zero means DefaultMaxBufferedBody
	// (4 MiB).
	MaxBufferedBody int
}

// DefaultGuardConfig returns a config with every default filled in.
func DefaultGuardConfig() GuardConfig { return GuardConfig{}.withDefaults() }

func (c GuardConfig) withDefaults() GuardConfig {
	if c.Header == "" {
		c.Header = DefaultKeyHeader
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.MaxBufferedBody == 0 {
		c.MaxBufferedBody = DefaultMaxBufferedBody
	}
	return c
}

// Validate reports the first problem with c, after defaults. Errors wrap
// ErrGuardConfig.
func (c GuardConfig) Validate() error {
	c = c.withDefaults()
	if !validHeaderName(c.Header) || strings.HasSuffix(strings.ToLower(c.Header), "-bin") {
		return fmt.Errorf("%w: header %q must be letters, digits, '-', '_' or '.', not ending in -bin", ErrGuardConfig, c.Header)
	}
	for i := 0; i < len(c.Name); i++ {
		if b := c.Name[i]; b < 0x20 || b > 0x7e {
			return fmt.Errorf("%w: name %q must be printable ASCII", ErrGuardConfig, c.Name)
		}
	}
	if c.RetryAfter < 0 {
		return fmt.Errorf("%w: RetryAfter %v must not be negative", ErrGuardConfig, c.RetryAfter)
	}
	if c.MaxBufferedBody < 0 {
		return fmt.Errorf("%w: MaxBufferedBody %d must not be negative", ErrGuardConfig, c.MaxBufferedBody)
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_', b == '.':
		default:
			return false
		}
	}
	return true
}

// Guard is the ownership middleware for net/http, fasthttp and gRPC (see
// the package documentation, "Middleware"). It is safe for concurrent use;
// one Guard may wrap any number of handlers.
type Guard struct {
	c   Checker
	o   *Owner // c, when it is an *Owner: called directly, not through the interface
	cfg GuardConfig

	// keys is the routing header in force; nil while the guard follows
	// its Owner's namespace and the Owner has not heard it yet.
	keys atomic.Pointer[keySpec]

	// Precomputed header keys and values, shared by every response (they
	// are never modified in place).
	ownerVals  []string // nil if no Name
	ownerBytes []byte
	retryVals  []string
	retryBytes []byte
	textPlain  []string
	nosniff    []string
	fast       fastHeaders
	ownerMD    metadata.MD // fuge-owner, or empty
	missMD     metadata.MD // fuge-misdirected: 1

	// Bodies of the guard's own answers (HTTP) and their gRPC statuses.
	bodyNoKeyFunc, bodyBadGen, bodyNotHeld, bodyTooNew, bodyLost []byte
	errNoKeyFunc, errBadGen, errNotHeld, errTooNew, errLost      error

	gens    genCache
	writers sync.Pool // *httpWriter
	boxes   sync.Pool // *handleBox
}

// NewGuard returns a Guard that asks c about ownership.
func NewGuard(c Checker, cfg GuardConfig) (*Guard, error) {
	if c == nil {
		return nil, ErrNilChecker
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	owner, isOwner := c.(*Owner)
	follow := cfg.Header == "" && isOwner
	cfg = cfg.withDefaults()
	g := &Guard{
		c:       c,
		cfg:     cfg,
		fast:    newFastHeaders(),
		missMD:  metadata.Pairs(MisdirectedTrailer, "1"),
		ownerMD: metadata.MD{},
	}
	secs := strconv.FormatInt(int64((cfg.RetryAfter+time.Second-1)/time.Second), 10)
	g.retryVals, g.retryBytes = []string{secs}, []byte(secs)
	who := "this server"
	if cfg.Name != "" {
		who = cfg.Name
		g.ownerVals, g.ownerBytes = []string{cfg.Name}, []byte(cfg.Name)
		g.ownerMD = metadata.Pairs(ownerKey, cfg.Name)
	}
	g.textPlain, g.nosniff = []string{"text/plain; charset=utf-8"}, []string{"nosniff"}
	g.bodyNoKeyFunc = []byte("fuge: no routing key in the request\n")
	g.bodyBadGen = []byte("fuge: malformed " + GenerationHeader + " header\n")
	g.bodyNotHeld = []byte("fuge: key not held by " + who + "\n")
	g.bodyTooNew = []byte("fuge: key held by " + who + " under an older generation: server has not heard of its grant yet\n")
	g.bodyLost = []byte("fuge: lease lost during the request\n")
	g.errNoKeyFunc = status.Error(codes.InvalidArgument, "fuge: no routing key in the request")
	g.errBadGen = status.Error(codes.InvalidArgument, "fuge: malformed "+genKey+" metadata")
	g.errNotHeld = status.Error(codes.Unavailable, misdirectedPrefix+": key not held by "+who)
	g.errTooNew = status.Error(codes.Unavailable, misdirectedPrefix+": key held by "+who+" under an older generation: server has not heard of its grant yet")
	g.errLost = status.Error(codes.Unavailable, "fuge: lease lost during the request")
	g.o = owner
	if follow {
		owner.watchRoutingHeader(func(h string) { g.keys.Store(newKeySpec(h)) })
	} else {
		g.keys.Store(newKeySpec(cfg.Header))
	}
	g.writers.New = func() any { return &httpWriter{g: g} }
	g.boxes.New = func() any { return &handleBox{pool: &g.boxes} }
	return g, nil
}

// keySpec is a routing header with the guard's answers about it.
type keySpec struct {
	httpKey      string // canonical form
	grpcKey      string // lower case
	bodyNoKey    []byte
	bodyRepeated []byte
	errNoKey     error
	errRepeated  error
}

func newKeySpec(header string) *keySpec {
	k := &keySpec{httpKey: http.CanonicalHeaderKey(header), grpcKey: strings.ToLower(header)}
	k.bodyNoKey = []byte("fuge: missing routing header " + k.httpKey + "\n")
	k.bodyRepeated = []byte("fuge: repeated routing header " + k.httpKey + "\n")
	k.errNoKey = status.Error(codes.InvalidArgument, "fuge: missing routing metadata "+k.grpcKey)
	k.errRepeated = status.Error(codes.InvalidArgument, "fuge: repeated routing metadata "+k.grpcKey)
	return k
}

// RoutingHeader is the header the guard reads the key from: GuardConfig's,
// or the namespace's as its Owner heard it ("" until then).
func (g *Guard) RoutingHeader() string {
	if k := g.keys.Load(); k != nil {
		return k.httpKey
	}
	return ""
}

// gRPC metadata keys.
const (
	genKey            = "fuge-generation"
	ownerKey          = "fuge-owner"
	misdirectedPrefix = "fuge: misdirected"
)

// verdict is the outcome of admitting a request.
type verdict uint8

const (
	admitted    verdict = iota
	noKey               // 400
	repeatedKey         // 400
	badGen              // 400
	notHeld             // 421
	tooNew              // 421
)

// admit runs the ownership checks before the handler, on the hash of a key
// and the generation the request carries (0 if none); the caller has
// already refused a missing or repeated key and a malformed generation.
func (g *Guard) admit(keyHash uint64, reqGen lease.Gen) (Handle, verdict) {
	var h Handle
	var ok bool
	if g.o != nil {
		h, ok = g.o.GetOwnershipHandle(keyHash)
	} else {
		h, ok = g.c.GetOwnershipHandle(keyHash)
	}
	if !ok {
		return Handle{}, notHeld
	}
	if reqGen > h.Gen {
		return h, tooNew
	}
	if g.o != nil {
		g.o.CountRequest(keyHash)
	}
	return h, admitted
}

// held is the check after (and, for streams, during) the handler:
// CheckContinuousOwnership on h.
func (g *Guard) held(h Handle) bool {
	if g.o != nil {
		return g.o.CheckContinuousOwnership(h)
	}
	return g.c.CheckContinuousOwnership(h)
}

// parseGen parses a decimal generation: digits only, no sign, no spaces,
// at most math.MaxUint64. It does not allocate.
func parseGen[S string | []byte](s S) (lease.Gen, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i]) - '0'
		if d > 9 || n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return lease.Gen(n), true
}

// genEntry holds a generation's response values in every transport's form.
type genEntry struct {
	gen   lease.Gen
	vals  []string    // net/http header value
	bytes []byte      // fasthttp header value
	md    metadata.MD // gRPC header metadata: fuge-generation and fuge-owner
}

// genCache maps generations to their formatted values, so that stamping a
// response does not allocate once a generation has been seen. It is direct
// mapped and lock-free: a miss formats the generation and replaces the
// slot. A server holds few generations at a time, and they change only when
// its leases do.
type genCache [256]atomic.Pointer[genEntry]

func (g *Guard) gen(gen lease.Gen) *genEntry {
	slot := &g.gens[uint64(gen)%uint64(len(g.gens))]
	if e := slot.Load(); e != nil && e.gen == gen {
		return e
	}
	s := strconv.FormatUint(uint64(gen), 10)
	e := &genEntry{gen: gen, vals: []string{s}, bytes: []byte(s), md: metadata.Pairs(genKey, s)}
	if g.cfg.Name != "" {
		e.md[ownerKey] = []string{g.cfg.Name}
	}
	slot.Store(e)
	return e
}

// handleKey is the context key of the handle.
type handleKey struct{}

// handleCtx carries the handle to a net/http or gRPC handler: one
// allocation, where context.WithValue would take two.
type handleCtx struct {
	context.Context
	h Handle
}

func (c *handleCtx) Value(key any) any {
	if _, ok := key.(handleKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// handleBox carries the handle to a fasthttp handler as a user value. It
// goes back to its pool when fasthttp closes the request's user values.
type handleBox struct {
	h    Handle
	pool *sync.Pool
}

// Close returns the box to its pool; fasthttp calls it when it resets the
// request's user values, after the response is written.
func (b *handleBox) Close() error {
	b.h = Handle{}
	b.pool.Put(b)
	return nil
}

// HandleFromContext returns the handle a guard admitted the request under:
// from a net/http request's Context, a gRPC handler's context (or a stream's
// Context), or a *fasthttp.RequestCtx (which is a context.Context).
func HandleFromContext(ctx context.Context) (Handle, bool) {
	switch v := ctx.Value(handleKey{}).(type) {
	case *handleCtx:
		return v.h, true
	case *handleBox:
		return v.h, true
	}
	return Handle{}, false
}

// HandleFromFastHTTP returns the handle a guard admitted the request under.
// It is valid until the response has been written.
func HandleFromFastHTTP(ctx *fasthttp.RequestCtx) (Handle, bool) {
	if b, ok := ctx.UserValue(handleKey{}).(*handleBox); ok {
		return b.h, true
	}
	return Handle{}, false
}

// IsMisdirected reports whether err, returned to a gRPC client, is a guard's
// refusal of an RPC for a key the server does not hold (or holds under an
// older generation than the client saw): codes.Unavailable with a message
// starting "fuge: misdirected". Such an RPC never reached the handler, so
// it is safe to retry on another server, even if it is not idempotent.
//
// It also looks inside wrapped errors, for the one case grpc-go wraps: a
// retry policy (an xDS route's, say) that ran out of attempts returns "max
// retries exhausted: ..." wrapping its last attempt's status. If that last
// attempt was a refusal, so was every earlier one as far as the policy
// could tell: it retries only an attempt that failed before any response
// header, with a retryable code (see grpc-go's retry rules for what a
// transport failure means there).
func IsMisdirected(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		se, ok := e.(interface{ GRPCStatus() *status.Status })
		if !ok {
			continue
		}
		if s := se.GRPCStatus(); s.Code() == codes.Unavailable && strings.HasPrefix(s.Message(), misdirectedPrefix) {
			return true
		}
	}
	return false
}
