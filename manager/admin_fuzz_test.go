package manager

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"reflect"
	"slices"
	"testing"
	"time"
)

// fuzzAdminServer starts a single-node manager serving namespace "ns" and
// returns its admin handler once it leads.
func fuzzAdminServer(f testing.TB) http.Handler {
	s := startTestNode(f, testNodeConfig(f, "n1", "ns", 64, 3*time.Second))
	// A node creates its configured namespaces before it leads.
	waitLeading(f, s, 20*time.Second)
	h := s.Handler()
	if code, list := fuzzNamespaces(h); code != http.StatusOK || !slices.Contains(list, "ns") {
		f.Fatalf("the leader lists namespaces %v (status %d), want ns among them", list, code)
	}
	return h
}

// fuzzServe runs one admin request through h.
func fuzzServe(h http.Handler, method, target string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// fuzzNamespaces lists the namespaces' names and settings through h.
func fuzzNamespaces(h http.Handler) (int, []string) {
	w := fuzzServe(h, http.MethodGet, "/v1/namespaces", nil)
	var out struct{ Namespaces []namespaceJSON }
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		return w.Code, nil
	}
	var list []string
	for _, n := range out.Namespaces {
		b, _ := json.Marshal(n)
		list = append(list, n.Name, string(b))
	}
	return w.Code, list
}

// FuzzAdminAPI drives the admin API of a running single-node manager with
// fuzzed JSON bodies and path values. It checks that
//   - decodeBody refuses with ErrBadRequest, and what it accepts encodes
//     and decodes again to the same value;
//   - POST /v1/namespaces answers 201, 400 or 409 (the name "ns" is
//     taken), never a server error; a refusal is a JSON error and leaves
//     the namespaces as they were; an accepted namespace comes back
//     normalized (its settings pass the validation again unchanged), is
//     listed, conflicts when posted again, and can be deleted;
//   - the namespace routes answer a fuzzed {ns} and {name} without a server
//     error: 200 for "ns", 404 for a namespace or owner that does not
//     exist, and change nothing.
func FuzzAdminAPI(f *testing.F) {
	f.Add([]byte(`{"name":"users","ring_size":1024,"header":"X-User-Id","lease_duration":"5s"}`), "ns", "a")
	f.Add([]byte(`{"name":"carts"}`), "carts", "o-1")
	f.Add([]byte(`{"name":"ns"}`), "ns", "")
	f.Add([]byte(`{"name":"x","ring_size":100}`), "x", "a")
	f.Add([]byte(`{"name":"x","lease_duration":"-1s"}`), "..", "a/b")
	f.Add([]byte(`{"name":"x","lease_duration":"1ns"}`), "", "a")
	f.Add([]byte(`{"name":"x","header":"X Key"}`), "a/b", "%")
	f.Add([]byte(`{"name":"a b"}`), "a b", "a b")
	f.Add([]byte(`{"name":"x","extra":1}`), ".", ".")
	f.Add([]byte(`{"name":"x"} {"name":"y"}`), "x", "a")
	f.Add([]byte(`{"id":"n2","raft_addr":"127.0.0.1:1","grpc_addr":"127.0.0.1:2","http_addr":"127.0.0.1:3"}`), "n2", "n2")
	f.Add([]byte(`[]`), "\x00", "\xff")
	f.Add([]byte(`{"name":".."}`), ".", "..")
	h := fuzzAdminServer(f)
	const t0 = 3 * time.Second // the server's default lease duration

	f.Fuzz(func(t *testing.T, body []byte, ns, name string) {
		// decodeBody alone.
		for _, v := range []any{&namespaceJSON{}, &joinRequest{}} {
			err := decodeBody(httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)), v)
			if err != nil {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("decodeBody(%q) = %v, not an ErrBadRequest", body, err)
				}
				continue
			}
			again := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			b, _ := json.Marshal(v)
			if err := decodeBody(httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(b)), again); err != nil || !reflect.DeepEqual(again, v) {
				t.Fatalf("decodeBody(%q) = %+v, which encodes as %s and decodes as %+v, %v", body, v, b, again, err)
			}
		}

		code, before := fuzzNamespaces(h)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/namespaces: %d", code)
		}
		unchanged := func(what string) {
			t.Helper()
			if _, after := fuzzNamespaces(h); !slices.Equal(after, before) {
				t.Fatalf("%s changed the namespaces: %q, then %q", what, before, after)
			}
		}

		// POST /v1/namespaces.
		w := fuzzServe(h, http.MethodPost, "/v1/namespaces", body)
		switch w.Code {
		case http.StatusCreated:
			var got namespaceJSON
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("201 with body %q: %v", w.Body, err)
			}
			d, err := time.ParseDuration(got.LeaseDuration)
			if err != nil {
				t.Fatalf("created %+v: lease duration: %v", got, err)
			}
			bi, err := time.ParseDuration(got.BalanceInterval)
			if err != nil {
				t.Fatalf("created %+v: balance interval: %v", got, err)
			}
			nc := NamespaceConfig{Name: got.Name, RingSize: got.RingSize, Header: got.Header, LeaseDuration: d,
				Balance: got.Balance, BalanceInterval: bi, BalanceMaxMoves: got.BalanceMaxMoves, BalanceMinLoad: got.BalanceMinLoad}
			norm := nc
			if err := norm.defaults(Config{LeaseDuration: t0}); err != nil || norm != nc {
				t.Fatalf("created %+v, which validates as %+v, %v", nc, norm, err)
			}
			if _, list := fuzzNamespaces(h); !slices.Contains(list, got.Name) {
				t.Fatalf("created %q, listed %q", got.Name, list)
			}
			if w := fuzzServe(h, http.MethodPost, "/v1/namespaces", w.Body.Bytes()); w.Code != http.StatusConflict {
				t.Fatalf("created %q, then posting it again: %d %s", got.Name, w.Code, w.Body)
			}
			if w := fuzzServe(h, http.MethodDelete, "/v1/namespaces/"+url.PathEscape(got.Name), nil); w.Code != http.StatusNoContent {
				t.Fatalf("created %q, then deleting it: %d %s", got.Name, w.Code, w.Body)
			}
			unchanged("creating and deleting " + got.Name)
		case http.StatusBadRequest, http.StatusConflict:
			var e apiError
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("POST %q: %d with body %q, not a JSON error", body, w.Code, w.Body)
			}
			unchanged("a refused POST")
		default:
			t.Fatalf("POST /v1/namespaces %q: %d %s", body, w.Code, w.Body)
		}

		// Path values. A name that the mux would clean (empty, ".", "..",
		// or one whose unescaped form has them) is redirected instead.
		base := "/v1/namespaces/" + url.PathEscape(ns)
		clean := ns != "" && ns != "." && ns != ".." && path.Clean("/"+ns) == "/"+ns
		cleanName := clean && name != "" && name != "." && name != ".." && path.Clean("/"+name) == "/"+name
		check := func(method, target string, plain bool, want int) {
			t.Helper()
			w := fuzzServe(h, method, target, nil)
			switch {
			case w.Code >= 500:
				t.Fatalf("%s %s: %d %s", method, target, w.Code, w.Body)
			case plain && w.Code != want:
				t.Fatalf("%s %s: %d %s, want %d", method, target, w.Code, w.Body, want)
			}
			unchanged(method + " " + target)
		}
		found := http.StatusNotFound
		if ns == "ns" {
			found = http.StatusOK
		}
		for _, sub := range []string{"/ring", "/leases", "/owners", "/view"} {
			check(http.MethodGet, base+sub, clean, found)
		}
		check(http.MethodPost, base+"/owners/"+url.PathEscape(name)+"/drain", cleanName, http.StatusNotFound)
		if ns != "ns" {
			check(http.MethodDelete, base, clean, http.StatusNotFound)
		}
	})
}
