package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/internal/fugetest"
)

// TestLargeBodies: bodies larger than a socket's buffer go both ways whole
// (the request's write no longer fits one system call, the answer takes
// many reads), by Content-Length and by chunks.
func TestLargeBodies(t *testing.T) {
	const size = 3 << 20
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	sum := fmt.Sprintf("%x", sha256.Sum256(body))
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Got-Sum", fmt.Sprintf("%x", sha256.Sum256(ctx.Request.Body())))
		if string(ctx.Request.Header.Peek("Want-Chunks")) == "1" {
			ctx.SetBodyStream(bytes.NewReader(body), -1) // chunked
			return
		}
		ctx.SetBody(body)
	})
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr) })
	c := newClient(t)
	for _, chunks := range []string{"0", "1"} {
		resp, got := do(t, c, "POST", "http://"+p.Addr().String()+"/", string(body), DefaultHeader, "k", "Want-Chunks", chunks)
		if resp.StatusCode != 200 || resp.Header.Get("Got-Sum") != sum || len(got) != size || got != string(body) {
			t.Fatalf("chunks %s: %d, owner got sum %s (want %s), %d bytes back", chunks, resp.StatusCode, resp.Header.Get("Got-Sum"), sum, len(got))
		}
	}
}

// TestOwnerConnectionReuse: a pooled connection carries request after
// request; one the owner marks Connection: close, or one whose answer ran
// to the end of the connection, is not reused.
func TestOwnerConnectionReuse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan int, 64)
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- n
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var req fasthttp.Request
					if err := req.Read(br); err != nil {
						return
					}
					switch string(req.Header.Peek("Answer")) {
					case "close":
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nclose")
						return
					case "eof":
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n\r\nto the end")
						return
					default:
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nkeep")
					}
				}
			}(c)
		}
	}()
	addr := ln.Addr().String()
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(addr, 1), addr) })
	c := newClient(t)
	url := "http://" + p.Addr().String() + "/"
	for i, step := range []struct{ answer, body string }{
		{"keep", "keep"}, {"keep", "keep"}, {"close", "close"}, {"keep", "keep"}, {"eof", "to the end"}, {"keep", "keep"},
	} {
		resp, body := do(t, c, "GET", url, "", DefaultHeader, "k", "Answer", step.answer)
		if resp.StatusCode != 200 || body != step.body {
			t.Fatalf("request %d (%s): %d %q", i, step.answer, resp.StatusCode, body)
		}
	}
	// One connection for the first three, a new one after close, another
	// after the end-of-connection answer.
	if n := len(conns); n != 3 {
		t.Fatalf("the owner accepted %d connections, want 3", n)
	}
	if s := p.Stats(); s.UpstreamErrors != 0 || s.Retries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPoolIdleExpiry: a connection idle longer than ownerIdleTimeout is
// closed when the pool next hands one out, and a fresh one is dialled.
func TestPoolIdleExpiry(t *testing.T) {
	var dialled []net.Conn
	p := newPool("owner:1", func(string) (net.Conn, error) {
		a := pipeConn(t)
		dialled = append(dialled, a)
		return a, nil
	}, nil, time.Second, 2)
	now := time.Now()
	c1, idle, err := p.get(now, now.Add(time.Second))
	if err != nil || idle {
		t.Fatalf("first get: idle %v, %v", idle, err)
	}
	c1.readTime.Store(int64(now.Sub(epoch)))
	p.put(c1)
	if c, idle, err := p.get(now.Add(ownerIdleTimeout/2), now.Add(time.Second)); err != nil || !idle || c != c1 {
		t.Fatalf("get after a short idle: %p idle %v %v, want the pooled %p", c, idle, err, c1)
	}
	p.put(c1)
	later := now.Add(ownerIdleTimeout + time.Second)
	c2, idle, err := p.get(later, later.Add(time.Second))
	if err != nil || idle || c2 == c1 || len(dialled) != 2 {
		t.Fatalf("get after a long idle: %p idle %v %v, %d dialled; want a new connection", c2, idle, err, len(dialled))
	}
	if _, err := dialled[0].Write([]byte("x")); err == nil {
		t.Fatal("the expired connection is still open")
	}
	if p.open != 1 || len(p.all) != 1 {
		t.Fatalf("pool holds %d open, %d tracked; want 1, 1", p.open, len(p.all))
	}
}

// TestPoolWaitsForAConnection: with max connections busy, get waits for
// one to be put back, or gives up at its deadline with errNoFreeConns.
func TestPoolWaitsForAConnection(t *testing.T) {
	p := newPool("owner:1", func(string) (net.Conn, error) {
		return pipeConn(t), nil
	}, nil, time.Second, 1)
	now := time.Now()
	busy, _, err := p.get(now, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.get(time.Now(), time.Now().Add(10*time.Millisecond)); err != errNoFreeConns || !notSent(err) {
		t.Fatalf("get with the only connection busy: %v, want errNoFreeConns", err)
	}
	got := make(chan *upConn)
	getLater(t, p, got)
	fugetest.Eventually(t, "a waiting request", waiters(p, 1))
	p.put(busy)
	if c := recv(t, "the handed-over connection", got); c != busy {
		t.Fatalf("waiter got %p, want %p", c, busy)
	}
	// A discarded connection frees its slot, and the pool dials in it for
	// the waiter.
	getLater(t, p, got)
	fugetest.Eventually(t, "a waiting request", waiters(p, 1))
	p.discard(busy)
	if c := recv(t, "a new connection", got); c == nil || c == busy {
		t.Fatalf("waiter got %p after a discard, want a new connection", c)
	}
	if p.open != 1 {
		t.Fatalf("%d open, want 1", p.open)
	}
}

// TestPoolWaiterTakesFirstConnection: a request that finds no idle
// connection takes whichever comes first, a connection put back or the one
// the pool dials for it; the other goes idle. (Waiting for its own dial
// made every request behind a slow TLS handshake wait for it.)
func TestPoolWaiterTakesFirstConnection(t *testing.T) {
	gate := make(chan struct{})
	dials := make(chan struct{}, 16)
	p := newPool("owner:1", func(string) (net.Conn, error) {
		dials <- struct{}{}
		if len(dials) > 1 {
			<-gate // every dial but the first waits for the test
		}
		return pipeConn(t), nil
	}, nil, time.Second, 4)
	now := time.Now()
	busy, _, err := p.get(now, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *upConn)
	getLater(t, p, got)
	fugetest.Eventually(t, "a waiting request and its dial", locked(p, func() bool { return len(p.waiters) == 1 && p.dialing == 1 }))
	busy.readTime.Store(int64(time.Since(epoch)))
	p.put(busy)
	if c := recv(t, "the connection put back", got); c != busy {
		t.Fatalf("waiter got %p, want the connection put back, %p", c, busy)
	}
	close(gate)
	fugetest.Eventually(t, "the dialled connection idle", locked(p, func() bool { return p.dialing == 0 && len(p.idle) == 1 && p.open == 2 }))
}

// TestPoolBoundsDials: at most maxDialing dials run at once, however many
// requests wait; once they finish, the pool dials for the requests still
// waiting.
func TestPoolBoundsDials(t *testing.T) {
	gate := make(chan struct{})
	var inFlight peakCounter
	p := newPool("owner:1", func(string) (net.Conn, error) {
		inFlight.add(1)
		<-gate
		inFlight.add(-1)
		return pipeConn(t), nil
	}, nil, time.Second, 100)
	const n = 3 * maxDialing
	got := make(chan *upConn, n)
	for range n {
		getLater(t, p, got)
	}
	fugetest.Eventually(t, "every request waiting", waiters(p, n))
	p.mu.Lock()
	dialing := p.dialing
	p.mu.Unlock()
	if dialing != maxDialing {
		t.Fatalf("%d dials under way for %d waiting requests, want %d", dialing, n, maxDialing)
	}
	close(gate)
	for range n {
		if c := recv(t, "a connection", got); c == nil {
			t.Fatal("a waiting request got no connection")
		}
	}
	if m := inFlight.max(); m > maxDialing {
		t.Fatalf("%d dials ran at once, want at most %d", m, maxDialing)
	}
	fugetest.Eventually(t, "the dials finished", locked(p, func() bool { return p.dialing == 0 }))
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	if open != n {
		t.Fatalf("%d open, want %d: a dial for a request already served", open, n)
	}
}

// TestPoolDialFailureFailsWaiters: when a dial fails, every request
// waiting fails at once with a dial error (nothing was sent, so it may be
// retried elsewhere), and no slot stays taken.
func TestPoolDialFailureFailsWaiters(t *testing.T) {
	gate := make(chan struct{})
	p := newPool("owner:1", func(string) (net.Conn, error) {
		<-gate
		return nil, errors.New("connection refused")
	}, nil, time.Second, 4)
	const n = 3
	errs := make(chan error, n)
	for range n {
		go func() {
			_, _, err := p.get(time.Now(), time.Now().Add(defaultTestTimeout))
			errs <- err
		}()
	}
	fugetest.Eventually(t, "every request waiting", waiters(p, n))
	close(gate)
	for range n {
		err := recv(t, "a failed request", errs)
		var de *dialError
		if !errors.As(err, &de) || !notSent(err) {
			t.Fatalf("get: %v, want a dial error", err)
		}
	}
	fugetest.Eventually(t, "no slot taken", locked(p, func() bool { return p.open == 0 && p.dialing == 0 && len(p.waiters) == 0 }))
}

// peakCounter counts and keeps the most it counted.
type peakCounter struct {
	mu     sync.Mutex
	n, top int
}

func (a *peakCounter) add(d int) {
	a.mu.Lock()
	a.n += d
	a.top = max(a.top, a.n)
	a.mu.Unlock()
}

func (a *peakCounter) max() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.top
}

// getLater gets a connection from p in a goroutine of its own and sends it
// to got (nil if the get failed, which fails t).
func getLater(t testing.TB, p *connPool, got chan<- *upConn) {
	go func() {
		c, _, err := p.get(time.Now(), time.Now().Add(defaultTestTimeout))
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
}

// waiters reports whether p has n requests waiting.
func waiters(p *connPool, n int) func() bool {
	return locked(p, func() bool { return len(p.waiters) == n })
}

// locked is cond evaluated under p's lock.
func locked(p *connPool, cond func() bool) func() bool {
	return func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return cond()
	}
}

// pipeConn is a connection for a pool test's dial: one end of a pipe whose
// other end closes at cleanup.
func pipeConn(t testing.TB) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { b.Close() })
	return a
}

func TestLazyDeadline(t *testing.T) {
	var d lazyDeadline
	for i, step := range []struct {
		ask  int64
		sets bool
	}{
		{100, true},  // none set
		{150, false}, // later: when 100 fires
		{160, false},
		{0, false},   // none: when 100 fires
		{90, true},   // earlier: at once
		{90, false},  // the same
		{120, false}, // later
	} {
		if got := d.ask(step.ask); got != step.sets {
			t.Fatalf("step %d: ask(%d) sets %v, want %v", i, step.ask, got, step.sets)
		}
	}
	// 90 fires at 95: the one asked for, 120, is later: set it and go on.
	if at, again := d.fired(95); !again || at.UnixNano() != 120 {
		t.Fatalf("fired at 95: %v %v, want 120, true", at, again)
	}
	// 120 fires at 125: it was the one asked for.
	if _, again := d.fired(125); again {
		t.Fatal("a deadline that was asked for fired and the I/O went on")
	}
	// Asked for later after that: it waits for the stale one to fire.
	if d.ask(200) {
		t.Fatal("a later deadline moved the socket's at once")
	}
	if at, again := d.fired(130); !again || at.UnixNano() != 200 {
		t.Fatalf("fired at 130: %v %v, want 200, true", at, again)
	}
	d.ask(0)
	if at, again := d.fired(210); !again || !at.IsZero() {
		t.Fatalf("fired with none asked for: %v %v, want the zero time, true", at, again)
	}
}

// TestEvConnDeadlines: through the proxy's client listener, a later read
// deadline takes over when the earlier one fires (the read goes on), and
// an earlier one ends a read at once.
func TestEvConnDeadlines(t *testing.T) {
	if !rawIO {
		t.Skip("no raw I/O on this platform")
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := withRawIO(tcp, nil)
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*evConn); !ok {
		t.Fatalf("accepted a %T", c)
	}

	first := time.Now().Add(20 * time.Millisecond)
	c.SetReadDeadline(first)
	c.SetReadDeadline(time.Now().Add(defaultTestTimeout)) // later: kept aside
	go func() {
		time.Sleep(time.Until(first) + 30*time.Millisecond) // past the first, so that it fires
		peer.Write([]byte("hello"))
	}()
	b := make([]byte, 16)
	if n, err := c.Read(b); err != nil || string(b[:n]) != "hello" {
		t.Fatalf("read after the first deadline passed: %q, %v; want hello", b[:n], err)
	}

	c.SetReadDeadline(time.Now().Add(time.Millisecond)) // earlier: at once
	if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past an earlier deadline: %v, want a timeout", err)
	}
}

// TestOwnerDeadlineIsTheAttempts: an owner connection keeps the read
// deadline of its previous attempt until it fires, and then takes the
// current attempt's: an answer that comes after the earlier one but within
// UpstreamTimeout of the current attempt is served. (A POST, so that a
// timed-out attempt would answer 502 instead of being retried.)
func TestOwnerDeadlineIsTheAttempts(t *testing.T) {
	const upstream = 2 * time.Second
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) {
		if d, err := time.ParseDuration(string(ctx.Request.Header.Peek("Delay"))); err == nil {
			time.Sleep(d) // the owner is slow on purpose
		}
		ctx.SetBodyString("a")
	})
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.UpstreamTimeout = upstream
		c.MaxConnsPerOwner = 1 // the same connection both times
	})
	c := newClient(t)
	url := "http://" + p.Addr().String() + "/"
	first := time.Now()
	if resp, body := do(t, c, "POST", url, "x", DefaultHeader, "k"); resp.StatusCode != 200 || body != "a" {
		t.Fatalf("first: %d %q", resp.StatusCode, body)
	}
	// The first attempt's deadline is first+2s; this one's, 1.2 s later.
	// The answer comes about 2.5 s after first: 0.5 s after the first
	// deadline, 0.7 s before its own.
	time.Sleep(time.Until(first.Add(1200 * time.Millisecond)))
	if resp, body := do(t, c, "POST", url, "x", DefaultHeader, "k", "Delay", "1300ms"); resp.StatusCode != 200 || body != "a" {
		t.Fatalf("an answer past the previous attempt's deadline but within this one's: %d %q", resp.StatusCode, body)
	}
	if s := p.Stats(); s.UpstreamErrors != 0 {
		t.Fatalf("%d upstream errors", s.UpstreamErrors)
	}
}

// TestStaleIdleConnection: an owner that closes a kept-alive connection
// while it idles in the pool does not cost a POST its answer: the pool
// finds the connection closed before sending and dials a new one.
func TestStaleIdleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				var req fasthttp.Request
				if req.Read(bufio.NewReader(c)) == nil {
					// Kept alive by its headers, then closed at once.
					c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				}
				c.Close()
				closed <- struct{}{}
			}(c)
		}
	}()
	addr := ln.Addr().String()
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(addr, 1), addr) })
	p.owners.get(addr).pool.probeAfter.Store(0) // probe every idle connection
	c := newClient(t)
	url := "http://" + p.Addr().String() + "/"
	for i := range 3 {
		if resp, body := do(t, c, "POST", url, "x", DefaultHeader, "k"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("POST %d: %d %q", i, resp.StatusCode, body)
		}
		recv(t, "the owner's close", closed)
	}
	if s := p.Stats(); s.UpstreamErrors != 0 {
		t.Fatalf("%d upstream errors", s.UpstreamErrors)
	}
}
