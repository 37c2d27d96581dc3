package ownerguard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A guard built on an Owner without a header of its own reads the key from
// the header the manager names for the namespace, and refuses everything as
// not held (421) until the Owner has heard it.
func TestGuardFollowsOwnersRoutingHeader(t *testing.T) {
	o, err := NewOwner(OwnerConfig{
		Managers: []string{"127.0.0.1:1"}, Namespace: testNS, Name: testName, Addr: testAddr,
		LeaseDuration: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(o, GuardConfig{Name: testName})
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := NewGuard(o, GuardConfig{Name: testName, Header: "X-Fixed"})
	if err != nil {
		t.Fatal(err)
	}
	h := g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler ran") }))
	serve := func(hdr string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Header.Set(hdr, "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if g.RoutingHeader() != "" {
		t.Errorf("RoutingHeader before the manager named one = %q", g.RoutingHeader())
	}
	if code, _ := serve(DefaultKeyHeader); code != http.StatusMisdirectedRequest {
		t.Errorf("before the header is known: %d, want 421", code)
	}
	o.setRoutingHeader("X-Tenant-Id")
	if got := g.RoutingHeader(); got != "X-Tenant-Id" {
		t.Errorf("RoutingHeader = %q, want X-Tenant-Id", got)
	}
	if got := fixed.RoutingHeader(); got != "X-Fixed" {
		t.Errorf("a guard with its own header follows the namespace's: %q", got)
	}
	if code, body := serve(DefaultKeyHeader); code != http.StatusBadRequest || !strings.Contains(body, "X-Tenant-Id") {
		t.Errorf("key in %s only: %d %q, want 400 naming X-Tenant-Id", DefaultKeyHeader, code, body)
	}
	if code, _ := serve("X-Tenant-Id"); code != http.StatusMisdirectedRequest {
		t.Errorf("key in X-Tenant-Id, not held: %d, want 421", code)
	}
	// A manager naming an invalid header changes nothing.
	o.setRoutingHeader("bad header\r\n")
	o.setRoutingHeader("grpc-bin")
	if got := g.RoutingHeader(); got != "X-Tenant-Id" {
		t.Errorf("after invalid names: RoutingHeader = %q, want X-Tenant-Id", got)
	}
}
