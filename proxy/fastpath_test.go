package proxy

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// hasHost is len(req.Host()) > 0 without the URI parse: it must agree with
// fasthttp's answer on every Host header and request target, the fast
// path's and the others.
func TestHasHostMatchesFasthttp(t *testing.T) {
	hosts := []string{"", "a", "A.example", "proxy", "127.0.0.1", "127.0.0.1:8080", "x:", ":80", "a:99999", "a:123456",
		"a@b", "@", "a b", "[::1]", "[::1]:80", "[::1", "::1", "a:b:c", "a%41", "a%zz", "ä", "a_b", "a\x7f", "a:8o"}
	uris := []string{"/", "/x?y=1", "/a%20b", "/a%zz", "*", "x", "http://h/x", "http:///x", "/x?u=http://h", "//h/x", "/\x01", "/\x7f"}
	check := func(host, uri string) {
		t.Helper()
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetHost(host)
		req.Header.SetRequestURI(uri)
		got := hasHost(req)
		fresh := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(fresh)
		fresh.Header.SetHost(host)
		fresh.Header.SetRequestURI(uri)
		if want := len(fresh.Host()) > 0; got != want {
			t.Errorf("host %q uri %q: hasHost %v, fasthttp's Host() non-empty %v", host, uri, got, want)
		}
	}
	for _, h := range hosts {
		for _, u := range uris {
			check(h, u)
		}
	}
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	const alphabet = "aZ09.-:@[]%_/ \x01"
	for range 2000 {
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		check(string(b), uris[r.IntN(len(uris))])
	}
}

// The fast path is taken: a request with a plain Host and an origin-form
// target does not parse its URI.
func TestHasHostSkipsURIParse(t *testing.T) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetHost("proxy:8080")
	req.Header.SetRequestURI("/devices/42?x=1")
	if !hasHost(req) {
		t.Fatal("no host")
	}
	// req.URI() would parse now; had hasHost parsed, the parse is cached
	// and the URI's host set. Setting the header afterwards shows which.
	req.Header.SetHost("other")
	if got := string(req.URI().Host()); got != "other" {
		t.Fatalf("hasHost parsed the URI (host %q cached)", got)
	}
}

// X-Forwarded-For carries the client's address, formatted once per
// connection, whether the listener limits connections per address
// (perIPConn over evConn) or not (evConn alone), and for each of two
// clients on the same connection-reusing proxy.
func TestForwardedForPerConnection(t *testing.T) {
	for _, perIP := range []int{0, -1} {
		seen := make(chan string, 1)
		o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) {
			seen <- string(ctx.Request.Header.Peek("X-Forwarded-For"))
		})
		p := startProxy(t, func(c *Config) {
			c.Balancer = newFakeBalancer(to(o.addr, 3), o.addr)
			c.MaxConnsPerIP = perIP
		})
		for _, from := range []string{"127.0.0.1", "127.0.0.2"} {
			c := dialFrom(t, from, p.Addr().String())
			c.SetDeadline(time.Now().Add(defaultTestTimeout))
			for range 2 { // a kept-alive connection's second request too
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: k\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				if got, want := recv(t, "the owner's request", seen), "192.0.2.1, "+from; got != want {
					t.Fatalf("MaxConnsPerIP %d, from %s: X-Forwarded-For %q, want %q", perIP, from, got, want)
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
		}
	}
}

// BenchmarkHostCheck compares hasHost with the URI parse it replaces, on
// a request as a client sends it (each op rebuilds the request, as the
// server does for each one read).
func BenchmarkHostCheck(b *testing.B) {
	for _, bc := range []struct {
		name string
		f    func(*fasthttp.Request) bool
	}{
		{"uri-parse", func(r *fasthttp.Request) bool { return len(r.Host()) > 0 }},
		{"hasHost", hasHost},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var req fasthttp.Request
			b.ReportAllocs()
			for b.Loop() {
				req.Reset()
				req.Header.SetHost("proxy.example:8080")
				req.Header.SetRequestURI("/devices/42?x=1")
				if !bc.f(&req) {
					b.Fatal("no host")
				}
			}
		})
	}
}
