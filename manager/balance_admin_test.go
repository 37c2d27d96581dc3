package manager

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestPutBalance: PUT /v1/namespaces/{ns}/balance changes a namespace's
// policy after its creation (listed, and the leader's core runs it); a
// refused request names the field and changes nothing.
func TestPutBalance(t *testing.T) {
	h := fuzzAdminServer(t)
	_, before := fuzzNamespaces(h)
	for _, c := range []struct{ body, want string }{
		{`{"balance":"fast"}`, "balance"},
		{`{"balance":"seeds","balance_max_moves":65}`, "balance max moves"},
		{`{"balance":"seeds","balance_interval":"-1s"}`, "balance_interval"},
		{`{"balance":"seeds","balance_min_load":-1}`, "balance_min_load"},
		{`{"balance":"seeds","ring_size":8}`, "unknown field"},
	} {
		w := fuzzServe(h, http.MethodPut, "/v1/namespaces/ns/balance", []byte(c.body))
		var e apiError
		if err := json.Unmarshal(w.Body.Bytes(), &e); w.Code != http.StatusBadRequest || err != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("PUT %s: %d %s; want 400 naming %q", c.body, w.Code, w.Body, c.want)
		}
		if _, after := fuzzNamespaces(h); !slices.Equal(after, before) {
			t.Fatalf("refused PUT %s changed the namespaces: %q, then %q", c.body, before, after)
		}
	}
	if w := fuzzServe(h, http.MethodPut, "/v1/namespaces/nope/balance", []byte(`{"balance":"off"}`)); w.Code != http.StatusNotFound {
		t.Errorf("PUT of an unknown namespace: %d %s; want 404", w.Code, w.Body)
	}
	w := fuzzServe(h, http.MethodPut, "/v1/namespaces/ns/balance", []byte(`{"balance":"seeds","balance_max_moves":16}`))
	var got namespaceJSON
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil || got.Balance != BalanceSeeds || got.BalanceMaxMoves != 16 || got.RingSize != 64 {
		t.Fatalf("PUT seeds: %d %s", w.Code, w.Body)
	}
	w = fuzzServe(h, http.MethodGet, "/v1/namespaces", nil)
	var list struct{ Namespaces []namespaceJSON }
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list.Namespaces) != 1 || list.Namespaces[0] != got {
		t.Fatalf("listed %s; want %+v", w.Body, got)
	}
}
