package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fuge-project/fuge/internal/fugetest"
)

// defaultTestTimeout bounds each call; a call that hangs fails the test.
const defaultTestTimeout = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// server is a test manager counting its requests.
type server struct {
	*httptest.Server
	n atomic.Int32
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) addr() string { return s.Listener.Addr().String() }

// echo answers 200 with the request line and body.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	io.WriteString(w, `{"seen":"`+r.Method+" "+r.URL.EscapedPath()+" "+strings.ReplaceAll(string(body), `"`, `'`)+`"}`)
}

// hangUp closes the connection after reading the request: the request
// reached the manager, but no answer came.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func mustNew(t *testing.T, addrs ...string) *Client {
	t.Helper()
	c, err := New(addrs, nil)
	if err != nil {
		t.Fatalf("New(%q) = %v", addrs, err)
	}
	return c
}

type seen struct {
	Seen string `json:"seen"`
}

func TestCallDecodes(t *testing.T) {
	s := newServer(t, echo)
	var out seen
	raw, err := mustNew(t, s.addr()).Call(testContext(t), http.MethodPost, NamespacePath("a b", "owners", "x/y", "drain"), Namespace{Name: "n"}, &out)
	if err != nil {
		t.Fatalf("Call() = %v", err)
	}
	want := `POST /v1/namespaces/a%20b/owners/x%2Fy/drain {'name':'n'}`
	if out.Seen != want || !strings.Contains(string(raw), want) {
		t.Errorf("Call() = %s, decoded %q; want %q", raw, out.Seen, want)
	}
}

// TestRedirect: a follower answers a write with 307 to the leader, and the
// body goes along.
func TestRedirect(t *testing.T) {
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		leader := newServer(t, echo)
		follower := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, leader.URL+r.URL.Path, code)
		})
		var out seen
		_, err := mustNew(t, follower.addr()).Call(testContext(t), http.MethodPost, NamespacesPath, Namespace{Name: "n", RingSize: 8}, &out)
		if want := `POST /v1/namespaces {'name':'n','ring_size':8}`; err != nil || out.Seen != want {
			t.Errorf("%d: Call() = %v, leader saw %q; want %q", code, err, out.Seen, want)
		}
	}
}

func TestFallback(t *testing.T) {
	noLeader := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"manager: no leader"}`)
	}
	for _, c := range []struct {
		name     string
		first    http.HandlerFunc // nil: the address refuses connections
		method   string
		wantNext int32 // requests the second manager sees
		wantErr  string
	}{
		{name: "refused GET", method: http.MethodGet, wantNext: 1},
		{name: "refused POST", method: http.MethodPost, wantNext: 1},
		{name: "no leader GET", first: noLeader, method: http.MethodGet, wantNext: 1},
		{name: "no leader POST", first: noLeader, method: http.MethodPost, wantNext: 1},
		{name: "hang-up GET", first: hangUp, method: http.MethodGet, wantNext: 1},
		{name: "hang-up POST is not repeated", first: hangUp, method: http.MethodPost, wantNext: 0, wantErr: "EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			first := fugetest.RefusedAddr(t)
			if c.first != nil {
				first = newServer(t, c.first).addr()
			}
			next := newServer(t, echo)
			_, err := mustNew(t, first, next.addr()).Call(testContext(t), c.method, ClusterPath, nil, nil)
			if c.wantErr == "" && err != nil {
				t.Errorf("Call() = %v, want success from the second manager", err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("Call() = %v, want an error with %q", err, c.wantErr)
			}
			if n := next.n.Load(); n != c.wantNext {
				t.Errorf("the second manager saw %d requests, want %d", n, c.wantNext)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	status := func(code int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			io.WriteString(w, body)
		}
	}
	dead1, dead2 := fugetest.RefusedAddr(t), fugetest.RefusedAddr(t)
	for _, c := range []struct {
		name       string
		addrs      []string
		wantStatus int // 0: not an APIError
		wantMsg    string
	}{
		{"json error", []string{newServer(t, status(409, `{"error":"manager: namespace exists"}`)).addr()}, 409, "manager: namespace exists"},
		{"text error", []string{newServer(t, status(404, "404 page not found\n")).addr()}, 404, "404 page not found (HTTP 404)"},
		{"empty error", []string{newServer(t, status(502, "")).addr()}, 502, "Bad Gateway (HTTP 502)"},
		{"no leader anywhere", []string{
			newServer(t, status(503, `{"error":"no leader at a"}`)).addr(), dead1,
			newServer(t, status(503, `{"error":"no leader at b"}`)).addr(), dead2}, 503, "no leader at b"},
		{"unreachable", []string{dead1, dead2}, 0, "no manager reachable (http://" + dead1},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mustNew(t, c.addrs...).Call(testContext(t), http.MethodGet, ClusterPath, nil, nil)
			var apiErr *APIError
			switch {
			case err == nil:
				t.Fatalf("Call() = nil, want %q", c.wantMsg)
			case c.wantStatus != 0 && (!errors.As(err, &apiErr) || apiErr.Status != c.wantStatus || apiErr.Message != c.wantMsg):
				t.Errorf("Call() = %#v, want APIError %d %q", err, c.wantStatus, c.wantMsg)
			case c.wantStatus == 0 && (!errors.Is(err, ErrUnreachable) || !strings.HasPrefix(err.Error(), c.wantMsg) || !strings.Contains(err.Error(), dead2)):
				t.Errorf("Call() = %v, want ErrUnreachable naming both addresses", err)
			}
		})
	}
}

func TestBadAnswer(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>") })
	var out seen
	if _, err := mustNew(t, s.addr()).Call(testContext(t), http.MethodGet, ClusterPath, nil, &out); err == nil || !strings.Contains(err.Error(), "bad answer") {
		t.Errorf("Call() = %v, want a bad answer error", err)
	}
}

func TestNew(t *testing.T) {
	for _, c := range []struct {
		addrs []string
		tls   bool
		want  []string // nil: an error
	}{
		{[]string{"127.0.0.1:7402"}, false, []string{"http://127.0.0.1:7402"}},
		{[]string{"127.0.0.1:7402"}, true, []string{"https://127.0.0.1:7402"}},
		{[]string{" a:1 ", "", "http://b:2/"}, false, []string{"http://a:1", "http://b:2"}},
		{[]string{" a:1 ", "", "https://b:2/"}, true, []string{"https://a:1", "https://b:2"}},
		{[]string{"https://b:2/"}, false, nil},
		{[]string{"a:1", "http://b:2/"}, true, nil},
		{[]string{"", " "}, false, nil},
		{[]string{"ftp://a:1"}, false, nil},
		{[]string{"http://"}, false, nil},
	} {
		var conf *tls.Config
		if c.tls {
			conf = &tls.Config{}
		}
		got, err := New(c.addrs, conf)
		switch {
		case c.want == nil && err == nil:
			t.Errorf("New(%q, tls %v) = %q, want an error", c.addrs, c.tls, got.bases)
		case c.want != nil && (err != nil || strings.Join(got.bases, " ") != strings.Join(c.want, " ")):
			t.Errorf("New(%q, tls %v) = %v, %v; want %q", c.addrs, c.tls, got, err, c.want)
		}
	}
}
