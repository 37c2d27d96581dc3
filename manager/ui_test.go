package manager_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/manager"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	Kind, ID string
	Data     []byte
}

// logEntry decodes a "log" event.
func (e sseEvent) entry(t *testing.T) manager.Event {
	t.Helper()
	var ev manager.Event
	if err := json.Unmarshal(e.Data, &ev); err != nil {
		t.Fatalf("log event %s: %v", e.Data, err)
	}
	return ev
}

// subscribe opens GET /v1/events with client c and returns the events as
// they come; the stream is closed at cleanup.
func subscribe(t *testing.T, c *http.Client, url string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /v1/events: %s, %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 1024)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Kind != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.Kind = line[7:]
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = []byte(line[6:])
			}
		}
	}()
	return out
}

// expectLog reads events until a log entry matches, and returns it.
func expectLog(t *testing.T, events <-chan sseEvent, what string, match func(manager.Event) bool) manager.Event {
	t.Helper()
	timeout := time.After(defaultTestTimeout)
	var seen []string
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the event stream ended before %s; saw %v", what, seen)
			}
			if e.Kind != "log" {
				continue
			}
			ev := e.entry(t)
			if match(ev) {
				return ev
			}
			seen = append(seen, fmt.Sprintf("%s %s", ev.Kind, ev.Owner))
		case <-timeout:
			t.Fatalf("no %s in the event stream; saw %v", what, seen)
		}
	}
}

func kindOwner(kind manager.EventKind, owner string) func(manager.Event) bool {
	return func(e manager.Event) bool { return e.Kind == kind && e.Owner == owner }
}

type snapArc struct {
	Start, End, Owner, State string
	Generation               uint64
}

// TestDashboardEventStream follows GET /v1/events while owners join, one is
// drained and another crashes: the log names each step in order, the
// snapshot the page loads is the admin API's lease table, and the page
// and its metrics are served.
func TestDashboardEventStream(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{RingSize: 64, T: 2 * time.Second})
	events := subscribe(t, http.DefaultClient, m.AdminURL("/v1/events"))
	if e := <-events; e.Kind != "hello" {
		t.Fatalf("first event %q, want hello", e.Kind)
	}
	a := m.Owner(t, "a", "127.0.0.1:17201", nil)
	expectLog(t, events, "a joining", kindOwner(manager.EventJoin, "a"))
	if g := expectLog(t, events, "a's grant", kindOwner(manager.EventGrant, "a")); g.From != "" || g.Share != 1 {
		t.Errorf("a's first grant %+v, want the whole circle, free before", g)
	}
	m.Owner(t, "b", "127.0.0.1:17202", nil)
	expectLog(t, events, "b joining", kindOwner(manager.EventJoin, "b"))
	expectLog(t, events, "a recall from a", kindOwner(manager.EventRecall, "a"))
	if g := expectLog(t, events, "b's grant", kindOwner(manager.EventGrant, "b")); g.From != "a" || g.Share <= 0 || g.Share >= 1 {
		t.Errorf("b's grant %+v, want part of the circle, from a", g)
	}

	resp, err := http.Post(m.AdminURL("/v1/namespaces/ns/owners/b/drain"), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	expectLog(t, events, "b draining", kindOwner(manager.EventDrain, "b"))
	expectLog(t, events, "a recall from b", kindOwner(manager.EventRecall, "b"))
	expectLog(t, events, "a's grant back from b", func(e manager.Event) bool { return e.Kind == manager.EventGrant && e.Owner == "a" && e.From == "b" })

	// a crashes: its arcs expire after the hold, lookups notify loss, its
	// session ends. b is draining, so nothing is granted.
	if err := a.Abandon(); err != nil {
		t.Fatal(err)
	}
	expectLog(t, events, "a's expiry", kindOwner(manager.EventExpiry, "a"))
	expectLog(t, events, "a loss of a's arcs", kindOwner(manager.EventLoss, "a"))

	// The snapshot a page loads is the lease table.
	var snap struct {
		Source     string
		Seq        uint64
		Namespaces []struct {
			Name   string
			Arcs   []snapArc
			Owners []struct{ Name string }
		}
	}
	if code := getJSON(t, m.AdminURL("/ui/api/snapshot"), &snap); code != http.StatusOK {
		t.Fatalf("snapshot: %d", code)
	}
	arcs, err := m.Arcs()
	if err != nil {
		t.Fatal(err)
	}
	var want []snapArc
	for _, a := range arcs {
		want = append(want, snapArc{a.Start, a.End, a.Owner, a.State, a.Generation})
	}
	if snap.Source != "leader" || snap.Seq == 0 || len(snap.Namespaces) != 1 || !slices.Equal(snap.Namespaces[0].Arcs, want) {
		t.Errorf("snapshot %+v, want the leader's lease table %+v", snap, want)
	}

	// The page and its metrics.
	page, err := http.Get(m.AdminURL("/ui/"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.Contains(string(body), `<script src="app.js">`) ||
		!strings.Contains(page.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /ui/: %s, CSP %q", page.Status, page.Header.Get("Content-Security-Policy"))
	}
	met, err := http.Get(m.AdminURL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(met.Body)
	met.Body.Close()
	for _, s := range []string{`fuge_raft_state{state="leader"} 1`, `fuge_owner_key_share{namespace="ns",owner="b"}`, "fuge_event_streams 1"} {
		if !strings.Contains(string(mb), s) {
			t.Errorf("/metrics has no %s", s)
		}
	}
}

// TestDashboardStandby: a standby serves the page's snapshot from its
// replicated state and its own event stream from what it applies.
func TestDashboardStandby(t *testing.T) {
	a := startNode(t, "n1", "", nil)
	eventually(t, "leadership", a.IsLeader)
	_, ag, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	eventually(t, "n2 to learn the leader's address", func() bool { _, g, _ := b.Leader(); return g == ag })
	_, _, bh := b.Addrs()
	events := subscribe(t, http.DefaultClient, "http://"+bh+"/v1/events")
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	st, err := dial(t, ag).Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(hello("ns", "a", 11)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	expectLog(t, events, "a's join on the standby", kindOwner(manager.EventJoin, "a"))
	expectLog(t, events, "a's grant on the standby", kindOwner(manager.EventGrant, "a"))
	var snap struct {
		Role, Source string
		Namespaces   []struct{ Arcs []snapArc }
	}
	getJSON(t, "http://"+bh+"/ui/api/snapshot", &snap)
	if snap.Role != "follower" || snap.Source != "replica" || len(snap.Namespaces) != 1 ||
		len(snap.Namespaces[0].Arcs) != 1 || snap.Namespaces[0].Arcs[0].Owner != "a" || snap.Namespaces[0].Arcs[0].State != "granted" {
		t.Errorf("standby snapshot %+v, want a replica's view: the whole circle granted to a", snap)
	}
}

// TestDashboardNeedsACertificate: with TLS, the page and the event stream
// are reads like the rest of the admin API: a client without a certificate
// is refused, one with a certificate from the cluster's CA is served.
func TestDashboardNeedsACertificate(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{TLS: true})
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	reader := &http.Client{Transport: &http.Transport{TLSClientConfig: m.Source(t, fugetls.ProxyID("router")).ClientConfig(fugetls.RoleManager)}}
	for _, path := range []string{"/ui/", "/ui/app.js", "/v1/events", "/ui/api/snapshot"} {
		resp, err := noCert.Get(m.AdminURL(path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a certificate: %s, want 401", path, resp.Status)
		}
	}
	for _, path := range []string{"/ui/", "/ui/api/snapshot"} {
		resp, err := reader.Get(m.AdminURL(path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with a proxy's certificate: %s, want 200", path, resp.Status)
		}
	}
	// The page's forms are admin writes: a proxy's certificate may not drain.
	resp, err := reader.Post(m.AdminURL("/v1/namespaces/ns/owners/x/drain"), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a drain with a proxy's certificate: %s, want 403", resp.Status)
	}
	events := subscribe(t, m.AdminClient(), m.AdminURL("/v1/events"))
	if e := <-events; e.Kind != "hello" {
		t.Errorf("first event over TLS %q, want hello", e.Kind)
	}
}
