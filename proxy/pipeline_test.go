package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/internal/fugetest"
)

// scriptedOwner is an owner on loopback TCP whose connections the test
// reads and answers by hand: conns yields each accepted connection.
type scriptedOwner struct {
	addr  string
	conns chan *ownerConn
}

type ownerConn struct {
	net.Conn
	br *bufio.Reader
}

func startScriptedOwner(t *testing.T) *scriptedOwner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := &scriptedOwner{addr: ln.Addr().String(), conns: make(chan *ownerConn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(defaultTestTimeout))
			o.conns <- &ownerConn{Conn: c, br: bufio.NewReader(c)}
		}
	}()
	return o
}

// request reads one request from c and returns its path.
func (c *ownerConn) request(t *testing.T) string {
	t.Helper()
	req, err := http.ReadRequest(c.br)
	if err != nil {
		t.Fatalf("owner: reading a request: %v", err)
	}
	io.Copy(io.Discard, req.Body)
	return req.URL.Path
}

// answer200 is a 200 answer whose body is body, closing the connection
// after it if close.
func answer200(body string, close bool) string {
	conn := ""
	if close {
		conn = "Connection: close\r\n"
	}
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s", len(body), conn, body)
}

// pipeRequest is one request through a pipelining pool, as attempt makes
// it: acquire, then send or wait for the turn and read.
type pipeRequest struct {
	how  int
	body string
	keep bool
	err  error
}

func startPipeRequest(t *testing.T, p *connPool, method, path string) (how int, result <-chan pipeRequest) {
	t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI("http://owner" + path)
	w := appendRequest(nil, &req)
	var pipe []byte
	if isIdempotent(&req.Header) {
		pipe = w
	}
	turn := make(chan struct{}, 1)
	now := time.Now()
	c, how, err := p.acquire(now, now.Add(defaultTestTimeout), pipe, turn)
	if err != nil {
		t.Fatalf("acquire %s %s: %v", method, path, err)
	}
	out := make(chan pipeRequest, 1)
	go func() {
		resp := new(fasthttp.Response)
		var keep bool
		var err error
		if how == gotPipelined {
			<-turn
			keep, err = c.answerTurn(resp, false, now, defaultTestTimeout, now.Add(defaultTestTimeout))
		} else {
			keep, err = c.send(w, pipe != nil, resp, false, now, defaultTestTimeout, now.Add(defaultTestTimeout))
		}
		p.done(c, keep && err == nil, 0)
		out <- pipeRequest{how: how, body: string(resp.Body()), keep: keep, err: err}
	}()
	return how, out
}

// fastPool is a pool to addr that pipelines once conns connections are
// busy, up to depth, its owner taken as fast.
func fastPool(addr string, conns, depth int) *connPool {
	p := newPipelinedPool(addr, func(a string) (net.Conn, error) { return net.Dial("tcp", a) }, nil, time.Second, 16, conns, depth, nil)
	p.fastest = 0
	return p
}

// firstWritten waits until p's one busy connection has its first request
// written, so that requests may be pipelined behind it.
func firstWritten(t *testing.T, p *connPool) {
	t.Helper()
	fugetest.Eventually(t, "the first request written", locked(p, func() bool { return len(p.busy) == 1 && p.busy[0].pipeable.Load() }))
}

// pipelineBehind starts a GET of each path, each of which must be
// pipelined, and returns their results.
func pipelineBehind(t *testing.T, p *connPool, paths ...string) []<-chan pipeRequest {
	t.Helper()
	var rs []<-chan pipeRequest
	for _, path := range paths {
		how, r := startPipeRequest(t, p, "GET", path)
		if how != gotPipelined {
			t.Fatalf("GET %s: got %d, want it pipelined", path, how)
		}
		rs = append(rs, r)
	}
	return rs
}

// onNewConn starts a GET of path that must not be pipelined and returns its
// result and the owner's new connection, which has read it.
func onNewConn(t *testing.T, o *scriptedOwner, p *connPool, path string) (<-chan pipeRequest, *ownerConn) {
	t.Helper()
	how, r := startPipeRequest(t, p, "GET", path)
	if how == gotPipelined {
		t.Fatalf("GET %s was pipelined", path)
	}
	oc := recv(t, "the owner's new connection", o.conns)
	if got := oc.request(t); got != path {
		t.Fatalf("owner read %q on a new connection, want %s", got, path)
	}
	return r, oc
}

// TestPoolPipelines: with one connection busy, idempotent requests are
// written behind it up to the depth, each reads its own answer in turn
// though the owner answers them in one write, and the connection is idle
// again after the last. The request beyond the depth, and a POST, get a
// connection of their own.
func TestPoolPipelines(t *testing.T) {
	o := startScriptedOwner(t)
	p := fastPool(o.addr, 1, 3)
	r1, oc := onNewConn(t, o, p, "/a")
	firstWritten(t, p)
	rs := pipelineBehind(t, p, "/b", "/c")
	// The depth is reached: the next GET goes elsewhere.
	r4, oc2 := onNewConn(t, o, p, "/d")
	for _, want := range []string{"/b", "/c"} {
		if got := oc.request(t); got != want {
			t.Fatalf("owner read %q on the first connection, want %s", got, want)
		}
	}
	// All three answers in one write.
	io.WriteString(oc, answer200("a", false)+answer200("bb", false)+answer200("ccc", false))
	for i, r := range append([]<-chan pipeRequest{r1}, rs...) {
		got := recv(t, "an answer", r)
		if want := strings.Repeat(string(rune('a'+i)), i+1); got.err != nil || got.body != want || !got.keep {
			t.Fatalf("request %d: %+v, want body %q", i, got, want)
		}
	}
	io.WriteString(oc2, answer200("d", false))
	if got := recv(t, "the answer to /d", r4); got.err != nil || got.body != "d" {
		t.Fatalf("GET /d: %+v", got)
	}
	fugetest.Eventually(t, "both connections idle", locked(p, func() bool { return len(p.idle) == 2 && len(p.busy) == 0 && p.open == 2 }))

	// A POST on a busy connection: nothing goes behind it.
	hp, rp := startPipeRequest(t, p, "POST", "/p")
	if hp != gotIdle {
		t.Fatalf("POST: got %d, want an idle connection", hp)
	}
	pc := oc2 // the most recently used connection is taken first
	if got := pc.request(t); got != "/p" {
		t.Fatalf("owner read %q, want /p", got)
	}
	hg, rg := startPipeRequest(t, p, "GET", "/g")
	if hg == gotPipelined {
		t.Fatal("GET pipelined behind a POST")
	}
	if got := oc.request(t); got != "/g" {
		t.Fatalf("owner read %q on the other connection, want /g", got)
	}
	io.WriteString(pc, answer200("p", false))
	io.WriteString(oc, answer200("g", false))
	for _, r := range []<-chan pipeRequest{rp, rg} {
		if got := recv(t, "an answer", r); got.err != nil {
			t.Fatal(got.err)
		}
	}
}

// TestPoolPipelineBreaks: when the owner closes the connection after the
// first answer (Connection: close), the requests written behind it fail
// with errPipelineBroken (they were sent, and are not answered), the
// connection is closed, and its slot freed once the last is done.
func TestPoolPipelineBreaks(t *testing.T) {
	o := startScriptedOwner(t)
	p := fastPool(o.addr, 1, 4)
	r1, oc := onNewConn(t, o, p, "/a")
	firstWritten(t, p)
	rs := pipelineBehind(t, p, "/b", "/c")
	oc.request(t)
	oc.request(t)
	io.WriteString(oc, answer200("a", true))
	oc.Close()
	if got := recv(t, "the first answer", r1); got.err != nil || got.body != "a" || got.keep {
		t.Fatalf("first: %+v, want body a and no keep-alive", got)
	}
	for i, r := range rs {
		if got := recv(t, "a broken request's result", r); !errors.Is(got.err, errPipelineBroken) {
			t.Fatalf("request %d behind the close: %+v, want errPipelineBroken", i+1, got)
		}
	}
	fugetest.Eventually(t, "the slot freed", locked(p, func() bool { return p.open == 0 && len(p.busy) == 0 && len(p.all) == 0 }))
}

// TestPoolPipelinesOnlyFastOwners: the pool pipelines only after a window
// of answers whose fastest took at most pipeMax; a window of slow answers
// turns it off again.
func TestPoolPipelinesOnlyFastOwners(t *testing.T) {
	o := startScriptedOwner(t)
	p := newPipelinedPool(o.addr, func(a string) (net.Conn, error) { return net.Dial("tcp", a) }, nil, time.Second, 16, 1, 4, nil)
	pipelines := func() bool {
		r1, oc := onNewConn(t, o, p, "/a")
		firstWritten(t, p)
		how, r2 := startPipeRequest(t, p, "GET", "/b")
		if how != gotPipelined {
			oc2 := recv(t, "a second connection", o.conns)
			oc2.request(t)
			io.WriteString(oc2, answer200("b", true))
		} else {
			oc.request(t)
		}
		io.WriteString(oc, answer200("a", true))
		recv(t, "an answer", r1)
		recv(t, "an answer", r2)
		return how == gotPipelined
	}
	if pipelines() {
		t.Fatal("pipelined before any answer was timed")
	}
	window := func(svc time.Duration) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for range serviceWindow {
			p.sampleLocked(svc)
		}
	}
	window(time.Millisecond)
	p.mu.Lock()
	p.sampleLocked(time.Microsecond) // a fast answer opens a window, which decides nothing yet
	p.mu.Unlock()
	if pipelines() {
		t.Fatal("pipelined after a window of 1 ms answers")
	}
	window(50 * time.Microsecond) // that window closes, with 1 µs its fastest
	if !pipelines() {
		t.Fatal("not pipelined after a window with a 1 µs answer")
	}
	window(time.Millisecond) // closes the window the last 50 µs answer opened
	window(time.Millisecond) // a window of 1 ms answers alone
	if pipelines() {
		t.Fatal("pipelined after a window of 1 ms answers")
	}
}

// TestProxyPipelinesUnderLoad: many clients at once through one owner
// connection's worth of pipelining: every answer is its own request's.
func TestProxyPipelinesUnderLoad(t *testing.T) {
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) {
		ctx.SetBody(ctx.Request.Header.Peek(DefaultHeader))
	})
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.PipelineConns, c.PipelineDepth = 1, 8
	})
	pool := p.owners.get(o.addr).pool
	pool.mu.Lock()
	pool.pipeMax = time.Hour // whatever this machine's speed
	pool.mu.Unlock()
	const clients, each = 16, 100
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			c := &fasthttp.HostClient{Addr: p.Addr().String()}
			for j := range each {
				key := fmt.Sprintf("k%d-%d", i, j)
				var req fasthttp.Request
				var resp fasthttp.Response
				req.SetRequestURI("http://h/")
				req.Header.Set(DefaultHeader, key)
				if err := c.Do(&req, &resp); err != nil {
					errs <- err
					return
				}
				if resp.StatusCode() != 200 || string(resp.Body()) != key {
					errs <- fmt.Errorf("key %s: %d %q", key, resp.StatusCode(), resp.Body())
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := p.Stats()
	if s.Pipelined == 0 {
		t.Fatalf("no request was pipelined: %+v", s)
	}
	if s.UpstreamErrors != 0 || s.Retries != 0 {
		t.Fatalf("stats %+v", s)
	}
	t.Logf("%d of %d attempts pipelined", s.Pipelined, s.Attempts)
}
