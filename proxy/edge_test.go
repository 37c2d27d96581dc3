package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestFramingConflictClosesConnection: a request with both Content-Length
// and Transfer-Encoding is refused with 400 and its connection closed
// (RFC 9112 §6.3), so a request smuggled behind it is never read; it never
// reaches an owner.
func TestFramingConflictClosesConnection(t *testing.T) {
	o := startOwner(t, "a", nil)
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr) })
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\n\r\n"
	for _, tc := range []struct{ name, head string }{
		{"length then chunked", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"},
		{"chunked then length", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"},
		{"lower case", "transfer-encoding: chunked\r\ncontent-length: 5\r\n"},
		{"identity and length", "Transfer-Encoding: identity\r\nContent-Length: 5\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", p.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(defaultTestTimeout))
			body := "0\r\n\r\n"
			if tc.name == "identity and length" {
				body = "hello"
			}
			go io.WriteString(conn, "POST / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\n"+tc.head+"\r\n"+body+smuggled)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || string(b) != msgFraming || !resp.Close {
				t.Fatalf("got %d %q close=%v, want 400 %q and Connection: close", resp.StatusCode, b, resp.Close, msgFraming)
			}
			if resp, err := http.ReadResponse(br, nil); err == nil {
				t.Fatalf("the connection stayed open: a second response %s", resp.Status)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("after the 400: %v, want the connection closed", err)
			}
		})
	}
	if n := o.hits.Load(); n != 0 {
		t.Fatalf("the owner saw %d requests", n)
	}
}

// TestConnectionCannotDropRoutingHeaders: a Connection header naming the
// routing header or Fuge-Generation removes neither: the owner the key was
// routed to reads the same key, and the generation the proxy stamped.
func TestConnectionCannotDropRoutingHeaders(t *testing.T) {
	for _, header := range []string{DefaultHeader, "X-User"} {
		t.Run(header, func(t *testing.T) {
			echo := func(name string) fasthttp.RequestHandler {
				return func(ctx *fasthttp.RequestCtx) {
					ctx.Response.Header.SetBytesV("Got-Key", ctx.Request.Header.Peek(header))
					ctx.Response.Header.SetBytesV("Got-Generation", ctx.Request.Header.Peek(GenerationHeader))
					ctx.SetBodyString(name)
				}
			}
			owners := []*testOwner{startOwner(t, "a", echo("a")), startOwner(t, "b", echo("b"))}
			bal := newFakeBalancer(func(h uint64) (lb.Pick, bool) {
				return lb.Pick{Addr: owners[h%2].addr, Range: ring.Full(), Gen: lease.Gen(10 + h%2)}, true
			}, owners[0].addr, owners[1].addr)
			p := startProxy(t, func(c *Config) { c.Balancer = bal; c.Header = header })
			for i, conn := range []string{
				header + ", " + GenerationHeader,
				"keep-alive, " + header,
				"fuge-generation,x-secret , " + header,
			} {
				key := fmt.Sprintf("device-%d", i)
				h := ring.HashString(key)
				resp, body := raw(t, p.Addr().String(), "GET / HTTP/1.1\r\nHost: h\r\n"+
					header+": "+key+"\r\nConnection: "+conn+"\r\nFuge-Generation: 99\r\nX-Secret: s\r\n\r\n")
				want := owners[h%2].name
				if gen := strconv.FormatUint(10+h%2, 10); resp.StatusCode != 200 || body != want ||
					resp.Header.Get("Got-Key") != key || resp.Header.Get("Got-Generation") != gen {
					t.Errorf("Connection: %s: %d from %q, owner read key %q generation %q; want 200 from %q, key %q, generation %s",
						conn, resp.StatusCode, body, resp.Header.Get("Got-Key"), resp.Header.Get("Got-Generation"), want, key, gen)
				}
			}
		})
	}
}

// TestHTTP10WithoutHost: HTTP/1.0 allows a request without Host, which the
// proxy cannot forward; it answers 400 at once rather than retrying until
// the budget runs out. An absolute URI names the host, and is forwarded.
func TestHTTP10WithoutHost(t *testing.T) {
	o := startOwner(t, "a", nil)
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.RetryBudget = time.Hour // were it retried, the test would time out
	})
	addr := p.Addr().String()
	for _, tc := range []struct {
		name, req string
		code      int
		body      string
	}{
		{"HTTP/1.0", "GET / HTTP/1.0\r\nX-Fuge-Key: a\r\n\r\n", 400, msgNoHost},
		{"HTTP/1.0 POST", "POST / HTTP/1.0\r\nX-Fuge-Key: a\r\nContent-Length: 2\r\n\r\nhi", 400, msgNoHost},
		{"HTTP/1.1", "GET / HTTP/1.1\r\nX-Fuge-Key: a\r\n\r\n", 400, ""},
		{"HTTP/1.0 absolute URI", "GET http://h/ HTTP/1.0\r\nX-Fuge-Key: a\r\n\r\n", 200, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := raw(t, addr, tc.req)
			if resp.StatusCode != tc.code || tc.body != "" && body != tc.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.code, tc.body)
			}
		})
	}
	if n := o.hits.Load(); n != 1 {
		t.Fatalf("the owner saw %d requests, want only the absolute URI's", n)
	}
	if s := p.Stats(); s.Attempts != 1 {
		t.Fatalf("stats %+v: a request without Host was attempted", s)
	}
}

// dialFrom connects to addr from the local IP from, skipping the test where
// the loopback network has no such address (Linux routes all of
// 127.0.0.0/8 to lo).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: defaultTestTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPerIPConnLimit: one client address holding twice its limit in idle
// connections gets 429 on those beyond the limit, and cannot take the
// proxy's MaxConns: a client from another address is still served. A
// closed connection gives its slot back.
func TestPerIPConnLimit(t *testing.T) {
	o := startOwner(t, "a", nil)
	const perIP, maxConns = 20, 30
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.MaxConns, c.MaxConnsPerIP = maxConns, perIP
	})
	addr := p.Addr().String()
	const request = "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\n\r\n"
	// The kernel queues connections in order, and the proxy accepts them in
	// order: the first perIP are held, every later one is answered 429.
	var held []net.Conn
	for i := range 2 * perIP {
		c := dialFrom(t, "127.0.0.1", addr)
		if i < perIP {
			held = append(held, c)
			continue
		}
		c.SetDeadline(time.Now().Add(defaultTestTimeout))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d, beyond the limit: %v, want a 429", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 429 || string(b) != "fuge-proxy: too many connections from your address\n" {
			t.Fatalf("connection %d, beyond the limit: %d %q", i, resp.StatusCode, b)
		}
	}
	if s := p.Stats(); s.RefusedConns != perIP {
		t.Fatalf("refused %d connections, want %d", s.RefusedConns, perIP)
	}

	// Another address is served while the first holds its limit.
	other := dialFrom(t, "127.0.0.2", addr)
	other.SetDeadline(time.Now().Add(defaultTestTimeout))
	io.WriteString(other, request)
	resp, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another client: %v %v, want 200", resp, err)
	}

	// A held connection closed frees its slot for the same address.
	held[0].Close()
	fugetest.Eventually(t, "a connection from 127.0.0.1 to be served again", func() bool {
		c := dialFrom(t, "127.0.0.1", addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(defaultTestTimeout))
		io.WriteString(c, request)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		return err == nil && resp.StatusCode == 200
	})
}

// blackHole accepts connections and never answers; it holds them until the
// test ends.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// TestBlackHoleOwner: an owner that accepts connections and never answers
// holds at most its own pool, and no request for it outlives the retry
// budget by more than the upstream timeout, waiting for a free connection
// included; meanwhile requests for another owner are served.
func TestBlackHoleOwner(t *testing.T) {
	hole := blackHole(t)
	b := startOwner(t, "b", nil)
	bal := newFakeBalancer(func(h uint64) (lb.Pick, bool) {
		if h%2 == 0 {
			return lb.Pick{Addr: hole, Range: ring.Full(), Gen: 1}, true
		}
		return lb.Pick{Addr: b.addr, Range: ring.Full(), Gen: 2}, true
	}, hole, b.addr)
	const (
		perOwner = 2
		upstream = 200 * time.Millisecond
		budget   = 2 * time.Second
		waiting  = 40 // requests for the black hole at once: 20 times its pool
	)
	p := startProxy(t, func(c *Config) {
		c.Balancer = bal
		c.MaxConnsPerOwner = perOwner
		c.UpstreamTimeout = upstream
		c.RetryBudget = budget
	})
	keyFor := func(parity uint64) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint("key-", i); ring.HashString(k)%2 == parity {
				return k
			}
		}
	}
	url := "http://" + p.Addr().String() + "/"
	type result struct {
		code int
		took time.Duration
	}
	results := make(chan result, waiting)
	c := newClient(t)
	for range waiting {
		go func() {
			start := time.Now()
			resp, _ := do(t, c, "GET", url, "", DefaultHeader, keyFor(0))
			results <- result{resp.StatusCode, time.Since(start)}
		}()
	}
	fugetest.Eventually(t, "the black hole's pool to fill", func() bool {
		o := p.owners.get(hole)
		o.pool.mu.Lock()
		defer o.pool.mu.Unlock()
		return len(o.pool.all) == perOwner
	})
	for i := range 20 {
		if resp, body := do(t, c, "GET", url, "", DefaultHeader, keyFor(1)); resp.StatusCode != 200 || body != "b" {
			t.Fatalf("request %d for the live owner while the other black-holes: %d %q", i, resp.StatusCode, body)
		}
	}
	// Loose: a deadline of budget + upstream, plus scheduling.
	const bound = budget + upstream + 800*time.Millisecond
	for range waiting {
		r := recv(t, "a request for the black hole", results)
		if r.code != 502 && r.code != 503 || r.took > bound {
			t.Errorf("a request for the black hole: %d after %v, want 502 or 503 within %v", r.code, r.took, bound)
		}
	}
}
