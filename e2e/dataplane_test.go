package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/proxy"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// history records every lookup view the manager's FSM applies, so a test
// can ask whether an owner was ever granted a key's arc under a generation.
// It wraps the xDS lease table, which it forwards to (the embedded table
// also keeps serving the ring views).
type history struct {
	*xds.LeaseTable
	mu    sync.Mutex
	views [][]lease.Entry
}

func (h *history) NamespaceView(ns string, entries []lease.Entry, version uint64) {
	h.mu.Lock()
	h.views = append(h.views, append([]lease.Entry(nil), entries...))
	h.mu.Unlock()
	h.LeaseTable.NamespaceView(ns, entries, version)
}

// NamespaceViewChanged sends the manager's views through NamespaceView,
// which history overrides (the embedded table's would bypass it).
func (h *history) NamespaceViewChanged(ns string, v lease.View, _ []ring.Range, version uint64) {
	h.NamespaceView(ns, v.Entries(), version)
}

// granted reports whether some applied view gave the arc holding keyHash to
// owner under gen. Generations are never reused per arc, so a match names
// one grant.
func (h *history) granted(keyHash uint64, owner string, gen lease.Gen) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.views {
		for _, e := range v {
			if e.Range.Contains(keyHash) && e.Owner == owner && e.Gen == gen {
				return true
			}
		}
	}
	return false
}

// backend is one pool member: an HTTP server behind the ownerguard
// middleware, answering with its name, and the Owner that holds its leases.
type backend struct {
	name  string
	owner *ownerguard.Owner
	srv   *http.Server
	ln    net.Listener
}

func startBackend(t *testing.T, m *fugetest.Manager, name string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, ln: ln}
	b.owner = m.Owner(t, name, ln.Addr().String(), nil)
	g, err := ownerguard.NewGuard(b.owner, ownerguard.GuardConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = &http.Server{Handler: g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := ownerguard.HandleFromContext(r.Context())
		if !ok {
			http.Error(w, "no handle", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s %d\n", name, h.Gen)
	}))}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.stop() })
	return b
}

// stop leaves the pool cleanly: the Owner releases its leases first, so
// requests that still reach the server are refused with 421 and retried,
// then the server closes.
func (b *backend) stop() {
	b.owner.Close()
	b.srv.Close()
}

type outcome struct {
	key    string
	status int
	owner  string
	gen    lease.Gen
	err    error
}

// TestProxyUnderOwnerChurn sends requests through fuge-proxy to a pool of
// guarded backends while owners leave, join and restart, and checks every
// answer against the manager's lease history: each names the server that
// answered and its generation, and that server was granted the key's arc
// under that generation. Every request succeeds within the retry budget.
func TestProxyUnderOwnerChurn(t *testing.T) {
	hist := &history{}
	m := fugetest.StartManager(t, fugetest.Options{T: time.Second, Observer: func(lt *xds.LeaseTable) manager.Observer {
		hist.LeaseTable = lt
		return hist
	}})
	a, b := startBackend(t, m, "a"), startBackend(t, m, "b")
	c := startBackend(t, m, "c")
	l := m.Lookup(t, "watcher", nil)
	m.Settled(t, l, "a", "b", "c")

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
	fugetest.Eventually(t, "the proxy to have a table", p.Healthy)
	url := "http://" + p.Addr().String() + "/"

	var (
		mu       sync.Mutex
		outcomes []outcome
		sent     atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := "device-" + strconv.Itoa(w) + "-" + strconv.Itoa(i%500)
				o := outcome{key: key}
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Fuge-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					o.err = err
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					o.status = resp.StatusCode
					o.owner = resp.Header.Get(ownerguard.OwnerHeader)
					g, _ := strconv.ParseUint(resp.Header.Get(ownerguard.GenerationHeader), 10, 64)
					o.gen = lease.Gen(g)
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				sent.Add(1)
			}
		}()
	}
	// waitSent lets the load run for n more requests, so each phase
	// carries traffic whatever the machine's speed.
	waitSent := func(n int64) {
		target := sent.Load() + n
		fugetest.Eventually(t, fmt.Sprintf("%d requests", n), func() bool { return sent.Load() >= target })
	}

	waitSent(300)
	b.stop() // a clean leave
	m.Settled(t, l, "a", "c")
	waitSent(300)
	startBackend(t, m, "d") // a join
	m.Settled(t, l, "a", "c", "d")
	waitSent(300)
	a.stop() // a restart: same name, new incarnation, new port
	startBackend(t, m, "a")
	m.Settled(t, l, "a", "c", "d")
	waitSent(300)
	c.stop()
	m.Settled(t, l, "a", "d")
	waitSent(300)
	close(stop)
	wg.Wait()

	var ok, failed, wrong int
	for _, o := range outcomes {
		switch {
		case o.err != nil || o.status != http.StatusOK:
			failed++
			if failed <= 5 {
				t.Errorf("key %s: status %d err %v", o.key, o.status, o.err)
			}
		case o.owner == "" || o.gen == 0:
			wrong++
			t.Errorf("key %s: answer without owner or generation (owner %q gen %d)", o.key, o.owner, o.gen)
		case !hist.granted(ring.HashString(o.key), o.owner, o.gen):
			wrong++
			if wrong <= 5 {
				t.Errorf("key %s: served by %s under gen %d, which the manager never granted it", o.key, o.owner, o.gen)
			}
		default:
			ok++
		}
	}
	st := p.Stats()
	t.Logf("requests=%d ok=%d failed=%d served-without-lease=%d; proxy stats %+v", len(outcomes), ok, failed, wrong, st)
	if ok == 0 {
		t.Fatal("no request succeeded")
	}
	if failed+wrong > 0 {
		t.Errorf("%d requests failed and %d were served without the lease, want 0", failed, wrong)
	}
}

// blindChecker is a planted bug: a guard that believes it holds every key,
// under the generation of the arc it last held.
type blindChecker struct{ gen lease.Gen }

func (b blindChecker) GetOwnershipHandle(h uint64) (ownerguard.Handle, bool) {
	return ownerguard.Handle{Key: h, Range: ring.Full(), Gen: b.gen}, true
}
func (blindChecker) CheckContinuousOwnership(ownerguard.Handle) bool { return true }

// TestHistoryCatchesUnleasedServer is the negative control of the churn
// test's check: a server that answers for keys it does not hold (its guard
// blinded) is caught by the lease history.
func TestHistoryCatchesUnleasedServer(t *testing.T) {
	hist := &history{}
	m := fugetest.StartManager(t, fugetest.Options{T: time.Second, Observer: func(lt *xds.LeaseTable) manager.Observer {
		hist.LeaseTable = lt
		return hist
	}})
	startBackend(t, m, "a")
	b := startBackend(t, m, "b")
	l := m.Lookup(t, "watcher", nil)
	m.Settled(t, l, "a", "b")
	// The manager commits a grant before b's session receives it.
	var held []lease.Lease
	fugetest.Eventually(t, "b holds its grant", func() bool {
		held = b.owner.Held()
		return len(held) > 0
	})
	g, err := ownerguard.NewGuard(blindChecker{gen: held[0].Gen}, ownerguard.GuardConfig{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	caught, matched := 0, 0
	for i := range 200 {
		key := "k" + strconv.Itoa(i)
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		req.Header.Set("X-Fuge-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		gen, _ := strconv.ParseUint(resp.Header.Get(ownerguard.GenerationHeader), 10, 64)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(ownerguard.OwnerHeader) != "b" {
			t.Fatalf("blinded server answered %d owner %q", resp.StatusCode, resp.Header.Get(ownerguard.OwnerHeader))
		}
		if hist.granted(ring.HashString(key), "b", lease.Gen(gen)) {
			matched++
		} else {
			caught++
		}
	}
	t.Logf("blinded server: %d of 200 answers caught, %d for keys it really was granted under that generation", caught, matched)
	if caught == 0 {
		t.Fatal("the lease history did not catch a server answering for keys it does not hold")
	}
}
