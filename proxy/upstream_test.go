package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
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
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
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
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
		return a, nil
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
	go func() {
		c, _, err := p.get(time.Now(), time.Now().Add(defaultTestTimeout))
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	fugetest.Eventually(t, "a waiting request", waiters(p, 1))
	p.put(busy)
	if c := recv(t, "the handed-over connection", got); c != busy {
		t.Fatalf("waiter got %p, want %p", c, busy)
	}
	// A discarded connection hands its slot to a waiter, which dials.
	go func() {
		c, _, err := p.get(time.Now(), time.Now().Add(defaultTestTimeout))
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	fugetest.Eventually(t, "a waiting request", waiters(p, 1))
	p.discard(busy)
	if c := recv(t, "a new connection", got); c == nil || c == busy {
		t.Fatalf("waiter got %p after a discard, want a new connection", c)
	}
	if p.open != 1 {
		t.Fatalf("%d open, want 1", p.open)
	}
}

// waiters reports whether p has n requests waiting.
func waiters(p *connPool, n int) func() bool {
	return func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters) == n
	}
}

// deadlineConn counts the write deadlines that reach the connection.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error { c.set = append(c.set, t); return nil }

// TestWriteDeadlineSlack: a client connection's write deadline moves when
// the one asked for is earlier, or later by the slack or more, and not for
// the small steps fasthttp takes before every response.
func TestWriteDeadlineSlack(t *testing.T) {
	under := &deadlineConn{}
	c := &rawConn{Conn: under, writeSlack: time.Second}
	base := time.Unix(1000, 0)
	for _, step := range []struct {
		at   time.Time
		sets bool
	}{
		{base, true}, // first
		{base.Add(300 * time.Millisecond), false}, // later, within the slack
		{base.Add(999 * time.Millisecond), false}, // still within it
		{base.Add(time.Second), true},             // the slack reached
		{base.Add(500 * time.Millisecond), true},  // earlier: always
		{time.Time{}, true},                       // none
		{base, true},                              // after none
	} {
		n := len(under.set)
		c.SetWriteDeadline(step.at)
		if got := len(under.set) > n; got != step.sets {
			t.Fatalf("SetWriteDeadline(%v) reached the connection: %v, want %v", step.at, got, step.sets)
		}
	}
}
