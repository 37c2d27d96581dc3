package ownerguard_test

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
)

// serveGuardedHTTP serves h behind a guard on fc (with mut applied) on
// 127.0.0.1 until the test ends.
func serveGuardedHTTP(t *testing.T, fc *fakeChecker, mut func(*ownerguard.GuardConfig), h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(newTestGuard(t, fc, mut).HTTP(h))
	t.Cleanup(srv.Close)
	return srv
}

func getKey(t *testing.T, url, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(ownerguard.DefaultKeyHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestHTTPLostReplacesResponse: the handler's status, headers and body are
// thrown away; headers set before the guard ran are kept.
func TestHTTPLostReplacesResponse(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	g := newTestGuard(t, fc, func(c *ownerguard.GuardConfig) { c.RetryAfter = 2500 * time.Millisecond })
	inner := g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "stale=1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"stale":true}`)
		fc.lose(heldKey)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Outer", "kept")
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	resp := getKey(t, srv.URL, heldKey)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "fuge: lease lost during the request\n" {
		t.Fatalf("got %d %q, want 503 and the guard's body", resp.StatusCode, body)
	}
	for k, want := range map[string]string{
		ownerguard.LostHeader:       "1",
		"X-Outer":                   "kept",
		"Set-Cookie":                "",
		"Content-Type":              "text/plain; charset=utf-8",
		"Retry-After":               "3",
		ownerguard.OwnerHeader:      guardName,
		ownerguard.GenerationHeader: "",
		"Content-Length":            "36",
		"X-Content-Type-Options":    "nosniff",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// TestHTTPStatusAndStreaming: the handler's status survives buffering, and
// a body larger than MaxBufferedBody streams through whole.
func TestHTTPStatusAndStreaming(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	chunk := strings.Repeat("x", 10)
	srv := serveGuardedHTTP(t, fc, func(c *ownerguard.GuardConfig) { c.MaxBufferedBody = 16 },
		func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			n := 1
			if r.URL.Path == "/big" {
				n = 10
			}
			for range n {
				if _, err := io.WriteString(w, chunk); err != nil {
					t.Errorf("write: %v", err)
				}
			}
		})
	for path, want := range map[string]int{"/small": 10, "/big": 100} {
		resp := getKey(t, srv.URL+path, heldKey)
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusAccepted || len(body) != want {
			t.Errorf("%s: %d, %d bytes, %v; want 202 and %d bytes", path, resp.StatusCode, len(body), err, want)
		}
		if got := resp.Header.Get(ownerguard.GenerationHeader); got != "7" {
			t.Errorf("%s: generation %q, want 7", path, got)
		}
	}
}

// TestHTTPLostBeforeCommit: a lease lost before the body outgrows the
// buffer still gets a clean 503, and the handler's writes fail.
func TestHTTPLostBeforeCommit(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	werr := make(chan error, 1)
	srv := serveGuardedHTTP(t, fc, func(c *ownerguard.GuardConfig) { c.MaxBufferedBody = 16 },
		func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "0123456789")
			fc.lose(heldKey)
			_, err := io.WriteString(w, "0123456789")
			werr <- err
		})
	resp := getKey(t, srv.URL, heldKey)
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "lease lost") {
		t.Errorf("got %d %q %v, want a complete 503", resp.StatusCode, body, err)
	}
	if err := <-werr; !errors.Is(err, ownerguard.ErrOwnershipLost) {
		t.Errorf("handler's write after loss: %v, want ErrOwnershipLost", err)
	}
}

// TestHTTPLostAfterCommit: once a response is under way it cannot be
// recalled; the guard breaks it so that the client does not take it for a
// complete answer, whether the loss shows at a write or only at the end.
func TestHTTPLostAfterCommit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(fc *fakeChecker, w http.ResponseWriter) error // returns the error of the write after the loss
	}{
		{"overflow then write", func(fc *fakeChecker, w http.ResponseWriter) error {
			_, _ = io.WriteString(w, strings.Repeat("x", 32))
			fc.lose(heldKey)
			_, err := io.WriteString(w, "more")
			return err
		}},
		{"overflow then return", func(fc *fakeChecker, w http.ResponseWriter) error {
			_, _ = io.WriteString(w, strings.Repeat("x", 32))
			fc.lose(heldKey)
			return ownerguard.ErrOwnershipLost
		}},
		{"flush then return", func(fc *fakeChecker, w http.ResponseWriter) error {
			_, _ = io.WriteString(w, "x")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			fc.lose(heldKey)
			return ownerguard.ErrOwnershipLost
		}},
		{"flusher then write", func(fc *fakeChecker, w http.ResponseWriter) error {
			_, _ = io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			fc.lose(heldKey)
			err := http.NewResponseController(w).Flush()
			if !errors.Is(err, ownerguard.ErrOwnershipLost) {
				_, err = io.WriteString(w, "more")
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
			werr := make(chan error, 1)
			srv := serveGuardedHTTP(t, fc, func(c *ownerguard.GuardConfig) { c.MaxBufferedBody = 16 },
				func(w http.ResponseWriter, r *http.Request) { werr <- tc.handler(fc, w) })
			// What the client sees depends on what had left the server's
			// buffers: no response, or a response cut short.
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set(ownerguard.DefaultKeyHeader, heldKey)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Header.Get(ownerguard.GenerationHeader) != "7" {
					t.Errorf("status %d, generation %q; want 200 and 7 (committed before the loss)",
						resp.StatusCode, resp.Header.Get(ownerguard.GenerationHeader))
				}
				if body, err := io.ReadAll(resp.Body); err == nil {
					t.Errorf("read a complete body of %d bytes; want the response broken", len(body))
				}
			}
			if err := <-werr; !errors.Is(err, ownerguard.ErrOwnershipLost) {
				t.Errorf("handler's write after loss: %v, want ErrOwnershipLost", err)
			}
		})
	}
}

// TestHTTPFlushStreams: a flush sends what was written at once.
func TestHTTPFlushStreams(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	proceed := make(chan struct{})
	srv := serveGuardedHTTP(t, fc, nil, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-proceed
		_, _ = io.WriteString(w, "second\n")
	})
	resp := getKey(t, srv.URL, heldKey)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(proceed)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
}

// TestHTTPHijack: a handler may take the connection; the guard checks the
// lease first, and does not touch the connection afterwards.
func TestHTTPHijack(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen, otherKey + "-held": 1})
	hijackErr := make(chan error, 1)
	srv := serveGuardedHTTP(t, fc, nil, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/lose" {
			fc.lose(heldKey)
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		hijackErr <- err
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = rw.Flush()
	})

	resp := getKey(t, srv.URL, heldKey)
	body, _ := io.ReadAll(resp.Body)
	if err := <-hijackErr; err != nil || string(body) != "hijacked" || resp.Header.Get(ownerguard.GenerationHeader) != "" {
		t.Errorf("held: hijack %v, body %q, header %v", err, body, resp.Header)
	}

	resp = getKey(t, srv.URL+"/lose", heldKey)
	body, _ = io.ReadAll(resp.Body)
	if err := <-hijackErr; !errors.Is(err, ownerguard.ErrOwnershipLost) {
		t.Errorf("lost: Hijack returned %v, want ErrOwnershipLost", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("lost: got %d %q, want 503", resp.StatusCode, body)
	}
}

// TestHTTPWriterReuse: a pooled writer carries nothing into the next
// request.
func TestHTTPWriterReuse(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	g := newTestGuard(t, fc, nil)
	h := g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/full":
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, strings.Repeat("y", 1000))
		case "/late":
			// As with net/http, a WriteHeader after a Write is too late.
			_, _ = w.Write([]byte("ok"))
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	for i, path := range []string{"/full", "/empty", "/full", "/late", "/empty"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set(ownerguard.DefaultKeyHeader, heldKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		wantCode, wantLen := http.StatusTeapot, 1000
		switch path {
		case "/empty":
			wantCode, wantLen = http.StatusOK, 0
		case "/late":
			wantCode, wantLen = http.StatusOK, 2
		}
		if w.Code != wantCode || w.Body.Len() != wantLen {
			t.Errorf("request %d (%s): %d, %d bytes; want %d, %d bytes", i, path, w.Code, w.Body.Len(), wantCode, wantLen)
		}
	}
}

// TestHTTPNoContext: with HTTPNoContext the handle reaches the handler
// through the ResponseWriter only, and the guard allocates nothing.
func TestHTTPNoContext(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	body := []byte("ok")
	var fromCtx, fromW bool
	h := newTestGuard(t, fc, func(c *ownerguard.GuardConfig) { c.HTTPNoContext = true }).HTTP(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, fromCtx = ownerguard.HandleFromContext(r.Context())
			_, fromW = ownerguard.HandleFromResponseWriter(w)
			_, _ = w.Write(body)
		}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(ownerguard.DefaultKeyHeader, heldKey)
	w := &nopWriter{h: http.Header{}}
	h.ServeHTTP(w, r)
	if fromCtx || !fromW || w.code != http.StatusOK {
		t.Errorf("handle from context %v (want false), from writer %v (want true), status %d", fromCtx, fromW, w.code)
	}
	// The sync.Pool drops a quarter of its items under the race detector;
	// AllocsPerRun's integer average still reads 0 if the guard allocates
	// only on such a miss.
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	if allocs != 0 {
		t.Errorf("guarded request allocates %v times", allocs)
	}
}

// nopWriter is a ResponseWriter that allocates nothing.
type nopWriter struct {
	h    http.Header
	code int
}

func (w *nopWriter) Header() http.Header  { return w.h }
func (w *nopWriter) WriteHeader(code int) { w.code = code }
func (w *nopWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}

// TestHTTPTrailers: trailers set after the body go out as trailers, not
// also as headers, though the guard sends the headers after the handler
// returned.
func TestHTTPTrailers(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	srv := serveGuardedHTTP(t, fc, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
	})
	resp := getKey(t, srv.URL, heldKey)
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Sum") != "" || resp.Trailer.Get("X-Sum") != "42" || resp.Trailer.Get("X-Late") != "yes" {
		t.Errorf("header %v, trailer %v; want X-Sum and X-Late as trailers only", resp.Header, resp.Trailer)
	}
}
