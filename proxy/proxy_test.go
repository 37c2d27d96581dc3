package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestRoutesByKey sends keys to the owner the balancer picks for
// XXH64(key), stamping that pick's generation.
func TestRoutesByKey(t *testing.T) {
	owners := []*testOwner{startOwner(t, "a", nil), startOwner(t, "b", nil)}
	bal := newFakeBalancer(func(h uint64) (lb.Pick, bool) {
		return lb.Pick{Addr: owners[h%2].addr, Range: ring.Full(), Gen: lease.Gen(10 + h%2)}, true
	}, owners[0].addr, owners[1].addr)
	p := startProxy(t, func(c *Config) { c.Balancer = bal })
	c := newClient(t)
	url := "http://" + p.Addr().String() + "/devices/x?y=1"
	for i := range 100 {
		key := fmt.Sprintf("device-%d", i)
		h := ring.HashString(key)
		resp, body := do(t, c, "GET", url, "", DefaultHeader, key)
		if resp.StatusCode != 200 || body != owners[h%2].name {
			t.Fatalf("key %q: %d %q, want 200 from %s", key, resp.StatusCode, body, owners[h%2].name)
		}
		if got, want := resp.Header.Get("Got-Generation"), strconv.FormatUint(10+h%2, 10); got != want {
			t.Fatalf("key %q: owner saw generation %q, want %s", key, got, want)
		}
		if got := resp.Header.Get("Fuge-Owner"); got != owners[h%2].name {
			t.Fatalf("key %q: Fuge-Owner %q not passed back", key, got)
		}
	}
	resp, body := do(t, c, "HEAD", url, "", DefaultHeader, "device-0")
	if want := owners[ring.HashString("device-0")%2].name; resp.StatusCode != 200 || body != "" || resp.ContentLength != int64(len(want)) {
		t.Fatalf("HEAD: %d %q, Content-Length %d, want 200, no body, %d", resp.StatusCode, body, resp.ContentLength, len(want))
	}
	if n := owners[0].hits.Load() + owners[1].hits.Load() - 1; n != 100 || owners[0].hits.Load() == 0 || owners[1].hits.Load() == 0 {
		t.Fatalf("hits a=%d b=%d, want 100 spread over both", owners[0].hits.Load(), owners[1].hits.Load())
	}
	s := p.Stats()
	if s.Responses[2] != 101 || s.Attempts != 101 || s.Retries != 0 || s.Owners != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestHeaders checks that hop-by-hop headers are removed both ways, that
// X-Forwarded-For gains the client's address, and that the path, query,
// method and body arrive unchanged.
func TestHeaders(t *testing.T) {
	seen := make(chan string, 1)
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) {
		var hs []string
		for k, v := range ctx.Request.Header.All() {
			hs = append(hs, string(k)+": "+string(v))
		}
		slices.Sort(hs)
		seen <- fmt.Sprintf("%s %s %q\n%s", ctx.Method(), ctx.RequestURI(), ctx.PostBody(), strings.Join(hs, "\n"))
		ctx.Response.Header.Set("Connection", "X-Resp-Hop")
		ctx.Response.Header.Set("X-Resp-Hop", "1")
		ctx.Response.Header.Set("Keep-Alive", "timeout=5")
		ctx.Response.Header.Set("Upgrade", "h2c")
		ctx.Response.Header.Set("X-End", "kept")
		ctx.SetBodyString("done")
	})
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 3), o.addr) })
	resp, body := raw(t, p.Addr().String(), "PUT /a/b%20c?q=1&r HTTP/1.1\r\n"+
		"Host: example.test\r\n"+
		"X-Fuge-Key: k1\r\n"+
		"Connection: keep-alive, X-Secret\r\n"+
		"X-Secret: s\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"Proxy-Authorization: Basic eA==\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Te: trailers\r\n"+
		"Upgrade: websocket\r\n"+
		"X-Forwarded-For: 192.0.2.1\r\n"+
		"X-Forwarded-For: 192.0.2.2\r\n"+
		"Fuge-Generation: 99\r\n"+
		"Fuge-Generation: 98\r\n"+
		"Transfer-Encoding: chunked\r\n"+
		"\r\n"+
		"5\r\nhello\r\n0\r\n\r\n")
	got := recv(t, "the owner's request", seen)
	want := `PUT /a/b%20c?q=1&r "hello"` + "\n" + strings.Join([]string{
		"Content-Length: 5",
		"Fuge-Generation: 3",
		"Host: example.test",
		"X-Forwarded-For: 192.0.2.1, 192.0.2.2, 127.0.0.1",
		"X-Fuge-Key: k1",
	}, "\n")
	if got != want {
		t.Fatalf("owner saw\n%s\nwant\n%s", got, want)
	}
	if resp.StatusCode != 200 || body != "done" {
		t.Fatalf("response %d %q", resp.StatusCode, body)
	}
	for _, h := range []string{"X-Resp-Hop", "Keep-Alive", "Upgrade", "Connection"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("response header %s: %q was passed on", h, v)
		}
	}
	if resp.Header.Get("X-End") != "kept" || resp.Close {
		t.Errorf("end-to-end header lost or connection closed: %v close=%v", resp.Header, resp.Close)
	}
}

// TestRetryAfterTableChange: the first owner answers 421; once the table
// moves the key, the retry reaches the new owner under the new generation.
// The backoff is far longer than the test, so only the table change can
// wake the retry.
func TestRetryAfterTableChange(t *testing.T) {
	misdirected := make(chan struct{}, 1)
	old := startOwner(t, "old", func(ctx *fasthttp.RequestCtx) {
		ctx.Error("not mine", fasthttp.StatusMisdirectedRequest)
		select {
		case misdirected <- struct{}{}:
		default:
		}
	})
	next := startOwner(t, "next", nil)
	bal := newFakeBalancer(to(old.addr, 1), old.addr)
	p := startProxy(t, func(c *Config) {
		c.Balancer = bal
		c.BackoffBase = time.Hour
		c.RetryBudget = 2 * time.Hour
	})
	c := newClient(t)
	type result struct {
		code       int
		body, gen  string
		retryAfter string
	}
	done := make(chan result, 1)
	go func() {
		resp, body := do(t, c, "POST", "http://"+p.Addr().String()+"/x", "payload", DefaultHeader, "k")
		done <- result{resp.StatusCode, body, resp.Header.Get("Got-Generation"), resp.Header.Get("Retry-After")}
	}()
	recv(t, "the 421", misdirected)
	bal.set(to(next.addr, 2), next.addr)
	r := recv(t, "the response", done)
	if r.code != 200 || r.body != "next" || r.gen != "2" {
		t.Fatalf("got %+v, want 200 from next under generation 2", r)
	}
	s := p.Stats()
	if s.Misroutes != 1 || s.Retries != 1 || s.Attempts != 2 || s.GiveUps != 0 {
		t.Fatalf("stats %+v, want one misroute and one retry", s)
	}
	if old.hits.Load() != 1 || next.hits.Load() != 1 {
		t.Fatalf("hits old=%d next=%d", old.hits.Load(), next.hits.Load())
	}
}

// TestAbandonWhenOwnerLeavesTable: a GET waits on an owner that does not
// answer (a paused process); when the table drops that owner and moves the
// key, the proxy abandons the attempt and the retry reaches the new owner,
// long before the upstream timeout. A PUT is idempotent too; a POST on the
// same wedged owner gets 502, never a second copy.
func TestAbandonWhenOwnerLeavesTable(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   int
		body   string
	}{{"GET", 200, "next"}, {"PUT", 200, "next"}, {"POST", 502, msgBadGateway}} {
		t.Run(tc.method, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			release := make(chan struct{})
			defer close(release)
			wedged := startOwner(t, "wedged", func(ctx *fasthttp.RequestCtx) {
				arrived <- struct{}{}
				<-release
			})
			next := startOwner(t, "next", nil)
			bal := newFakeBalancer(to(wedged.addr, 1), wedged.addr)
			p := startProxy(t, func(c *Config) {
				c.Balancer = bal
				c.UpstreamTimeout = time.Hour
				c.RetryBudget = time.Hour
			})
			c := newClient(t)
			type result struct {
				code int
				body string
			}
			done := make(chan result, 1)
			go func() {
				resp, body := do(t, c, tc.method, "http://"+p.Addr().String()+"/x", "payload", DefaultHeader, "k")
				done <- result{resp.StatusCode, body}
			}()
			recv(t, "the request at the wedged owner", arrived)
			bal.set(to(next.addr, 2), next.addr)
			r := recv(t, "the response", done)
			if r.code != tc.want || r.body != tc.body {
				t.Fatalf("got %d %q, want %d %q", r.code, r.body, tc.want, tc.body)
			}
			if wedged.hits.Load() != 1 {
				t.Fatalf("the wedged owner got %d copies", wedged.hits.Load())
			}
			if got := p.c.abandoned.Load(); got == 0 {
				t.Fatal("no connection counted as abandoned")
			}
		})
	}
}

// TestGiveUp: an owner that always answers 421 makes the proxy back off and
// retry until the budget, then answer 503.
func TestGiveUp(t *testing.T) {
	o := startOwner(t, "wrong", func(ctx *fasthttp.RequestCtx) {
		ctx.Error("not mine", fasthttp.StatusMisdirectedRequest)
	})
	const budget = 100 * time.Millisecond
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.RetryBudget = budget
	})
	start := time.Now()
	resp, body := do(t, newClient(t), "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, "k")
	if took := time.Since(start); took < budget {
		t.Fatalf("gave up after %v, before the budget %v", took, budget)
	}
	if resp.StatusCode != 503 || body != msgGiveUp || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %q, want 503 %q with Retry-After", resp.StatusCode, body, msgGiveUp)
	}
	s := p.Stats()
	// Backoff 5, 10, 20, 40 ms fits 4 retries (5 attempts) at most in 100 ms.
	if s.GiveUps != 1 || s.Misroutes < 2 || s.Misroutes > 5 || s.Retries != s.Misroutes-1 || s.Responses[5] != 1 {
		t.Fatalf("stats %+v", s)
	}
	if int64(s.Misroutes) != o.hits.Load() {
		t.Fatalf("%d misroutes, owner saw %d requests", s.Misroutes, o.hits.Load())
	}
}

// resetOwner accepts connections, reads one request head and resets the
// connection without answering: the request may have been executed.
func resetOwner(t *testing.T) (addr string, requests *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	requests = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err == nil {
					requests.Add(1)
				}
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String(), requests
}

// TestPostNotRetriedAfterReset: a POST whose connection is reset after it
// was sent gets 502 at once, never a second copy; a GET is retried.
func TestPostNotRetriedAfterReset(t *testing.T) {
	addr, requests := resetOwner(t)
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(addr, 1), addr)
		c.RetryBudget = 50 * time.Millisecond
	})
	c := newClient(t)
	url := "http://" + p.Addr().String() + "/orders"
	resp, body := do(t, c, "POST", url, "buy", DefaultHeader, "k")
	if resp.StatusCode != 502 || body != msgBadGateway {
		t.Fatalf("POST: %d %q, want 502", resp.StatusCode, body)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the owner received the POST %d times, want 1", n)
	}
	if s := p.Stats(); s.Retries != 0 || s.UpstreamErrors != 1 || s.GiveUps != 0 {
		t.Fatalf("stats after POST %+v", s)
	}

	resp, _ = do(t, c, "GET", url, "", DefaultHeader, "k")
	if resp.StatusCode != 502 {
		t.Fatalf("GET: %d, want 502 after the budget", resp.StatusCode)
	}
	if n := requests.Load(); n < 3 {
		t.Fatalf("the owner received %d requests, want the GET retried", n)
	}
	if s := p.Stats(); s.Retries == 0 || s.GiveUps != 1 {
		t.Fatalf("stats after GET %+v", s)
	}
}

// TestPostRetriedWhenRefused: a refused connection means nothing was sent,
// so even a POST is retried, and reaches the owner the table names next.
func TestPostRetriedWhenRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	good := startOwner(t, "good", nil)
	bal := newFakeBalancer(to(dead, 1), dead)
	p := startProxy(t, func(c *Config) {
		c.Balancer = bal
		c.BackoffBase = time.Hour
		c.RetryBudget = 2 * time.Hour
	})
	done := make(chan string, 1)
	go func() {
		resp, body := do(t, newClient(t), "POST", "http://"+p.Addr().String()+"/", "x", DefaultHeader, "k")
		done <- fmt.Sprint(resp.StatusCode, " ", body)
	}()
	fugetest.Eventually(t, "the refused attempt", func() bool { return p.Stats().Refused > 0 })
	bal.set(to(good.addr, 2), good.addr)
	if got := recv(t, "the response", done); got != "200 good" {
		t.Fatalf("got %q, want 200 good", got)
	}
	if s := p.Stats(); s.Refused != 1 || s.Retries != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestNoOwnerYet: a balancer without a table makes the proxy wait for one
// within the budget.
func TestNoOwnerYet(t *testing.T) {
	o := startOwner(t, "a", nil)
	bal := newFakeBalancer(func(uint64) (lb.Pick, bool) { return lb.Pick{}, false })
	p := startProxy(t, func(c *Config) {
		c.Balancer = bal
		c.BackoffBase = time.Hour
		c.RetryBudget = 2 * time.Hour
	})
	done := make(chan string, 1)
	go func() {
		resp, body := do(t, newClient(t), "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, "k")
		done <- fmt.Sprint(resp.StatusCode, " ", body)
	}()
	fugetest.Eventually(t, "the request to arrive", func() bool {
		return p.server.GetOpenConnectionsCount() > 0
	})
	bal.set(to(o.addr, 1), o.addr)
	if got := recv(t, "the response", done); got != "200 a" {
		t.Fatalf("got %q", got)
	}
}

// TestRoundRobinSpreads: --balance round-robin ignores the key and spreads
// requests evenly; keyless requests go round robin under that policy.
func TestRoundRobinSpreads(t *testing.T) {
	var owners []*testOwner
	var addrs []string
	for _, n := range []string{"a", "b", "c"} {
		o := startOwner(t, n, nil)
		owners = append(owners, o)
		addrs = append(addrs, o.addr)
	}
	rr := lb.NewRoundRobin(addrs)
	p := startProxy(t, func(c *Config) {
		c.Balancer = rr
		c.MissingKey = MissingKeyRoundRobin
		c.Fallback = rr
	})
	c := newClient(t)
	url := "http://" + p.Addr().String() + "/"
	for i := range 300 {
		var resp *http.Response
		if i%2 == 0 {
			resp, _ = do(t, c, "GET", url, "", DefaultHeader, "same-key")
		} else {
			resp, _ = do(t, c, "GET", url, "")
		}
		if resp.StatusCode != 200 || resp.Header.Get("Got-Generation") != "" {
			t.Fatalf("status %d, generation %q", resp.StatusCode, resp.Header.Get("Got-Generation"))
		}
	}
	for _, o := range owners {
		if n := o.hits.Load(); n != 100 {
			t.Errorf("owner %s got %d requests, want 100", o.name, n)
		}
	}
}

// TestHealthzAndMetrics: /healthz follows the balancer's table, /metrics
// counts requests by class, misroutes and latency by owner.
func TestHealthzAndMetrics(t *testing.T) {
	o := startOwner(t, "a", nil)
	bal := &fakeBalancer{upd: make(chan struct{}), ready: make(chan struct{})}
	bal.route.Store(&fakeRoute{pick: func(uint64) (lb.Pick, bool) { return lb.Pick{}, false }})
	p := startProxy(t, func(c *Config) { c.Balancer = bal; c.RetryBudget = time.Millisecond })
	c := newClient(t)
	admin := "http://" + p.AdminAddr().String()
	if resp, body := do(t, c, "GET", admin+"/healthz", ""); resp.StatusCode != 503 {
		t.Fatalf("healthz before a table: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, c, "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, "k"); resp.StatusCode != 503 {
		t.Fatalf("request before a table: %d, want 503", resp.StatusCode)
	}
	bal.set(to(o.addr, 1), o.addr)
	if resp, body := do(t, c, "GET", admin+"/healthz", ""); resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("healthz with a table: %d %q", resp.StatusCode, body)
	}
	do(t, c, "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, "k")
	do(t, c, "GET", "http://"+p.Addr().String()+"/", "")
	_, m := do(t, c, "GET", admin+"/metrics", "")
	for _, want := range []string{
		`fuge_proxy_requests_total{code="2xx"} 1`,
		`fuge_proxy_requests_total{code="4xx"} 1`,
		`fuge_proxy_requests_total{code="5xx"} 1`,
		`fuge_proxy_give_ups_total 1`,
		`fuge_proxy_retries_total 0`,
		`fuge_proxy_misroutes_total 0`,
		`fuge_proxy_healthy 1`,
		`fuge_proxy_upstream_seconds_count{owner="` + o.addr + `"} 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestOwnerPoolsFollowTable: the pool of an owner that left the table is
// dropped after the update, with its latency series.
func TestOwnerPoolsFollowTable(t *testing.T) {
	a, b := startOwner(t, "a", nil), startOwner(t, "b", nil)
	bal := newFakeBalancer(to(a.addr, 1), a.addr)
	p := startProxy(t, func(c *Config) { c.Balancer = bal })
	c := newClient(t)
	do(t, c, "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, "k")
	bal.set(to(b.addr, 2), b.addr)
	do(t, c, "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, "k")
	fugetest.Eventually(t, "a's pool to go", func() bool { return p.Stats().Owners == 1 })
	_, m := do(t, c, "GET", "http://"+p.AdminAddr().String()+"/metrics", "")
	if strings.Contains(m, a.addr) || !strings.Contains(m, b.addr) {
		t.Fatalf("latency series: want only %s\n%s", b.addr, m)
	}
}

func TestConfigValidate(t *testing.T) {
	bal := newFakeBalancer(to("x:1", 1))
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want error
	}{
		{"managers", func(c *Config) { c.Managers = []string{"m:1"} }, nil},
		{"balancer", func(c *Config) { c.Balancer = bal }, nil},
		{"nothing to route by", func(c *Config) {}, ErrNoManagers},
		{"empty manager", func(c *Config) { c.Managers = []string{"m:1", ""} }, ErrNoManagers},
		{"balance", func(c *Config) { c.Managers = []string{"m:1"}; c.Balance = "random" }, ErrConfig},
		{"policy", func(c *Config) { c.Managers = []string{"m:1"}; c.MissingKey = "drop" }, ErrConfig},
		{"fallback needed", func(c *Config) { c.Balancer = bal; c.MissingKey = MissingKeyRoundRobin }, ErrConfig},
		{"header", func(c *Config) { c.Balancer = bal; c.Header = "X Key" }, ErrConfig},
		{"hop header", func(c *Config) { c.Balancer = bal; c.Header = "connection" }, ErrConfig},
		{"generation header", func(c *Config) { c.Balancer = bal; c.Header = "fuge-generation" }, ErrConfig},
		{"negative budget", func(c *Config) { c.Balancer = bal; c.RetryBudget = -1 }, ErrConfig},
		{"negative body", func(c *Config) { c.Balancer = bal; c.MaxBodyBytes = -1 }, ErrConfig},
		{"tiny header", func(c *Config) { c.Balancer = bal; c.MaxHeaderBytes = 100 }, ErrConfig},
		{"per-IP limit at MaxConns", func(c *Config) { c.Balancer = bal; c.MaxConns, c.MaxConnsPerIP = 100, 100 }, ErrConfig},
		{"per-IP default under a small MaxConns", func(c *Config) { c.Balancer = bal; c.MaxConns = 100 }, nil},
		{"no per-IP limit", func(c *Config) { c.Balancer = bal; c.MaxConnsPerIP = -1 }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			tc.mut(&c)
			err := c.Validate()
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
		})
	}
	d := DefaultConfig()
	if d.ListenAddr != DefaultListenAddr || d.RetryBudget != 10*time.Second || d.BackoffBase != 5*time.Millisecond ||
		d.Header != "X-Fuge-Key" || d.Namespace != "default" || d.MissingKey != MissingKeyReject || d.Balance != BalanceLease ||
		d.MaxConnsPerIP != 256 || d.BackendTLS != nil || d.ManagerTLS != nil {
		t.Fatalf("defaults %+v", d)
	}
	if c := (Config{MaxConns: 100}).withDefaults(); c.MaxConnsPerIP != 50 {
		t.Fatalf("per-IP default under MaxConns 100: %d, want 50", c.MaxConnsPerIP)
	}
}

// TestLostDuringRequest: an owner's guard answers 503 with Fuge-Lost when
// it lost the key while handling the request (a clean leave under load).
// The proxy retries a GET on the key's new owner and passes the 503 on for
// a POST, which the owner may have run.
func TestLostDuringRequest(t *testing.T) {
	for _, c := range []struct{ method, want string }{{"GET", "200 good"}, {"POST", "503 lost"}} {
		t.Run(c.method, func(t *testing.T) {
			leaving := startOwner(t, "leaving", func(ctx *fasthttp.RequestCtx) {
				ctx.Response.Header.Set("Retry-After", "1")
				ctx.Response.Header.Set(LostHeader, "1")
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				ctx.SetBodyString("lost")
			})
			good := startOwner(t, "good", nil)
			bal := newFakeBalancer(to(leaving.addr, 1), leaving.addr)
			p := startProxy(t, func(cfg *Config) {
				cfg.Balancer = bal
				cfg.BackoffBase = time.Hour
				cfg.RetryBudget = 2 * time.Hour
			})
			done := make(chan string, 1)
			go func() {
				resp, body := do(t, newClient(t), c.method, "http://"+p.Addr().String()+"/", "x", DefaultHeader, "k")
				done <- fmt.Sprint(resp.StatusCode, " ", body)
			}()
			fugetest.Eventually(t, "the lost answer", func() bool { return leaving.hits.Load() > 0 })
			bal.set(to(good.addr, 2), good.addr)
			if got := recv(t, "the response", done); got != c.want {
				t.Fatalf("%s: got %q, want %q", c.method, got, c.want)
			}
		})
	}
}
