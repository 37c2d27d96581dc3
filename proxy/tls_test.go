package proxy

import (
	"crypto/tls"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/fugetls"
)

// certDir writes a development CA with the proxy's certificate and owner
// ns/a's into a temporary directory.
func certDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := fugetls.InitDir(dir, fugetls.InitOptions{Owners: []fugetls.ID{fugetls.OwnerID("ns", "a")}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadSource loads the certificate base from dir.
func loadSource(t testing.TB, dir, base string) *fugetls.Source {
	t.Helper()
	src, err := fugetls.NewSource(fugetls.DirFiles(dir, base))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// startTLSOwner is startOwner over TLS with src's certificate, admitting
// proxies only. It answers with its name and, in Got-Peer, the identity
// the client presented, and does not log the handshakes it refuses.
func startTLSOwner(t testing.TB, name string, src *fugetls.Source) *testOwner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &testOwner{name: name, addr: ln.Addr().String()}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			o.hits.Add(1)
			if id, err := fugetls.PeerID(*ctx.TLSConnectionState()); err == nil {
				ctx.Response.Header.Set("Got-Peer", id.String())
			}
			ctx.SetBodyString(name)
		},
		Logger: fastLogger{slog.New(slog.DiscardHandler)}, // the refused handshakes
	}
	go srv.Serve(tls.NewListener(ln, src.ServerConfig(false, fugetls.RoleProxy)))
	t.Cleanup(func() { srv.Shutdown() })
	return o
}

// quietOwner is a plain HTTP owner that does not log the handshakes it
// cannot parse.
func quietOwner(t testing.TB) *testOwner {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &testOwner{name: "plain", addr: ln.Addr().String()}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) { o.hits.Add(1) },
		Logger:  fastLogger{slog.New(slog.DiscardHandler)},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return o
}

// TestBackendTLS: with BackendTLS the proxy reaches an owner whose
// certificate its CA issued for the owner role, presenting its own. An
// owner with another CA's certificate, with a manager's, or speaking plain
// HTTP, and one that never answers the handshake, are refused connections:
// nothing was sent, so the request (a POST too) is retried until the budget
// and answered 503, and the owner never sees it.
func TestBackendTLS(t *testing.T) {
	dir, other := certDir(t), certDir(t)
	good := startTLSOwner(t, "a", loadSource(t, dir, fugetls.OwnerBase("ns", "a")))
	bal := newFakeBalancer(to(good.addr, 1), good.addr)
	p := startProxy(t, func(c *Config) {
		c.Balancer = bal
		c.BackendTLS = loadSource(t, dir, fugetls.ProxyBase).ClientConfig(fugetls.RoleOwner)
		c.RetryBudget = 300 * time.Millisecond
		c.DialTimeout = 100 * time.Millisecond
	})
	url := "http://" + p.Addr().String() + "/"
	c := newClient(t)
	for _, method := range []string{"GET", "POST"} {
		resp, body := do(t, c, method, url, "x", DefaultHeader, "k")
		if resp.StatusCode != 200 || body != "a" || resp.Header.Get("Got-Peer") != fugetls.ProxyID("proxy").String() {
			t.Fatalf("%s over TLS: %d %q, owner saw peer %q", method, resp.StatusCode, body, resp.Header.Get("Got-Peer"))
		}
	}

	for _, tc := range []struct {
		name  string
		owner *testOwner
	}{
		{"another CA", startTLSOwner(t, "stranger", loadSource(t, other, fugetls.OwnerBase("ns", "a")))},
		{"not an owner", startTLSOwner(t, "manager", loadSource(t, dir, fugetls.ManagerBase))},
		{"plain HTTP", quietOwner(t)},
		{"black hole", &testOwner{name: "hole", addr: blackHole(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bal.set(to(tc.owner.addr, 2), good.addr, tc.owner.addr)
			before := p.Stats()
			for _, method := range []string{"GET", "POST"} {
				if resp, body := do(t, c, method, url, "x", DefaultHeader, "k"); resp.StatusCode != 503 || body != msgGiveUp {
					t.Errorf("%s: %d %q, want 503 %q", method, resp.StatusCode, body, msgGiveUp)
				}
			}
			if n := tc.owner.hits.Load(); n != 0 {
				t.Errorf("the owner served %d requests", n)
			}
			s := p.Stats()
			if s.Refused-before.Refused < 2 || s.UpstreamErrors != before.UpstreamErrors {
				t.Errorf("stats %+v after %+v: want refused connections and no upstream errors", s, before)
			}
		})
	}
}
