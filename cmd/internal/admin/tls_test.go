package admin

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
)

// certs writes a development CA and its certificates into a temporary
// directory.
func certs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := fugetls.InitDir(dir, fugetls.InitOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func source(t *testing.T, dir, base string) *fugetls.Source {
	t.Helper()
	s, err := fugetls.NewSource(fugetls.DirFiles(dir, base))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newTLSServer is a test manager on https with the certificate of base,
// asking for (not requiring) a client certificate, as the manager's admin
// API does.
func newTLSServer(t *testing.T, dir, base string, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		h(w, r)
	}))
	s.Listener = tls.NewListener(s.Listener, source(t, dir, base).ServerConfig(true))
	s.Start()
	s.URL = "https://" + s.Listener.Addr().String()
	t.Cleanup(s.Close)
	return s
}

// whoAmI answers with the peer's Fuge ID and the bearer token it sent.
func whoAmI(w http.ResponseWriter, r *http.Request) {
	id := "none"
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		if pid, err := fugetls.PeerID(*r.TLS); err == nil {
			id = pid.String()
		}
	}
	w.Write([]byte(`{"seen":"` + r.Method + " " + r.URL.Path + " " + id + " " + r.Header.Get("Authorization") + `"}`))
}

func tlsClient(t *testing.T, dir string, addrs ...string) *Client {
	t.Helper()
	c, err := New(addrs, source(t, dir, fugetls.AdminBase).ClientConfig(fugetls.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLS: the client presents its certificate and the server sees its ID.
func TestTLS(t *testing.T) {
	dir := certs(t)
	s := newTLSServer(t, dir, fugetls.ManagerBase, whoAmI)
	var out seen
	if _, err := tlsClient(t, dir, s.addr()).Call(testContext(t), http.MethodGet, ClusterPath, nil, &out); err != nil {
		t.Fatalf("Call() = %v", err)
	}
	if want := "GET /v1/cluster spiffe://fuge/admin/fugectl "; out.Seen != want {
		t.Errorf("the server saw %q, want %q", out.Seen, want)
	}
}

// TestTLSRedirectKeepsHTTPS: a standby that names the leader with http://
// does not make the client speak plain http, and the token goes along.
func TestTLSRedirectKeepsHTTPS(t *testing.T) {
	dir := certs(t)
	leader := newTLSServer(t, dir, fugetls.ManagerBase, whoAmI)
	standby := newTLSServer(t, dir, fugetls.ManagerBase, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+leader.addr()+r.URL.Path, http.StatusTemporaryRedirect)
	})
	c := tlsClient(t, dir, standby.addr())
	c.SetToken("s3cret")
	var out seen
	if _, err := c.Call(testContext(t), http.MethodPost, NamespacesPath, Namespace{Name: "n"}, &out); err != nil {
		t.Fatalf("Call() = %v", err)
	}
	if want := "POST /v1/namespaces spiffe://fuge/admin/fugectl Bearer s3cret"; out.Seen != want {
		t.Errorf("the leader saw %q, want %q", out.Seen, want)
	}
}

// TestTLSOnlyManagers: a server whose certificate is not a manager's, or
// not from the client's CA, is refused before any request is sent.
func TestTLSOnlyManagers(t *testing.T) {
	dir, other := certs(t), certs(t)
	for _, c := range []struct {
		name, dir, base, want string
	}{
		{"proxy", dir, fugetls.ProxyBase, "role proxy"},
		{"other CA", other, fugetls.ManagerBase, "certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTLSServer(t, c.dir, c.base, whoAmI)
			_, err := tlsClient(t, dir, s.addr()).Call(testContext(t), http.MethodGet, ClusterPath, nil, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Call() = %v, want an error with %q", err, c.want)
			}
			if n := s.n.Load(); n != 0 {
				t.Errorf("the server saw %d requests, want none", n)
			}
		})
	}
}

// TestTLS401: the manager's answer to a client without the right
// credentials is an APIError with its message.
func TestTLS401(t *testing.T) {
	dir := certs(t)
	s := newTLSServer(t, dir, fugetls.ManagerBase, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"manager: this request needs a client certificate"}`))
	})
	_, err := tlsClient(t, dir, s.addr()).Call(testContext(t), http.MethodGet, ClusterPath, nil, nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Message != "manager: this request needs a client certificate" {
		t.Errorf("Call() = %#v, want the 401's message", err)
	}
}
