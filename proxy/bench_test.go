package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// staticBalancer sends every key to one address under one generation.
type staticBalancer struct{ pick lb.Pick }

func (b staticBalancer) Pick(uint64) (lb.Pick, bool) { return b.pick, true }
func (b staticBalancer) Updated() <-chan struct{}    { return nil }

// inmemProxy runs a proxy in front of one in-memory owner answering 200,
// both on in-memory listeners, and returns a client whose connections go to
// the proxy. With tlsBackend, the owner serves mutual TLS with an owner's
// certificate and the proxy connects with its own (BackendTLS).
func inmemProxy(tb testing.TB, tlsBackend bool) *fasthttp.HostClient {
	tb.Helper()
	ownerLn := fasthttputil.NewInmemoryListener()
	owner := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Fuge-Owner", "a")
		ctx.Response.Header.SetBytesV("Fuge-Generation", ctx.Request.Header.Peek(GenerationHeader))
		ctx.SetBodyString("ok")
	}}
	cfg := Config{
		Balancer: staticBalancer{lb.Pick{Addr: "owner-a", Range: ring.Full(), Gen: 7}},
		Dial:     func(string) (net.Conn, error) { return ownerLn.Dial() },
	}
	var ln net.Listener = ownerLn
	if tlsBackend {
		dir := certDir(tb)
		ln = tls.NewListener(ownerLn, loadSource(tb, dir, fugetls.OwnerBase("ns", "a")).ServerConfig(false, fugetls.RoleProxy))
		cfg.BackendTLS = loadSource(tb, dir, fugetls.ProxyBase).ClientConfig(fugetls.RoleOwner)
	}
	go owner.Serve(ln)
	tb.Cleanup(func() { owner.Shutdown() })

	p, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	frontLn := fasthttputil.NewInmemoryListener()
	served := make(chan error, 1)
	go func() { served <- p.Serve(frontLn) }()
	tb.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			tb.Error(err)
		}
		if err := <-served; err != nil {
			tb.Error(err)
		}
	})
	return &fasthttp.HostClient{Addr: "proxy", Dial: func(string) (net.Conn, error) { return frontLn.Dial() }}
}

// BenchmarkProxy measures one proxied GET end to end in one process: the
// client, the proxy (key hash, Pick, header edits, forward, response) and
// the owner. Steady state must report 0 allocs/op. The "hop" case sends
// hop-by-hop headers, which take the header rebuild; "tls-backend" is
// "plain" with mutual TLS between the proxy and the owner (BackendTLS), on
// connections kept alive: the difference is the proxy's added cost of TLS
// to backends, record encryption both ways, handshakes excluded.
func BenchmarkProxy(b *testing.B) {
	for _, bc := range []struct {
		name    string
		tls     bool
		headers []string
	}{
		{"plain", false, nil},
		{"hop", false, []string{"Connection", "keep-alive, X-Hop", "X-Hop", "1", "X-Forwarded-For", "192.0.2.1"}},
		{"tls-backend", true, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := inmemProxy(b, bc.tls)
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://proxy/devices/42")
			req.Header.Set(DefaultHeader, "device-42")
			for i := 0; i < len(bc.headers); i += 2 {
				req.Header.Add(bc.headers[i], bc.headers[i+1])
			}
			do := func() {
				if err := c.Do(req, resp); err != nil {
					b.Fatal(err)
				}
				if resp.StatusCode() != fasthttp.StatusOK || string(resp.Header.Peek("Fuge-Generation")) != "7" {
					b.Fatalf("status %d, generation %q", resp.StatusCode(), resp.Header.Peek("Fuge-Generation"))
				}
			}
			do() // warm the connections and buffers
			b.ReportAllocs()
			for b.Loop() {
				do()
			}
		})
	}
}

// TestProxyDoesNotAllocate is BenchmarkProxy's claim as a test.
func TestProxyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := inmemProxy(t, false)
	plain, hop, resp := fasthttp.AcquireRequest(), fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	plain.SetRequestURI("http://proxy/x")
	plain.Header.Set(DefaultHeader, "k")
	plain.CopyTo(hop)
	hop.Header.Set("Connection", "keep-alive, X-Hop")
	hop.Header.Set("X-Hop", "1")
	do := func() {
		for _, req := range []*fasthttp.Request{plain, hop} {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				t.Fatalf("%v %d", err, resp.StatusCode())
			}
		}
	}
	for range 100 {
		do()
	}
	if allocs := testing.AllocsPerRun(1000, do); allocs > 0 {
		t.Fatalf("a proxied request allocates %v times", allocs/2)
	}
}
