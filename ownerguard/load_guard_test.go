package ownerguard

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// A guard counts each request it admits toward its Owner's load, in the
// key's range group, and none that it refuses.
func TestGuardCountsAdmittedRequests(t *testing.T) {
	o, err := NewOwner(OwnerConfig{Managers: []string{"127.0.0.1:1"}, Namespace: testNS, Name: testName, Addr: testAddr, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(o, GuardConfig{Name: testName, Header: DefaultKeyHeader})
	if err != nil {
		t.Fatal(err)
	}
	h := g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(key string) int {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Header.Set(DefaultKeyHeader, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	total := func() (n uint64) {
		for g := range o.load.counts {
			n += o.load.counts[g].Load()
		}
		return n
	}
	if code := serve("k"); code != http.StatusMisdirectedRequest || total() != 0 {
		t.Fatalf("not held: %d, counted %d; want 421 and nothing counted", code, total())
	}
	// Hold the whole circle.
	tab := ring.NewTable(slot{Held: true, Gen: 1})
	o.view.Store(newView(tab, math.MaxInt64))
	for range 3 {
		if code := serve("k"); code != http.StatusOK {
			t.Fatalf("held: %d", code)
		}
	}
	if c := o.load.counts[lease.LoadGroup(ring.HashString("k"))].Load(); c != 3 || total() != 3 {
		t.Fatalf("counted %d in the key's group, %d in all; want 3 and 3", c, total())
	}
}
