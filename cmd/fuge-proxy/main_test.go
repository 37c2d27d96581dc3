package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

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
		c.MaxHeaderBytes != 16<<10 || c.MaxBodyBytes != 4<<20 {
		t.Fatalf("defaults: %+v", c)
	}

	env := map[string]string{
		"FUGE_PROXY_NAMESPACE":      "users",
		"FUGE_PROXY_HEADER":         "X-User",
		"FUGE_PROXY_MANAGERS":       "m1:1, m2:2",
		"FUGE_PROXY_MAX_BODY_BYTES": "64KiB",
		"FUGE_PROXY_BALANCE":        "round-robin",
		"FUGE_PROXY_LISTEN":         "",
	}
	s, err = load([]string{"--header", "X-Tenant", "--retry-budget", "500ms", "--missing-key", "round-robin"}, envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	c = s.cfg
	if c.Namespace != "users" || c.Header != "X-Tenant" || !slices.Equal(c.Managers, []string{"m1:1", "m2:2"}) ||
		c.MaxBodyBytes != 64<<10 || c.Balance != proxy.BalanceRoundRobin || c.RetryBudget != 500*time.Millisecond ||
		c.MissingKey != proxy.MissingKeyRoundRobin || c.ListenAddr != "127.0.0.1:8080" {
		t.Fatalf("flags over environment over defaults: %+v", c)
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
	for _, want := range []string{"--listen  [FUGE_PROXY_LISTEN]", "--missing-key", "(default 10s)", "--max-body-bytes"} {
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

// TestRunProxies starts fuge-proxy through run against a real manager and
// one owner, waits for /healthz, proxies a request and stops as a signal
// would.
func TestRunProxies(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	owner := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetBytesV("Got-Generation", ctx.Request.Header.Peek(proxy.GenerationHeader))
		ctx.SetBodyString("owner a")
	}}
	go owner.Serve(ln)
	t.Cleanup(func() { owner.Shutdown() })
	m.Owner(t, "a", ln.Addr().String(), nil)
	m.Settled(t, m.Lookup(t, "test", nil), "a")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := lineWriter{make(chan string, 16)}
	var stderr syncBuffer
	env := map[string]string{"FUGE_PROXY_MANAGERS": m.GRPCAddr, "FUGE_PROXY_NAMESPACE": m.NS}
	args := []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "debug"}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, envFunc(env), stdout, &stderr) }()

	var line string
	select {
	case line = <-stdout.lines:
	case code := <-done:
		t.Fatalf("run exited %d: %s", code, stderr.String())
	case <-time.After(defaultTestTimeout):
		t.Fatal("no address line")
	}
	match := regexp.MustCompile(`proxy (\S+), admin (\S+)\n$`).FindStringSubmatch(line)
	if match == nil {
		t.Fatalf("address line %q", line)
	}
	c := &http.Client{Timeout: defaultTestTimeout}
	get := func(url string, key string) (int, string, string) {
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
		return resp.StatusCode, string(b), resp.Header.Get("Got-Generation")
	}
	fugetest.Eventually(t, "healthz", func() bool {
		code, _, _ := get("http://"+match[2]+"/healthz", "")
		return code == 200
	})
	if code, body, gen := get("http://"+match[1]+"/x", "alice"); code != 200 || body != "owner a" || gen == "" || gen == "0" {
		t.Fatalf("proxied: %d %q generation %q", code, body, gen)
	}
	if code, _, _ := get("http://"+match[1]+"/x", ""); code != 400 {
		t.Fatalf("no key: %d", code)
	}
	_, metrics, _ := get("http://"+match[2]+"/metrics", "")
	if !strings.Contains(metrics, `fuge_proxy_requests_total{code="2xx"} 1`) {
		t.Fatalf("metrics:\n%s", metrics)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("run did not stop")
	}
}
