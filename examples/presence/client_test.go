package presence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// backend is a fake pool: it stores what is PUT, answers GETs, and logs
// the PUTs; fail makes the next requests answer that status.
type backend struct {
	mu    sync.Mutex
	addrs map[string]string
	puts  []string // "id=addr"
	fail  []int
}

func newBackend(t *testing.T) (*backend, string) {
	b := &backend{addrs: map[string]string{}}
	ts := httptest.NewServer(b)
	t.Cleanup(ts.Close)
	return b, ts.URL
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/devices/")
	if r.Header.Get(presence.DefaultHeader) != id {
		http.Error(w, "bad key", 400)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.fail) > 0 {
		code := b.fail[0]
		b.fail = b.fail[1:]
		w.Header().Set("Retry-After", "0")
		http.Error(w, "failing", code)
		return
	}
	w.Header().Set(ownerguard.OwnerHeader, "fake")
	w.Header().Set(ownerguard.GenerationHeader, "5")
	switch r.Method {
	case http.MethodPut:
		body, _ := io.ReadAll(r.Body)
		b.addrs[id] = string(body)
		b.puts = append(b.puts, id+"="+string(body))
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		a, ok := b.addrs[id]
		if !ok {
			http.Error(w, "unknown", 404)
			return
		}
		io.WriteString(w, a+"\n")
	}
}

func (b *backend) takePuts() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.puts
	b.puts = nil
	slices.Sort(p)
	return p
}

// TestClientRepublishesLostRanges: a loss notification makes the client
// write again exactly the devices whose key hash lies in a lost range, with
// the last address published for each.
func TestClientRepublishesLostRanges(t *testing.T) {
	b, base := newBackend(t)
	var writes sync.Map
	c, err := presence.NewClient(presence.ClientConfig{
		BaseURL: base,
		OnWrite: func(id, addr string, a presence.Answer) { writes.Store(id, a.Gen) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const devices = 300
	latest := map[string]string{}
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		latest[id] = fmt.Sprintf("192.0.2.%d:1", i%250)
		if i%7 == 0 { // publish some twice: the second address must win
			if _, err := c.Publish(ctx, id, "198.51.100.1:1"); err != nil {
				t.Fatal(err)
			}
		}
		if a, err := c.Publish(ctx, id, latest[id]); err != nil || a.Status != 204 || a.Owner != "fake" || a.Gen != 5 {
			t.Fatalf("publish %s: %+v %v", id, a, err)
		}
	}
	if n, _ := writes.Load("dev-0"); n != uint64(5) {
		t.Errorf("OnWrite heard generation %v for dev-0, want 5", n)
	}
	b.takePuts()
	lost := []ring.Range{
		{Start: math.MaxUint64 - 1<<60, End: 1 << 59}, // wraps past zero
		{Start: 1 << 62, End: 1<<62 + 1<<61},
	}
	var want []string
	for id, addr := range latest {
		h := ring.HashString(id)
		if lost[0].Contains(h) || lost[1].Contains(h) {
			want = append(want, id+"="+addr)
		}
	}
	slices.Sort(want)
	if len(want) == 0 || len(want) == devices {
		t.Fatalf("%d of %d devices in the lost ranges: pick other ranges", len(want), devices)
	}
	c.OnLoss(lost, false)
	if got := b.takePuts(); !slices.Equal(got, want) {
		t.Errorf("republished %d devices:\n%v\nwant %d:\n%v", len(got), got, len(want), want)
	}
	if got := c.Affected(lost, false); len(got) != len(want) {
		t.Errorf("Affected: %d devices, want %d", len(got), len(want))
	}
	c.OnLoss(nil, true)
	if got := b.takePuts(); len(got) != devices {
		t.Errorf("loss of everything republished %d devices, want %d", len(got), devices)
	}
	c.OnLoss([]ring.Range{{Start: 5, End: 6}}, false)
	if got := b.takePuts(); len(got) != 0 {
		t.Errorf("a range holding no device republished %v", got)
	}
}

func TestClientErrorsAndRetries(t *testing.T) {
	b, base := newBackend(t)
	c, err := presence.NewClient(presence.ClientConfig{BaseURL: base, Attempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Get(ctx, "nobody"); !errors.Is(err, presence.ErrNotFound) {
		t.Errorf("get of an unknown device: %v, want ErrNotFound", err)
	}
	b.fail = []int{503, 503}
	if a, err := c.Publish(ctx, "d", "x"); err != nil || a.Attempts != 3 {
		t.Errorf("publish after two 503s: %+v %v, want success on the third attempt", a, err)
	}
	b.fail = []int{503, 503, 503}
	if a, err := c.Get(ctx, "d"); !errors.Is(err, presence.ErrUnavailable) || a.Attempts != 3 {
		t.Errorf("get after three 503s: %+v %v, want ErrUnavailable after 3 attempts", a, err)
	}
	b.fail = []int{500}
	if a, err := c.Get(ctx, "d"); err == nil || errors.Is(err, presence.ErrUnavailable) || a.Attempts != 1 {
		t.Errorf("get answered 500: %+v %v, want an error without retry", a, err)
	}
	if a, err := c.Get(ctx, "d"); err != nil || a.Addr != "x" {
		t.Errorf("get: %+v %v, want x", a, err)
	}
	if _, err := c.Publish(ctx, "a b", "x"); !errors.Is(err, presence.ErrBadID) {
		t.Errorf("publish under an id with a space: %v, want ErrBadID", err)
	}
	if _, err := presence.NewClient(presence.ClientConfig{}); !errors.Is(err, presence.ErrNoBaseURL) {
		t.Errorf("no base URL: %v", err)
	}
}

// router is a minimal lease-aware router for tests: it forwards each
// request to the holder its Lookup names, once; a 421 or a dead holder
// becomes a 503, which the client retries.
func router(t *testing.T, l *lb.Lookup) string {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr, _, _, ok := l.LookupKey(r.Header.Get(presence.DefaultHeader))
		if !ok {
			http.Error(w, "no holder", http.StatusServiceUnavailable)
			return
		}
		rp := &httputil.ReverseProxy{
			Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: addr}) },
			ModifyResponse: func(resp *http.Response) error { return misdirected(resp) },
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
				http.Error(w, "upstream", http.StatusServiceUnavailable)
			},
		}
		rp.ServeHTTP(w, r)
	})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func misdirected(resp *http.Response) error {
	if resp.StatusCode == http.StatusMisdirectedRequest {
		return errors.New("misdirected")
	}
	return nil
}

// TestClientRecreatesStateAfterCrash: b stops; once its ranges are granted
// to a, the client's Lookup signals their loss and the client republishes
// exactly the devices that were on b, so every device resolves again.
func TestClientRecreatesStateAfterCrash(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	a, b := startNode(t, m, "a", true), startNode(t, m, "b", true)
	nodes := []*node{a, b}
	route := m.Lookup(t, "router", nil)
	var (
		mu          sync.Mutex
		republished = map[string]bool{}
		failures    []error
	)
	c, err := presence.NewClient(presence.ClientConfig{
		BaseURL: router(t, route),
		OnRepublish: func(id string, _ presence.Answer, err error) {
			mu.Lock()
			defer mu.Unlock()
			republished[id] = true
			if err != nil {
				failures = append(failures, err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := m.Lookup(t, "client", c.OnLoss)
	settled(t, m, l, a, b)
	m.Settled(t, route, "a", "b")
	ctx := context.Background()
	onB := map[string]bool{}
	const devices = 80
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		if _, err := c.Publish(ctx, id, "addr-"+id); err != nil {
			t.Fatal(err)
		}
		if n, _ := holder(t, l, nodes, id); n == b {
			onB[id] = true
		}
	}
	if len(onB) == 0 || len(onB) == devices {
		t.Fatalf("%d of %d devices on b: the test needs both servers", len(onB), devices)
	}
	b.stop()
	settled(t, m, l, a)
	fugetest.Eventually(t, "the devices of b to be republished", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(republished) >= len(onB)
	})
	mu.Lock()
	for id := range republished {
		if !onB[id] {
			t.Errorf("republished %s, which was on a", id)
		}
	}
	if len(failures) > 0 {
		t.Errorf("%d republishes failed, first: %v", len(failures), failures[0])
	}
	mu.Unlock()
	for i := range devices {
		id := fmt.Sprintf("dev-%d", i)
		if got, err := c.Get(ctx, id); err != nil || got.Addr != "addr-"+id || got.Owner != "a" {
			t.Errorf("get %s after the crash: %+v %v", id, got, err)
		}
	}
}
