package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/proxy"
)

const defaultTestTimeout = 20 * time.Second

// lineWriter hands each write to a channel, so that the test can wait for
// the address line without polling.
type lineWriter struct{ lines chan string }

func (w lineWriter) Write(p []byte) (int, error) {
	w.lines <- string(p)
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func envFunc(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func TestLoad(t *testing.T) {
	s, err := load(nil, envFunc(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.ListenAddr != "127.0.0.1:8080" || c.AdminAddr != "127.0.0.1:8081" || !slices.Equal(c.Managers, []string{defaultManagers}) ||
		c.Namespace != "default" || c.Header != "X-Fuge-Key" || c.MissingKey != proxy.MissingKeyReject ||
		c.Balance != proxy.BalanceLease || c.RetryBudget != 10*time.Second || c.BackoffBase != 5*time.Millisecond ||
		c.MaxHeaderBytes != 16<<10 || c.MaxBodyBytes != 4<<20 || c.MaxConnsPerIP != 0 || c.SpinWait != proxy.DefaultSpinWait {
		t.Fatalf("defaults: %+v", c)
	}
	if s, err := load([]string{"--spin-wait", "0"}, envFunc(nil)); err != nil || s.cfg.SpinWait >= 0 {
		t.Fatalf("--spin-wait 0: %v %v, want a negative SpinWait (off)", s.cfg.SpinWait, err)
	}
	if s, err := load(nil, envFunc(map[string]string{"FUGE_PROXY_SPIN_WAIT": "20us"})); err != nil || s.cfg.SpinWait != 20*time.Microsecond {
		t.Fatalf("FUGE_PROXY_SPIN_WAIT=20us: %v %v", s.cfg.SpinWait, err)
	}
	if s.tls != (fugetls.Options{Dir: fugetls.DefaultDir}) || s.backendTLS {
		t.Fatalf("TLS defaults: %+v, backend %v; want mutual TLS from %s to the managers only", s.tls, s.backendTLS, fugetls.DefaultDir)
	}

	env := map[string]string{
		"FUGE_PROXY_NAMESPACE":      "users",
		"FUGE_PROXY_HEADER":         "X-User",
		"FUGE_PROXY_MANAGERS":       "m1:1, m2:2",
		"FUGE_PROXY_MAX_BODY_BYTES": "64KiB",
		"FUGE_PROXY_BALANCE":        "round-robin",
		"FUGE_PROXY_LISTEN":         "",
		"FUGE_PROXY_TLS_DIR":        "/etc/fuge",
		"FUGE_PROXY_BACKEND_TLS":    "true",
		"FUGE_PROXY_MAX_CONNS":      "100",
	}
	s, err = load([]string{"--header", "X-Tenant", "--retry-budget", "500ms", "--missing-key", "round-robin", "--max-conns-per-ip", "10"}, envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	c = s.cfg
	if c.Namespace != "users" || c.Header != "X-Tenant" || !slices.Equal(c.Managers, []string{"m1:1", "m2:2"}) ||
		c.MaxBodyBytes != 64<<10 || c.Balance != proxy.BalanceRoundRobin || c.RetryBudget != 500*time.Millisecond ||
		c.MissingKey != proxy.MissingKeyRoundRobin || c.ListenAddr != "127.0.0.1:8080" || c.MaxConns != 100 || c.MaxConnsPerIP != 10 {
		t.Fatalf("flags over environment over defaults: %+v", c)
	}
	if s.tls.Dir != "/etc/fuge" || !s.backendTLS {
		t.Fatalf("TLS from the environment: %+v, backend %v", s.tls, s.backendTLS)
	}
	if s, err = load([]string{"--insecure"}, envFunc(nil)); err != nil || !s.tls.Insecure {
		t.Fatalf("--insecure: %+v %v", s.tls, err)
	}

	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--balance", "random"}, nil, "balance"},
		{[]string{"--missing-key", "drop"}, nil, "missing-key"},
		{nil, map[string]string{"FUGE_PROXY_MAX_BODY_BYTES": "lots"}, "FUGE_PROXY_MAX_BODY_BYTES"},
		{[]string{"--managers", ","}, nil, "managers"},
		{[]string{"--retry-budget", "-1s"}, nil, "retry budget"},
		{[]string{"extra"}, nil, "extra"},
		{[]string{"--tls-ca", "ca.crt"}, nil, "--tls-cert"},
		{[]string{"--insecure", "--backend-tls"}, nil, "--insecure"},
		{[]string{"--max-conns", "100", "--max-conns-per-ip", "100"}, nil, "per IP"},
		{[]string{"--spin-wait", "-1us"}, nil, "--spin-wait"},
		{[]string{"--spin-wait", "2ms"}, nil, "spin wait"},
	} {
		if _, err := load(tc.args, envFunc(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("load(%q, %v) = %v, want an error about %s", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestHelpAndBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, envFunc(nil), &out, &errOut); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"--listen  [FUGE_PROXY_LISTEN]", "--missing-key", "(default 10s)", "--max-body-bytes",
		"--max-conns-per-ip  [FUGE_PROXY_MAX_CONNS_PER_IP]", "--tls-dir  [FUGE_PROXY_TLS_DIR]", "(default fuge-certs)",
		"--insecure  [FUGE_PROXY_INSECURE]", "--backend-tls  [FUGE_PROXY_BACKEND_TLS]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"--balance", "random"}, envFunc(nil), &out, &errOut); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	if !strings.Contains(errOut.String(), "balance") {
		t.Fatalf("stderr %q", errOut.String())
	}
}

// running is fuge-proxy started through run.
type running struct {
	proxy, admin string // bound addresses
	stderr       *syncBuffer
	stop         func() int // cancels as a signal would; the exit code
}

// startRun starts fuge-proxy through run on 127.0.0.1 and waits for the
// address line and for /healthz to answer 200 (the Lookup has the table).
func startRun(t *testing.T, env map[string]string, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stdout := lineWriter{make(chan string, 16)}
	r := &running{stderr: &syncBuffer{}}
	args = append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "debug"}, args...)
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, envFunc(env), stdout, r.stderr) }()
	var line string
	select {
	case line = <-stdout.lines:
	case code := <-done:
		t.Fatalf("run exited %d: %s", code, r.stderr.String())
	case <-time.After(defaultTestTimeout):
		t.Fatal("no address line")
	}
	match := regexp.MustCompile(`proxy (\S+), admin (\S+)\n$`).FindStringSubmatch(line)
	if match == nil {
		t.Fatalf("address line %q", line)
	}
	r.proxy, r.admin = match[1], match[2]
	r.stop = func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(defaultTestTimeout):
			t.Fatal("run did not stop")
			return -1
		}
	}
	fugetest.Eventually(t, "healthz", func() bool {
		code, _, _ := get(t, "http://"+r.admin+"/healthz", "")
		return code == 200
	})
	return r
}

// get sends a GET with the routing header set to key (unless empty) and
// returns the status, the body and the response's headers.
func get(t *testing.T, url, key string) (int, string, http.Header) {
	t.Helper()
	c := &http.Client{Timeout: defaultTestTimeout}
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("X-Fuge-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// serveOwner serves an owner on 127.0.0.1, over TLS with tc when it is not
// nil, that answers "owner a" and echoes the generation it was sent and
// the client's TLS identity.
func serveOwner(t *testing.T, tc *tls.Config) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	owner := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetBytesV("Got-Generation", ctx.Request.Header.Peek(proxy.GenerationHeader))
		if cs := ctx.TLSConnectionState(); cs != nil {
			if id, err := fugetls.PeerID(*cs); err == nil {
				ctx.Response.Header.Set("Got-Peer", id.String())
			}
		}
		ctx.SetBodyString("owner a")
	}}
	go owner.Serve(ln)
	t.Cleanup(func() { owner.Shutdown() })
	return addr
}

// TestRunProxies starts fuge-proxy through run with --insecure against a
// real manager without TLS and one owner, waits for /healthz, proxies a
// request and stops as a signal would.
func TestRunProxies(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	m.Owner(t, "a", serveOwner(t, nil), nil)
	m.Settled(t, m.Lookup(t, "test", nil), "a")

	r := startRun(t, map[string]string{"FUGE_PROXY_MANAGERS": m.GRPCAddr, "FUGE_PROXY_NAMESPACE": m.NS}, "--insecure")
	if !strings.Contains(r.stderr.String(), fugetls.InsecureWarning("fuge-proxy")) {
		t.Errorf("--insecure without its warning on stderr:\n%s", r.stderr.String())
	}
	if code, body, h := get(t, "http://"+r.proxy+"/x", "alice"); code != 200 || body != "owner a" ||
		h.Get("Got-Generation") == "" || h.Get("Got-Generation") == "0" {
		t.Fatalf("proxied: %d %q generation %q", code, body, h.Get("Got-Generation"))
	}
	if code, _, _ := get(t, "http://"+r.proxy+"/x", ""); code != 400 {
		t.Fatalf("no key: %d", code)
	}
	_, metrics, _ := get(t, "http://"+r.admin+"/metrics", "")
	if !strings.Contains(metrics, `fuge_proxy_requests_total{code="2xx"} 1`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
	if code := r.stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, r.stderr.String())
	}
}

// TestRunTLS runs fuge-proxy with its defaults, mutual TLS to a manager
// that requires it, and --backend-tls to an owner that admits proxies
// only: the Lookup gets the table and the owner sees the proxy's identity.
func TestRunTLS(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{TLS: true})
	owner := m.Source(t, fugetls.OwnerID(m.NS, "a"))
	m.Owner(t, "a", serveOwner(t, owner.ServerConfig(false, fugetls.RoleProxy)), nil)
	m.Settled(t, m.Lookup(t, "test", nil), "a")

	env := map[string]string{"FUGE_PROXY_MANAGERS": m.GRPCAddr, "FUGE_PROXY_NAMESPACE": m.NS, "FUGE_PROXY_TLS_DIR": m.CertDir}
	r := startRun(t, env, "--backend-tls")
	code, body, h := get(t, "http://"+r.proxy+"/x", "alice")
	if code != 200 || body != "owner a" || h.Get("Got-Generation") == "" || h.Get("Got-Peer") != fugetls.ProxyID("proxy").String() {
		t.Fatalf("proxied over TLS: %d %q, generation %q, the owner saw %q", code, body, h.Get("Got-Generation"), h.Get("Got-Peer"))
	}
	if code := r.stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, r.stderr.String())
	}
}

// TestRunWithoutCertificates: with TLS on (the default) and no
// certificates, fuge-proxy stops at once and names the missing file and
// the command that makes them.
func TestRunWithoutCertificates(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--tls-dir", dir, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, envFunc(nil), &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), filepath.Join(dir, "ca.crt")) || !strings.Contains(errOut.String(), "fugectl certs init") {
		t.Fatalf("exit %d, stderr %q; want 2 naming %s and fugectl certs init", code, errOut.String(), filepath.Join(dir, "ca.crt"))
	}
	if out.Len() != 0 {
		t.Fatalf("printed %q: it started", out.String())
	}
}
