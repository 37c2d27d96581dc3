package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
)

// testCerts is a certificate directory as fugectl certs init writes it,
// shared by the tests: the fake managers serve manager.crt, and fugectl
// presents admin.crt (FUGECTL_TLS_DIR).
var testCerts string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fugectl-test-certs-")
	if err == nil {
		testCerts = dir
		err = fugetls.InitDir(dir, fugetls.InitOptions{Now: time.Now()})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// now is the test's clock; the canned times below are relative to it.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// answer is a canned admin API response.
type answer struct {
	status int
	body   string
}

// The canned API, in the shapes of manager.Server.Handler.
func cannedAPI() map[string]answer {
	return map[string]answer{
		"GET /v1/cluster": {200, `{"node_id":"node1","role":"leader","leader_id":"node1",
			"leader_grpc":"127.0.0.1:7401","leader_http":"127.0.0.1:7402","term":3,"last_index":120,"commit_index":119,
			"lookup_streams":4,"standbys_in_contact":["node2"],
			"servers":[{"id":"node1","address":"127.0.0.1:7400","suffrage":"Voter"},
			{"id":"node2","address":"127.0.0.1:7410","suffrage":"Voter"},
			{"id":"node3","address":"127.0.0.1:7420","suffrage":"Nonvoter"}]}`},
		"GET /v1/namespaces": {200, `{"namespaces":[
			{"name":"default","ring_size":4096,"header":"X-Fuge-Key","lease_duration":"60s","balance":"fit"},
			{"name":"users","ring_size":1024,"header":"X-User-Id","lease_duration":"30s"}]}`},
		"GET /v1/namespaces/default/owners": {200, `{"namespace":"default","owners":[
			{"name":"b1","addr":"10.0.0.1:8080","vnodes":2048,"draining":false,"last_heard":"2026-01-02T03:04:03.2Z",
			 "load":1250.5,"load_reported":"2026-01-02T03:04:03.2Z","ring_share":0.6},
			{"name":"b2","addr":"10.0.0.2:8080","vnodes":2048,"draining":true,"last_heard":"2026-01-02T03:03:50Z",
			 "load":0,"load_reported":"","ring_share":0.4}],
			"balance":{"policy":"fit","rounds":12,"moving_rounds":3,"vnodes_moved":40,"ranges_moved":57}}`},
		"GET /v1/namespaces/users/owners": {200, `{"namespace":"users","owners":[]}`},
		"GET /v1/namespaces/default/leases": {200, `{"namespace":"default","arcs":[
			{"start":"f000000000000000","end":"1000000000000000","owner":"b1","generation":7,"state":"granted","expires_at":"2026-01-02T03:04:57Z"},
			{"start":"1000000000000000","end":"8000000000000000","owner":"b2","generation":3,"state":"recalling","expires_at":"2026-01-02T03:04:10.4Z"},
			{"start":"8000000000000000","end":"f000000000000000","owner":"","generation":9,"state":"free","expires_at":""}]}`},
		"GET /v1/namespaces/users/leases": {200, `{"namespace":"users","arcs":[
			{"start":"0000000000000000","end":"0000000000000000","owner":"","generation":1,"state":"pending","expires_at":""}]}`},
		"GET /v1/namespaces/default/ring": {200, `{"namespace":"default","ring_size":4096,"entries":[
			{"position":"1000000000000000","owner":"b1","index":0},
			{"position":"8000000000000000","owner":"b2","index":0},
			{"position":"f000000000000000","owner":"b1","index":1}]}`},
		"POST /v1/namespaces":                         {201, `{"name":"carts","ring_size":8,"header":"X-Fuge-Key","lease_duration":"45s","balance":"seeds","balance_interval":"15s"}`},
		"DELETE /v1/namespaces/a%2Fb":                 {204, ``},
		"PUT /v1/namespaces/carts/balance":            {200, `{"name":"carts","ring_size":8,"header":"X-Fuge-Key","lease_duration":"45s","balance":"off","balance_interval":"15s"}`},
		"POST /v1/namespaces/default/owners/b1/drain": {202, `{"namespace":"default","owner":"b1","draining":true}`},
		"GET /v1/namespaces/nope/leases":              {404, `{"error":"manager: unknown namespace: nope"}`},
		"POST /v1/namespaces/default/owners/zz/drain": {404, `{"error":"manager: unknown owner: zz"}`},
	}
}

// request is what the fake manager saw.
type request struct{ method, path, body string }

// fakeManager serves answers on 127.0.0.1 and records the requests and
// who sent them.
type fakeManager struct {
	*httptest.Server
	mu      sync.Mutex
	seen    []request
	callers []string // the client certificates' IDs, "" for none
}

// newFakeManager serves answers over https, with the manager certificate
// of testCerts, asking for a client certificate as the manager does.
func newFakeManager(t *testing.T, answers map[string]answer) *fakeManager {
	t.Helper()
	src, err := fugetls.NewSource(fugetls.DirFiles(testCerts, fugetls.ManagerBase))
	if err != nil {
		t.Fatal(err)
	}
	f := newPlainFakeManager(t, answers, func(s *httptest.Server) {
		s.Listener = tls.NewListener(s.Listener, src.ServerConfig(true))
	})
	f.URL = "https://" + f.addr()
	return f
}

// newPlainFakeManager serves answers over plain http, as a manager run with
// --insecure; wrap, if not nil, may change the server before it starts.
func newPlainFakeManager(t *testing.T, answers map[string]answer, wrap func(*httptest.Server)) *fakeManager {
	t.Helper()
	f := &fakeManager{}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		caller := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			id, _ := fugetls.PeerID(*r.TLS)
			caller = id.String()
		}
		f.mu.Lock()
		f.seen = append(f.seen, request{r.Method, r.URL.EscapedPath(), string(body)})
		f.callers = append(f.callers, caller)
		f.mu.Unlock()
		a, ok := answers[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			a = answer{404, `{"error":"no canned answer for ` + r.Method + " " + r.URL.EscapedPath() + `"}`}
		}
		if a.body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	if wrap != nil {
		wrap(f.Server)
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeManager) addr() string { return f.Listener.Addr().String() }

func (f *fakeManager) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.seen...)
}

func (f *fakeManager) who() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.callers...)
}

// fugectl runs one command line with the environment env, where
// FUGECTL_TLS_DIR is testCerts unless env has it.
func fugectl(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	getenv := func(k string) string {
		if v, ok := env[k]; ok || k != tlsDirEnv {
			return v
		}
		return testCerts
	}
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, getenv, func() time.Time { return testNow }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTables(t *testing.T) {
	m := newFakeManager(t, cannedAPI())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, `
NODE   ROLE    LEADER  TERM  LAST INDEX  COMMIT INDEX
node1  leader  node1   3     120         119
dashboard: https://127.0.0.1:7402/ui/

NAMESPACE  RING SIZE  LEASE  OWNERS  GRANTED  RECALLING  FREE  OTHER
default    4096       60s    2       1        1          1     0
users      1024       30s    0       0        0          0     1
`},
		{[]string{"cluster"}, `
node                 node1
role                 leader
leader               node1
leader grpc          127.0.0.1:7401
leader http          127.0.0.1:7402
term                 3
last index           120
commit index         119
xds streams          4
standbys in contact  node2: Lookups go there

ID     ADDRESS         SUFFRAGE  LEADER
node1  127.0.0.1:7400  Voter     yes
node2  127.0.0.1:7410  Voter     no
node3  127.0.0.1:7420  Nonvoter  no
`},
		{[]string{"namespaces"}, `
NAME     RING SIZE  HEADER      LEASE  BALANCE
default  4096       X-Fuge-Key  60s    fit
users    1024       X-User-Id   30s    -
`},
		{[]string{"ring", "default"}, `
POSITION          OWNER  INDEX
1000000000000000  b1     0
8000000000000000  b2     0
f000000000000000  b1     1
`},
		{[]string{"leases", "default"}, `
START             END               OWNER  GENERATION  STATE      EXPIRES
f000000000000000  1000000000000000  b1     7           granted    in 52s
1000000000000000  8000000000000000  b2     3           recalling  in 5s
8000000000000000  f000000000000000  -      9           free       -
`},
		{[]string{"owners", "default"}, `
NAME  ADDRESS        VNODES  DRAINING  LAST HEARD
b1    10.0.0.1:8080  2048    no        2s ago
b2    10.0.0.2:8080  2048    yes       15s ago
`},
		{[]string{"owners", "users"}, `
NAME  ADDRESS  VNODES  DRAINING  LAST HEARD
`},
		{[]string{"namespaces", "create", "carts", "--ring-size", "8", "--lease-duration=45s", "--balance", "seeds"}, `
NAME   RING SIZE  HEADER      LEASE  BALANCE
carts  8          X-Fuge-Key  45s    seeds
`},
		{[]string{"top", "default", "--count", "1"}, `
03:04:05  namespace default  policy fit  max/mean 1.00  rounds 12 (3 moved 40 vnodes, 57 ranges)
OWNER  LOAD    LOAD %  RING %  VNODES  REPORTED  DRAINING
b1     1250.5  100.0   60.0    2048    2s ago    no
b2     -       -       40.0    2048    -         yes

`},
		{[]string{"namespaces", "balance", "carts", "--balance", "off"}, `
NAME   RING SIZE  HEADER      LEASE  BALANCE
carts  8          X-Fuge-Key  45s    off
`},
		{[]string{"namespaces", "delete", "a/b"}, `
namespace a/b deleted
`},
		{[]string{"drain", "default", "b1"}, `
owner b1 of namespace default is draining; its arcs move to the other owners
`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := fugectl(t, nil, append([]string{"--manager", m.addr()}, c.args...)...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
			}
			if want := strings.TrimPrefix(c.want, "\n"); out != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
			}
		})
	}
}

// TestJSON checks that -o json prints the API's answer as sent (indented),
// wherever the flag stands.
func TestJSON(t *testing.T) {
	api := cannedAPI()
	m := newFakeManager(t, api)
	for _, c := range []struct {
		args []string
		key  string
	}{
		{[]string{"-o", "json", "cluster"}, "GET /v1/cluster"},
		{[]string{"--output=json", "namespaces"}, "GET /v1/namespaces"},
		{[]string{"ring", "default", "-o", "json"}, "GET /v1/namespaces/default/ring"},
		{[]string{"leases", "-o=json", "default"}, "GET /v1/namespaces/default/leases"},
		{[]string{"-o", "json", "owners", "default"}, "GET /v1/namespaces/default/owners"},
		{[]string{"-o", "json", "namespaces", "create", "carts"}, "POST /v1/namespaces"},
		{[]string{"-o", "json", "drain", "default", "b1"}, "POST /v1/namespaces/default/owners/b1/drain"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := fugectl(t, nil, append([]string{"--manager", m.addr()}, c.args...)...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
			}
			if got, want := compact(t, out), compact(t, api[c.key].body); got != want {
				t.Errorf("stdout = %s\nwant the API's answer %s", got, want)
			}
			if !strings.Contains(out, "\n  \"") || !strings.HasSuffix(out, "}\n") {
				t.Errorf("stdout is not indented JSON ending in a newline:\n%s", out)
			}
		})
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return b.String()
}

func TestStatusJSON(t *testing.T) {
	api := cannedAPI()
	m := newFakeManager(t, api)
	code, out, errOut := fugectl(t, nil, "--manager", m.addr(), "-o", "json", "status")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
	var got struct {
		Cluster    json.RawMessage `json:"cluster"`
		Namespaces []struct {
			Name     string         `json:"name"`
			RingSize int            `json:"ring_size"`
			Owners   int            `json:"owners"`
			Arcs     map[string]int `json:"arcs"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if compact(t, string(got.Cluster)) != compact(t, api["GET /v1/cluster"].body) {
		t.Errorf("cluster = %s, want the API's answer", got.Cluster)
	}
	if len(got.Namespaces) != 2 {
		t.Fatalf("namespaces = %+v, want default and users", got.Namespaces)
	}
	d, u := got.Namespaces[0], got.Namespaces[1]
	if d.Name != "default" || d.RingSize != 4096 || d.Owners != 2 ||
		d.Arcs["granted"] != 1 || d.Arcs["recalling"] != 1 || d.Arcs["free"] != 1 || len(d.Arcs) != 3 {
		t.Errorf("default = %+v, want 4096, 2 owners, one arc in each state", d)
	}
	if u.Name != "users" || u.Owners != 0 || u.Arcs["pending"] != 1 || u.Arcs["granted"] != 0 {
		t.Errorf("users = %+v, want 0 owners and one pending arc", u)
	}
}

// TestRequests checks what the commands send.
func TestRequests(t *testing.T) {
	m := newFakeManager(t, cannedAPI())
	for _, c := range []struct {
		args []string
		want request
	}{
		{[]string{"namespaces", "create", "carts", "--ring-size", "8", "--header", "X-Cart", "--lease-duration", "45s"},
			request{"POST", "/v1/namespaces", `{"name":"carts","ring_size":8,"header":"X-Cart","lease_duration":"45s"}`}},
		{[]string{"namespaces", "create", "carts"}, request{"POST", "/v1/namespaces", `{"name":"carts"}`}},
		{[]string{"namespaces", "delete", "a/b"}, request{"DELETE", "/v1/namespaces/a%2Fb", ""}},
		{[]string{"namespaces", "balance", "carts", "--balance", "seeds", "--balance-interval", "30s"},
			request{"PUT", "/v1/namespaces/carts/balance", `{"balance":"seeds","balance_interval":"30s"}`}},
		{[]string{"drain", "default", "b1"}, request{"POST", "/v1/namespaces/default/owners/b1/drain", ""}},
	} {
		before := len(m.requests())
		if code, _, errOut := fugectl(t, nil, append([]string{"--manager", m.addr()}, c.args...)...); code != exitOK {
			t.Fatalf("%q: exit %d, stderr %q", c.args, code, errOut)
		}
		seen := m.requests()[before:]
		if len(seen) != 1 || seen[0] != c.want {
			t.Errorf("%q sent %+v, want %+v", c.args, seen, c.want)
		}
	}
}

func TestAPIErrors(t *testing.T) {
	m := newFakeManager(t, map[string]answer{
		"GET /v1/namespaces/nope/leases":              {404, `{"error":"manager: unknown namespace: nope"}`},
		"POST /v1/namespaces":                         {409, `{"error":"manager: namespace exists: default"}`},
		"POST /v1/namespaces/default/owners/zz/drain": {400, `{"error":"manager: bad request"}`},
		"GET /v1/cluster":                             {500, "internal trouble\n"},
		"GET /v1/namespaces":                          {503, `{"error":"manager: no leader"}`},
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"leases", "nope"}, "fugectl: manager: unknown namespace: nope\n"},
		{[]string{"namespaces", "create", "default"}, "fugectl: manager: namespace exists: default\n"},
		{[]string{"-o", "json", "drain", "default", "zz"}, "fugectl: manager: bad request\n"},
		{[]string{"cluster"}, "fugectl: internal trouble (HTTP 500)\n"},
		{[]string{"namespaces"}, "fugectl: manager: no leader\n"},
	} {
		code, out, errOut := fugectl(t, nil, append([]string{"--manager", m.addr()}, c.args...)...)
		if code != exitError || out != "" || errOut != c.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1, nothing, %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestStatusWithoutLeader shows the cluster line before the error.
func TestStatusWithoutLeader(t *testing.T) {
	api := cannedAPI()
	api["GET /v1/cluster"] = answer{200, `{"node_id":"node2","role":"candidate","term":4,"last_index":9,"commit_index":9}`}
	api["GET /v1/namespaces/default/owners"] = answer{503, `{"error":"manager: no leader"}`}
	m := newFakeManager(t, api)
	code, out, errOut := fugectl(t, nil, "--manager", m.addr(), "status")
	wantOut := "NODE   ROLE       LEADER  TERM  LAST INDEX  COMMIT INDEX\nnode2  candidate  -       4     9           9\n\n"
	if code != exitError || out != wantOut || errOut != "fugectl: namespace default: manager: no leader\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1, %q and the error", code, out, errOut, wantOut)
	}
}

func TestUsageErrors(t *testing.T) {
	m := newFakeManager(t, cannedAPI())
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"leases"}, "usage: fugectl leases NS"},
		{[]string{"drain", "default"}, "usage: fugectl drain NS OWNER"},
		{[]string{"ring", "a", "b"}, "usage: fugectl ring NS"},
		{[]string{"namespaces", "extra"}, "usage: fugectl namespaces"},
		{[]string{"namespaces", "create", ""}, "NAME is empty"},
		{[]string{"-o", "yaml", "namespaces"}, `-o "yaml"`},
		{[]string{"--bogus", "status"}, "-bogus"},
		{[]string{"status", "--ring-size", "8"}, "-ring-size"},
		{[]string{"namespaces", "create", "x", "--ring-size", "big"}, "-ring-size"},
		{[]string{"namespaces", "create", "x", "--lease-duration", "5"}, "--lease-duration"},
		{[]string{"--timeout", "0s", "status"}, "--timeout"},
		{[]string{"--manager", "ftp://x", "status"}, "--manager"},
		{[]string{"--manager", " , ", "status"}, "no manager address"},
	} {
		code, out, errOut := fugectl(t, nil, append([]string{"--manager", m.addr()}, c.args...)...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "fugectl: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and a message with %q", c.args, code, out, errOut, c.want)
		}
	}
	if n := len(m.requests()); n != 0 {
		t.Errorf("usage errors sent %d requests, want none", n)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"leases", "--help"}} {
		code, out, errOut := fugectl(t, nil, args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", args, code, errOut)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "  "+c.name) {
				t.Errorf("%q does not list %q", args, c.name)
			}
		}
		for _, w := range []string{"FUGE_MANAGER", "127.0.0.1:7402", "--ring-size", "-o, --output", "--tls-dir", "FUGECTL_TLS_DIR", "fuge-certs", "--insecure", "--owner NS/NAME"} {
			if !strings.Contains(out, w) {
				t.Errorf("%q does not mention %q", args, w)
			}
		}
	}
}

// TestFallback: the first address refuses connections, the next answers.
func TestFallback(t *testing.T) {
	m := newFakeManager(t, cannedAPI())
	dead := fugetest.RefusedAddr(t)
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"--manager", dead + "," + m.addr(), "namespaces"}},
		{"env", map[string]string{"FUGE_MANAGER": dead + ",https://" + m.addr() + "/"}, []string{"namespaces"}},
		{"post", nil, []string{"--manager", dead + "," + m.addr(), "drain", "default", "b1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(m.requests())
			code, out, errOut := fugectl(t, c.env, c.args...)
			if code != exitOK || errOut != "" || out == "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0 and output", code, out, errOut)
			}
			if n := len(m.requests()) - before; n != 1 {
				t.Errorf("the live manager saw %d requests, want 1", n)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		code, out, errOut := fugectl(t, map[string]string{"FUGE_MANAGER": dead}, "status")
		if code != exitError || out != "" || !strings.HasPrefix(errOut, "fugectl: no manager reachable") || !strings.Contains(errOut, dead) {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1 and no manager reachable at %s", code, out, errOut, dead)
		}
	})
}

// Creating a namespace whose ring is larger than grpc-go's default cap
// warns, on stderr, that proxyless gRPC clients need GRPC_RING_HASH_CAP;
// the table still goes to stdout.
func TestCreateLargeRingWarns(t *testing.T) {
	m := newFakeManager(t, map[string]answer{
		"POST /v1/namespaces": {201, `{"name":"big","ring_size":65536,"header":"X-Fuge-Key","lease_duration":"8s"}`},
	})
	code, out, errOut := fugectl(t, nil, "--manager", m.addr(), "namespaces", "create", "big", "--ring-size", "65536")
	if code != exitOK || !strings.Contains(out, "65536") {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"warning", "GRPC_RING_HASH_CAP=65536", "4096"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
}
