package ownerguard

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// benchOwner returns an Owner (not started) whose view holds the whole ring
// as 64 arcs, each under its own generation, for an hour by the real
// monotonic clock: the checks cost what they cost in production, clock
// reads included.
func benchOwner(b *testing.B) *Owner {
	b.Helper()
	clock := clientshell.NewMonoClock()
	o, err := NewOwner(OwnerConfig{
		Managers: []string{"127.0.0.1:1"}, Namespace: testNS, Name: testName, Addr: testAddr,
		LeaseDuration: time.Hour, Clock: clock,
	})
	if err != nil {
		b.Fatal(err)
	}
	c := newCore(b, func(c *CoreConfig) { c.LeaseDuration = time.Hour })
	now := clock.Now()
	req := c.Start(now).Send
	const arcs = 64
	var grant []lease.Lease
	for i := uint64(0); i < arcs; i++ {
		step := ^uint64(0)/arcs + 1
		grant = append(grant, ls(rg(i*step, (i+1)*step), lease.Gen(100+i)))
	}
	m := &fakeMgr{nonce: mgrNonce}
	c.Step(m.reply(req, nil, grant), now)
	o.view.Store(c.View())
	o.setRoutingHeader(DefaultKeyHeader) // as the manager's first response names it
	if _, ok := o.GetOwnershipHandleKey(benchKey); !ok {
		b.Fatal("bench key not held")
	}
	return o
}

const benchKey = "device-4217"

// benchRW is a ResponseWriter that allocates nothing: net/http's own
// response allocates per request, and httptest.ResponseRecorder more, which
// would hide the guard's share.
type benchRW struct {
	h    http.Header
	code int
	n    int
}

func (w *benchRW) Header() http.Header  { return w.h }
func (w *benchRW) WriteHeader(code int) { w.code = code }
func (w *benchRW) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// fakeSTS stands in for grpc-go's server stream: the real one merges header
// metadata into a fresh map (grpc-go allocates there, guard or not).
type fakeSTS struct{}

func (fakeSTS) Method() string                  { return "/bench.Svc/Get" }
func (fakeSTS) SetHeader(metadata.MD) error     { return nil }
func (fakeSTS) SendHeader(metadata.MD) error    { return nil }
func (fakeSTS) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkMiddleware measures each guard against the bare handler it
// wraps, in the same run: the guard's cost is the difference between
// "<transport>" and "<transport>-bare". "check" is the part of it spent in
// the Owner: the two ownership checks (GetOwnershipHandle and
// CheckContinuousOwnership), each of which reads the monotonic clock.
// "net/http-nocontext" leaves the handle out of the request's context
// (GuardConfig.HTTPNoContext). "fasthttp-cookies" is a request with a
// Cookie header, on which the fasthttp guard looks the two header names up
// rather than walk the headers (see scanFast); compare it with
// "fasthttp-bare" too. The gRPC interceptor runs on a fake server stream
// (see fakeSTS).
func BenchmarkMiddleware(b *testing.B) {
	o := benchOwner(b)
	g, err := NewGuard(o, GuardConfig{Name: testName})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte("hello, device")

	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		hash := ring.HashString(benchKey)
		for b.Loop() {
			h, ok := o.GetOwnershipHandle(hash)
			if !ok || !o.CheckContinuousOwnership(h) {
				b.Fatal("not held")
			}
		}
	})

	ctVals := []string{"text/plain"}
	httpHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = ctVals
		_, _ = w.Write(body)
	})
	benchHTTP := func(name string, h http.Handler, wantGen bool) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			r := httptest.NewRequest(http.MethodGet, "/devices/4217", nil)
			r.Header.Set(DefaultKeyHeader, benchKey)
			w := &benchRW{h: make(http.Header)}
			for b.Loop() {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, r)
			}
			if w.code != http.StatusOK || (len(w.h[GenerationHeader]) == 1) != wantGen {
				b.Fatalf("status %d, header %v", w.code, w.h)
			}
		})
	}
	benchHTTP("net/http-bare", httpHandler, false)
	benchHTTP("net/http", g.HTTP(httpHandler), true)
	gNoCtx, err := NewGuard(o, GuardConfig{Name: testName, HTTPNoContext: true})
	if err != nil {
		b.Fatal(err)
	}
	benchHTTP("net/http-nocontext", gNoCtx.HTTP(httpHandler), true)

	fastHandler := func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentType("text/plain")
		ctx.Response.SetBody(body)
	}
	benchFast := func(name string, h fasthttp.RequestHandler, wantGen bool, cookies bool) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var ctx fasthttp.RequestCtx
			if cookies {
				// Parsed, as fasthttp's server leaves it: the cookies
				// not yet parsed.
				raw := "GET /devices/4217 HTTP/1.1\r\nHost: x\r\nCookie: session=0123456789abcdef; theme=dark\r\n" +
					DefaultKeyHeader + ": " + benchKey + "\r\n\r\n"
				if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
					b.Fatal(err)
				}
			} else {
				ctx.Request.Header.Set(DefaultKeyHeader, benchKey)
				ctx.Request.SetRequestURI("/devices/4217")
			}
			for b.Loop() {
				h(&ctx)
				// What fasthttp's server does between requests.
				ctx.Request.ResetUserValues()
				if ctx.Response.StatusCode() != fasthttp.StatusOK {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
				ctx.Response.Reset()
			}
			h(&ctx)
			if got := len(ctx.Response.Header.Peek(GenerationHeader)) > 0; got != wantGen {
				b.Fatalf("generation header present %v", got)
			}
		})
	}
	benchFast("fasthttp-bare", fastHandler, false, false)
	benchFast("fasthttp", g.FastHTTP(fastHandler), true, false)
	benchFast("fasthttp-cookies", g.FastHTTP(fastHandler), true, true)

	unary := func(ctx context.Context, req any) (any, error) { return req, nil }
	bare := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	benchGRPC := func(name string, icpt grpc.UnaryServerInterceptor) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), fakeSTS{})
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(
				":authority", "127.0.0.1", "content-type", "application/grpc",
				"user-agent", "grpc-go/1.85.0", "x-fuge-key", benchKey))
			info := &grpc.UnaryServerInfo{FullMethod: "/bench.Svc/Get"}
			for b.Loop() {
				if _, err := icpt(ctx, body, info, unary); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	benchGRPC("grpc-unary-bare", bare)
	benchGRPC("grpc-unary", g.UnaryServerInterceptor())
}
