package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/proxy"
)

// promKeywords are PromQL's words that are not metric names: operators,
// aggregations and modifiers.
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "group": true, "limitk": true, "limit_ratio": true,
	"inf": true, "nan": true,
}

// labelListers are the keywords followed by a parenthesized list of label
// names.
var labelListers = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// metricNames returns the metric names a PromQL expression selects. It is a
// small tokenizer, not a full parser: it checks that brackets balance and
// strings end, skips label matchers ({...}), ranges ([...]), strings,
// numbers, label lists after by/without/on/ignoring/group_*, functions
// (a name followed by "(") and keywords; what is left is a metric name.
// Grafana's variables ($x, ${x}) may stand in matchers and ranges.
func metricNames(expr string) ([]string, error) {
	var names []string
	var stack []byte
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	skipSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n') {
			i++
		}
		return i
	}
	labelList := false // the next "(" opens a list of label names
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := strings.IndexByte(expr[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			i += j + 2
		case c == '{' || c == '[':
			// Matchers and ranges: skip to the closing bracket, minding
			// strings inside.
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			j := i + 1
			for ; j < len(expr) && expr[j] != closer; j++ {
				if q := expr[j]; q == '"' || q == '\'' || q == '`' {
					k := strings.IndexByte(expr[j+1:], q)
					if k < 0 {
						return nil, fmt.Errorf("unterminated string at %d", j)
					}
					j += k + 1
				}
			}
			if j == len(expr) {
				return nil, fmt.Errorf("unclosed %q at %d", c, i)
			}
			i = j + 1
		case c == '(':
			if labelList {
				j := strings.IndexByte(expr[i:], ')')
				if j < 0 {
					return nil, fmt.Errorf("unclosed label list at %d", i)
				}
				i += j + 1
				labelList = false
				continue
			}
			stack = append(stack, '(')
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced ')' at %d", i)
			}
			stack = stack[:len(stack)-1]
			i++
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.') {
				i++
			}
		case isIdent(c, true):
			j := i
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			word := expr[i:j]
			k := skipSpace(j)
			switch {
			case labelListers[strings.ToLower(word)]:
				labelList = k < len(expr) && expr[k] == '('
			case promKeywords[strings.ToLower(word)]:
			case k < len(expr) && expr[k] == '(':
				// a function
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		case c == '$':
			return nil, fmt.Errorf("a Grafana variable outside a matcher or range at %d", i)
		default: // operators, commas
			i++
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("%d unclosed '('", len(stack))
	}
	return names, nil
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  bool
	}{
		{`sum by (code) (rate(fuge_proxy_requests_total[$__rate_interval]))`, []string{"fuge_proxy_requests_total"}, false},
		{`histogram_quantile(0.99, sum by (owner, le) (rate(fuge_proxy_upstream_seconds_bucket[5m])))`, []string{"fuge_proxy_upstream_seconds_bucket"}, false},
		{`max by (namespace, owner) (fuge_owner_ranges{namespace=~"$namespace"})`, []string{"fuge_owner_ranges"}, false},
		{`fuge_raft_state == 1`, []string{"fuge_raft_state"}, false},
		{`sum(rate(a_sum[1m])) / on(instance) group_left(x) sum(rate(a_count[1m]))`, []string{"a_sum", "a_count"}, false},
		{`sum without (le) (x{a="}",b='{'}) offset 5m`, []string{"x"}, false},
		{`sum(rate(x[5m])`, nil, true},
		{`x{a="b"`, nil, true},
		{`rate(x[$__rate_interval]) > $threshold`, nil, true},
	} {
		got, err := metricNames(tc.expr)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, %v; want %q, error %v", tc.expr, got, err, tc.want, tc.err)
		}
	}
}

// grafanaQueries lists the PromQL of every panel's targets and of the
// query variables, by panel title.
func grafanaQueries(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID, Title string
		Panels     []grafanaPanel
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: no uid, title or panels", path)
	}
	out := map[string][]string{}
	ids := map[int]bool{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out["panel "+p.Title] = append(out["panel "+p.Title], tg.Expr)
			}
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		// label_values(metric, label): the metric is the query.
		inner, ok := strings.CutPrefix(q.Query, "label_values(")
		if !ok || !strings.HasSuffix(inner, ")") {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, q.Query)
			continue
		}
		metric, _, _ := strings.Cut(strings.TrimSuffix(inner, ")"), ",")
		out["variable "+v.Name] = append(out["variable "+v.Name], metric)
	}
	return out
}

type grafanaPanel struct {
	ID      int
	Type    string
	Title   string
	Targets []struct{ Expr string }
	Panels  []grafanaPanel
}

// scrape returns the metric names in a Prometheus text exposition.
func scrape(t *testing.T, c *http.Client, url string, into map[string]bool) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		into[name] = true
	}
}

// exported runs a manager with an owner and a fuge-proxy in front of it,
// sends one request through the proxy (so that the per-owner series exist),
// and returns every metric name the two export.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := fugetest.StartManager(t, fugetest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })}
	go backend.Serve(ln)
	t.Cleanup(func() { backend.Close() })
	m.Owner(t, "o1", ln.Addr().String(), nil)
	fugetest.Eventually(t, "o1 to hold every arc", func() bool {
		arcs, err := m.Arcs()
		if err != nil || len(arcs) == 0 {
			return false
		}
		for _, a := range arcs {
			if a.Owner != "o1" || a.State != "granted" {
				return false
			}
		}
		return true
	})
	p, err := proxy.New(proxy.Config{
		ListenAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		Managers: []string{m.GRPCAddr}, Namespace: m.NS, LookupStalenessBound: m.T,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	fugetest.Eventually(t, "the proxy to hold the table", p.Healthy)
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr().String()+"/", nil)
	req.Header.Set("X-Fuge-Key", "device-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request through the proxy: %s", resp.Status)
	}
	names := map[string]bool{}
	scrape(t, m.AdminClient(), m.AdminURL("/metrics"), names)
	scrape(t, http.DefaultClient, "http://"+p.AdminAddr().String()+"/metrics", names)
	return names
}

// TestGrafanaDashboard checks deploy/grafana/fuge.json: every query
// parses, and every metric it names is one that a running manager or
// fuge-proxy exports (scraped from their /metrics, not read from the
// source, so a renamed metric fails here).
func TestGrafanaDashboard(t *testing.T) {
	queries := grafanaQueries(t, "grafana/fuge.json")
	have := exported(t)
	used := map[string]bool{}
	for where, exprs := range queries {
		for _, e := range exprs {
			names, err := metricNames(e)
			if err != nil {
				t.Errorf("%s: %q: %v", where, e, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("%s: %q names no metric", where, e)
			}
			for _, n := range names {
				used[n] = true
				if !have[n] {
					t.Errorf("%s: %q names %s, which neither fuge-manager nor fuge-proxy exports", where, e, n)
				}
			}
		}
	}
	// What the issue asks the dashboard to show.
	for _, n := range []string{"fuge_proxy_requests_total", "fuge_proxy_retries_total", "fuge_proxy_misroutes_total",
		"fuge_proxy_upstream_seconds_bucket", "fuge_owner_ranges", "fuge_grants_total", "fuge_expiries_total", "fuge_raft_state"} {
		if !used[n] {
			t.Errorf("the dashboard does not show %s", n)
		}
	}
}
