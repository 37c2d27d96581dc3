package proxy

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// defaultTestTimeout bounds every wait in these tests.
const defaultTestTimeout = 20 * time.Second

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// fakeBalancer routes by a function that the test swaps, and signals each
// swap on Updated. It lists addrs (for pool pruning) and is ready once set
// (or at once, with newFakeBalancer).
type fakeBalancer struct {
	route atomic.Pointer[fakeRoute]
	mu    sync.Mutex
	upd   chan struct{}
	ready chan struct{}
}

type fakeRoute struct {
	pick  func(h uint64) (lb.Pick, bool)
	addrs []string
}

func newFakeBalancer(pick func(uint64) (lb.Pick, bool), addrs ...string) *fakeBalancer {
	b := &fakeBalancer{upd: make(chan struct{}), ready: make(chan struct{})}
	b.set(pick, addrs...)
	return b
}

// to routes every key to addr under gen.
func to(addr string, gen uint64) func(uint64) (lb.Pick, bool) {
	return func(uint64) (lb.Pick, bool) {
		return lb.Pick{Addr: addr, Range: ring.Full(), Gen: lease.Gen(gen)}, true
	}
}

func (b *fakeBalancer) set(pick func(uint64) (lb.Pick, bool), addrs ...string) {
	b.route.Store(&fakeRoute{pick, addrs})
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.upd)
	b.upd = make(chan struct{})
	select {
	case <-b.ready:
	default:
		close(b.ready)
	}
}

func (b *fakeBalancer) Pick(h uint64) (lb.Pick, bool) { return b.route.Load().pick(h) }
func (b *fakeBalancer) Addrs() []string               { return b.route.Load().addrs }
func (b *fakeBalancer) Ready() <-chan struct{}        { return b.ready }
func (b *fakeBalancer) Updated() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.upd
}

// testOwner is a fake owner: a fasthttp server on 127.0.0.1.
type testOwner struct {
	name string
	addr string
	hits atomic.Int64
}

// startOwner serves h, or by default answers 200 with the owner's name as
// body, Fuge-Owner, and echoes what it received: Got-Generation (the
// Fuge-Generation header), Got-Key, Got-XFF.
func startOwner(t testing.TB, name string, h fasthttp.RequestHandler) *testOwner {
	t.Helper()
	o := &testOwner{name: name}
	if h == nil {
		h = func(ctx *fasthttp.RequestCtx) {
			ctx.Response.Header.Set("Fuge-Owner", name)
			ctx.Response.Header.SetBytesV("Got-Generation", ctx.Request.Header.Peek(GenerationHeader))
			ctx.Response.Header.SetBytesV("Got-Key", ctx.Request.Header.Peek(DefaultHeader))
			ctx.SetBodyString(name)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { o.hits.Add(1); h(ctx) }}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return o
}

// startProxy starts a proxy on 127.0.0.1 with mut applied to its config,
// and shuts it down at cleanup.
func startProxy(t testing.TB, mut func(*Config)) *Proxy {
	t.Helper()
	cfg := Config{
		ListenAddr: "127.0.0.1:0",
		AdminAddr:  "127.0.0.1:0",
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	mut(&cfg)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return p
}

// newClient returns an HTTP client whose connections are closed at cleanup.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: defaultTestTimeout}
}

// do sends a request with the given header pairs and returns the response
// with its body read.
func do(t testing.TB, c *http.Client, method, url, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// raw writes a request verbatim on a new connection and reads one response.
// The write runs concurrently with the read, so a server that answers
// before reading everything (431, 413) is still heard.
func raw(t testing.TB, addr, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(defaultTestTimeout))
	go io.WriteString(conn, request)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// recv waits for a value on ch or fails.
func recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(defaultTestTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
