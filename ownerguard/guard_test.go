package ownerguard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// fakeChecker holds keys under generations; tests take them away while a
// handler runs.
type fakeChecker struct {
	mu   sync.Mutex
	held map[uint64]lease.Gen
}

func newFakeChecker(held map[string]lease.Gen) *fakeChecker {
	f := &fakeChecker{held: map[uint64]lease.Gen{}}
	for k, g := range held {
		f.held[ring.HashString(k)] = g
	}
	return f
}

func (f *fakeChecker) GetOwnershipHandle(hash uint64) (ownerguard.Handle, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.held[hash]
	if !ok {
		return ownerguard.Handle{}, false
	}
	return ownerguard.Handle{Key: hash, Range: ring.Full(), Gen: g}, true
}

func (f *fakeChecker) CheckContinuousOwnership(h ownerguard.Handle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.held[h.Key]
	return ok && g == h.Gen
}

// lose drops key, as a recall or an expiry would.
func (f *fakeChecker) lose(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.held, ring.HashString(key))
}

const (
	guardName = "srv-a"
	heldKey   = "device-7" // held under generation heldGen
	heldGen   = 7
	otherKey  = "device-9" // not held
)

func newTestGuard(t *testing.T, fc ownerguard.Checker, mut func(*ownerguard.GuardConfig)) *ownerguard.Guard {
	t.Helper()
	cfg := ownerguard.GuardConfig{Name: guardName}
	if mut != nil {
		mut(&cfg)
	}
	g, err := ownerguard.NewGuard(fc, cfg)
	if err != nil {
		t.Fatalf("NewGuard: %v", err)
	}
	return g
}

// guardCall is one request to a guarded server: the values of the routing
// header and of Fuge-Generation, each sent as its own header line.
type guardCall struct {
	keys, gens []string
}

// guardResult is what the client saw, in HTTP terms. gRPC answers are
// mapped: OK is 200, InvalidArgument 400, Unavailable 421 if IsMisdirected
// and the fuge-misdirected trailer is "1", else 503.
type guardResult struct {
	code       int
	gen, owner string // Fuge-Generation and Fuge-Owner
	retryAfter string // HTTP only
	body       string // the body, the gRPC reply's text, or its status message
	fromApp    bool   // the handler's own header is present (HTTP only)
}

// appHandler is the application under test: given the handle found in its
// context, it returns the body to answer with. It runs in the handler.
type appHandler func(h ownerguard.Handle, ok bool) string

// transport starts a guarded server running app and returns a client.
type transport struct {
	name  string
	http  bool
	start func(t *testing.T, g *ownerguard.Guard, app appHandler) func(guardCall) guardResult
}

var transports = []transport{
	{"net/http", true, startHTTP},
	{"fasthttp", true, startFastHTTP},
	{"grpc-unary", false, startGRPCUnary},
	{"grpc-stream", false, startGRPCStream},
}

const appHeader = "X-App"

func startHTTP(t *testing.T, g *ownerguard.Guard, app appHandler) func(guardCall) guardResult {
	srv := httptest.NewServer(g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := ownerguard.HandleFromContext(r.Context())
		if h2, ok2 := ownerguard.HandleFromResponseWriter(w); h2 != h || ok2 != ok {
			t.Errorf("HandleFromResponseWriter = %v %v, context has %v %v", h2, ok2, h, ok)
		}
		body := app(h, ok)
		w.Header().Set(appHeader, "1")
		_, _ = io.WriteString(w, body)
	})))
	t.Cleanup(srv.Close)
	return httpClient(t, srv.URL)
}

func httpClient(t *testing.T, url string) func(guardCall) guardResult {
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	return func(c guardCall) guardResult {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.keys != nil {
			req.Header[ownerguard.DefaultKeyHeader] = c.keys
		}
		if c.gens != nil {
			req.Header[ownerguard.GenerationHeader] = c.gens
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading body: %v", err)
		}
		return guardResult{
			code:       resp.StatusCode,
			gen:        resp.Header.Get(ownerguard.GenerationHeader),
			owner:      resp.Header.Get(ownerguard.OwnerHeader),
			retryAfter: resp.Header.Get("Retry-After"),
			body:       string(body),
			fromApp:    resp.Header.Get(appHeader) != "",
		}
	}
}

// TestGuardRules runs every admission and after-check rule on every
// transport.
func TestGuardRules(t *testing.T) {
	type want struct {
		code       int
		gen        string // "" for none
		body       string // a substring of the body or status message
		handlerRan bool
	}
	cases := []struct {
		name   string
		call   guardCall
		during func(fc *fakeChecker) // run inside the handler
		want   want
	}{
		{"held", guardCall{keys: []string{heldKey}}, nil, want{200, "7", "ok gen 7", true}},
		{"generation equal", guardCall{keys: []string{heldKey}, gens: []string{"7"}}, nil, want{200, "7", "ok gen 7", true}},
		{"generation older", guardCall{keys: []string{heldKey}, gens: []string{"3"}}, nil, want{200, "7", "ok gen 7", true}},
		{"generation zero", guardCall{keys: []string{heldKey}, gens: []string{"0"}}, nil, want{200, "7", "ok gen 7", true}},
		{"missing key", guardCall{}, nil, want{400, "", "missing routing", false}},
		{"empty key", guardCall{keys: []string{""}}, nil, want{400, "", "missing routing", false}},
		{"repeated key", guardCall{keys: []string{heldKey, heldKey}}, nil, want{400, "", "repeated routing", false}},
		{"not held", guardCall{keys: []string{otherKey}}, nil, want{421, "", "key not held by srv-a", false}},
		{"generation newer", guardCall{keys: []string{heldKey}, gens: []string{"8"}}, nil, want{421, "7", "has not heard of its grant", false}},
		{"generation malformed", guardCall{keys: []string{heldKey}, gens: []string{"7a"}}, nil, want{400, "", "malformed", false}},
		{"generation empty", guardCall{keys: []string{heldKey}, gens: []string{""}}, nil, want{400, "", "malformed", false}},
		{"generation negative", guardCall{keys: []string{heldKey}, gens: []string{"-1"}}, nil, want{400, "", "malformed", false}},
		{"generation overflow", guardCall{keys: []string{heldKey}, gens: []string{"18446744073709551616"}}, nil, want{400, "", "malformed", false}},
		{"generation repeated", guardCall{keys: []string{heldKey}, gens: []string{"7", "7"}}, nil, want{400, "", "malformed", false}},
		{"malformed generation before ownership", guardCall{keys: []string{otherKey}, gens: []string{"x"}}, nil, want{400, "", "malformed", false}},
		{"lost during handler", guardCall{keys: []string{heldKey}}, func(fc *fakeChecker) { fc.lose(heldKey) }, want{503, "", "lease lost", true}},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
					var ran atomic.Bool
					call := tr.start(t, newTestGuard(t, fc, nil), func(h ownerguard.Handle, ok bool) string {
						ran.Store(true)
						if !ok || h.Key != ring.HashString(heldKey) || h.Gen != heldGen {
							t.Errorf("handler got handle %+v %v, want key %x gen %d", h, ok, ring.HashString(heldKey), heldGen)
						}
						if tc.during != nil {
							tc.during(fc)
						}
						return "ok gen " + strconv.FormatUint(uint64(h.Gen), 10)
					})
					got := call(tc.call)
					if got.code != tc.want.code || !strings.Contains(got.body, tc.want.body) {
						t.Errorf("got %d %q, want %d containing %q", got.code, got.body, tc.want.code, tc.want.body)
					}
					if ran.Load() != tc.want.handlerRan {
						t.Errorf("handler ran: %v, want %v", ran.Load(), tc.want.handlerRan)
					}
					if got.owner != guardName {
						t.Errorf("owner header %q, want %q", got.owner, guardName)
					}
					// gRPC sends the header metadata set before the
					// handler ran even when the reply is replaced.
					if tr.http || tc.want.code != 503 {
						if got.gen != tc.want.gen {
							t.Errorf("generation header %q, want %q", got.gen, tc.want.gen)
						}
					}
					if tr.http {
						if fromApp := got.fromApp; fromApp != (tc.want.code == 200) {
							t.Errorf("handler's header present: %v, want %v", fromApp, tc.want.code == 200)
						}
						wantRetry := ""
						if tc.want.code == 503 {
							wantRetry = "1"
						}
						if got.retryAfter != wantRetry {
							t.Errorf("Retry-After %q, want %q", got.retryAfter, wantRetry)
						}
					}
				})
			}
		})
	}
}

// TestGuardKeyFunctions: a key function replaces the header, per transport.
func TestGuardKeyFunctions(t *testing.T) {
	fromPath := func(path string) (string, bool) {
		k, ok := strings.CutPrefix(path, "/devices/")
		return k, ok
	}
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	g := newTestGuard(t, fc, func(c *ownerguard.GuardConfig) {
		c.HTTPKey = func(r *http.Request) (string, bool) { return fromPath(r.URL.Path) }
		c.FastHTTPKey = func(ctx *fasthttp.RequestCtx) ([]byte, bool) {
			k, ok := fromPath(string(ctx.Path()))
			return []byte(k), ok
		}
		c.GRPCKey = func(ctx context.Context, method string) (string, bool) {
			if v := metadata.ValueFromIncomingContext(ctx, "device"); len(v) == 1 {
				return v[0], true
			}
			return "", false
		}
	})
	ok := func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }
	httpSrv := httptest.NewServer(g.HTTP(http.HandlerFunc(ok)))
	t.Cleanup(httpSrv.Close)
	fastAddr := serveFastHTTP(t, g.FastHTTP(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }))
	for _, base := range []string{httpSrv.URL, "http://" + fastAddr} {
		for path, want := range map[string]int{
			"/devices/" + heldKey:  200,
			"/devices/" + otherKey: 421,
			"/devices/":            400, // empty key
			"/other":               400,
		} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s%s: %d %q, want %d", base, path, resp.StatusCode, body, want)
			}
			if want == 400 && !strings.Contains(string(body), "no routing key") {
				t.Errorf("%s%s: body %q does not say there is no key", base, path, body)
			}
		}
	}

	client := serveGRPC(t, g, &testService{app: func(ownerguard.Handle, bool) string { return "ok" }})
	for dev, want := range map[string]codes.Code{heldKey: codes.OK, otherKey: codes.Unavailable, "": codes.InvalidArgument} {
		ctx := context.Background()
		if dev != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "device", dev, "x-fuge-key", otherKey)
		}
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if status.Code(err) != want {
			t.Errorf("gRPC device %q: %v, want %v", dev, err, want)
		}
	}
}

// TestGuardConfig: NewGuard validates, and *Owner is a Checker.
func TestGuardConfig(t *testing.T) {
	var _ ownerguard.Checker = (*ownerguard.Owner)(nil)
	fc := newFakeChecker(nil)
	if _, err := ownerguard.NewGuard(nil, ownerguard.GuardConfig{}); !errors.Is(err, ownerguard.ErrNilChecker) {
		t.Errorf("nil checker: %v", err)
	}
	for _, cfg := range []ownerguard.GuardConfig{
		{Header: "X Key"},
		{Header: "x-key-bin"},
		{Header: "X-Key:"},
		{Name: "a\nb"},
		{RetryAfter: -time.Second},
		{MaxBufferedBody: -1},
	} {
		if _, err := ownerguard.NewGuard(fc, cfg); !errors.Is(err, ownerguard.ErrGuardConfig) {
			t.Errorf("NewGuard(%+v) = %v, want ErrGuardConfig", cfg, err)
		}
	}
	def := ownerguard.DefaultGuardConfig()
	if def.Header != ownerguard.DefaultKeyHeader || def.RetryAfter != time.Second || def.MaxBufferedBody != 4<<20 {
		t.Errorf("DefaultGuardConfig() = %+v", def)
	}
	if err := def.Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}

// TestIsMisdirected separates the guard's refusals from other errors.
func TestIsMisdirected(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "fuge: misdirected: key not held by x"), true},
		{status.Error(codes.Unavailable, "fuge: lease lost during the request"), false},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{status.Error(codes.FailedPrecondition, "fuge: misdirected"), false},
		{errors.New("fuge: misdirected"), false},
		{nil, false},
	} {
		if got := ownerguard.IsMisdirected(tc.err); got != tc.want {
			t.Errorf("IsMisdirected(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A backend guards its handlers with the Owner that holds its leases: a
// request for a key held elsewhere is refused with 421 before the handler
// runs, and an answer made while the lease was lost becomes a 503.
func ExampleGuard_HTTP() {
	owner, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers:  []string{"127.0.0.1:7400"},
		Namespace: "presence", Name: "presence-1", Addr: "127.0.0.1:8081",
	})
	if err != nil {
		panic(err)
	}
	if err := owner.Start(context.Background()); err != nil {
		panic(err)
	}
	defer owner.Close()
	guard, err := ownerguard.NewGuard(owner, ownerguard.GuardConfig{Name: "presence-1"})
	if err != nil {
		panic(err)
	}
	http.Handle("/devices/", guard.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, _ := ownerguard.HandleFromContext(r.Context())
		// Store h with any state created for the key; check it with
		// owner.CheckContinuousOwnership before trusting that state again.
		_, _ = io.WriteString(w, "served under generation "+strconv.FormatUint(uint64(h.Gen), 10)+"\n")
	})))
	_ = http.ListenAndServe("127.0.0.1:8081", nil)
}
