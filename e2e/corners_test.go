package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// ringLog records every ring view the FSM publishes to Envoy and gRPC
// clients, passing each on to the xDS lease table.
type ringLog struct {
	*xds.LeaseTable
	mu    sync.Mutex
	views []lease.RingView
}

func (r *ringLog) NamespaceRing(ns string, v lease.RingView, version uint64) {
	r.mu.Lock()
	r.views = append(r.views, v)
	r.mu.Unlock()
	r.LeaseTable.NamespaceRing(ns, v, version)
}

func (r *ringLog) all() []lease.RingView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.views)
}

// envoyRing is the ring an Envoy builds from a view's endpoints: it keeps
// only the first endpoint of each address (its host set is keyed by
// address), then builds ring_hash with the configured sizes.
func envoyRing(v lease.RingView) (*ring.Ring, error) {
	seen := map[string]bool{}
	var hosts []ring.EnvoyHost
	for _, o := range v.Owners {
		if o.VNodes == 0 || seen[o.Addr] {
			continue
		}
		seen[o.Addr] = true
		hosts = append(hosts, ring.EnvoyHost{Key: o.Name, Weight: uint32(o.VNodes)})
	}
	r := uint64(v.RingSize)
	return ring.BuildEnvoy(hosts, r, r)
}

// desiredRing is the manager's lease ring for a view: every owner with its
// virtual nodes.
func desiredRing(v lease.RingView) (*ring.Ring, error) {
	var owners []ring.Owner
	for _, o := range v.Owners {
		owners = append(owners, ring.Owner{Name: o.Name, VNodes: o.VNodes})
	}
	return ring.New(owners)
}

// sameRing reports whether two rings send every point to the same owner.
func sameRing(a, b *ring.Ring) bool {
	ea, eb := a.Entries(), b.Entries()
	if len(ea) != len(eb) {
		return false
	}
	for i := range ea {
		if ea[i].Hash != eb[i].Hash || ea[i].Owner != eb[i].Owner {
			return false
		}
	}
	return true
}

// TestNoTwoEndpointsShareAnAddress: a new owner started on the address of an
// owner that crashed (a restarted pod that got the old pod's IP) while the
// crashed owner's session is still live. Before issue 15 the manager listed
// both in the endpoints; Envoy keeps the first endpoint per address, so its
// ring was not the lease ring (a quarter of the circle went elsewhere on one
// run). Now the new owner is refused with ErrAddressInUse until the old
// session expires, every published view gives each address to one owner,
// and the ring Envoy builds from every view is the manager's.
func TestNoTwoEndpointsShareAnAddress(t *testing.T) {
	log := &ringLog{}
	m := fugetest.StartManager(t, fugetest.Options{T: time.Second, RingSize: 256,
		Observer: func(lt *xds.LeaseTable) manager.Observer { log.LeaseTable = lt; return log }})
	addr := freePort(t)
	old := m.Owner(t, "old", addr, nil)
	m.Owner(t, "other", freePort(t), nil)
	if err := old.Abandon(); err != nil { // a crash: its session lives on for T·65/60
		t.Fatal(err)
	}
	crashed := time.Now()

	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: []string{m.GRPCAddr}, Namespace: m.NS, Name: "new", Addr: addr, LeaseDuration: m.T,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	// Wait until the new owner is admitted, noting whether it was refused
	// for its address meanwhile.
	var refusal error
	fugetest.Eventually(t, "the new owner admitted", func() bool {
		if err := o.Err(); errors.Is(err, ownerguard.ErrAddressInUse) {
			refusal = err
		}
		select {
		case <-o.Ready():
			return true
		default:
			return false
		}
	})
	admitted := time.Since(crashed)
	fugetest.Eventually(t, "the new owner to hold arcs", func() bool { return len(o.Held()) > 0 })

	views := log.all()
	if len(views) < 3 {
		t.Fatalf("only %d ring views published", len(views))
	}
	for i, v := range views {
		if err := checkView(v); err != nil {
			t.Errorf("view %d of %d: %v", i, len(views), err)
		}
	}
	if refusal == nil {
		t.Errorf("the new owner was admitted %v after the crash without being refused for its address", admitted)
	} else {
		t.Logf("refused until the old session expired (%v after the crash): %v", admitted, refusal)
	}
	if hold := manager.HoldDuration(m.T); admitted < hold/2 {
		t.Errorf("new owner admitted %v after the crash, before the old session could have expired (hold %v)", admitted, hold)
	}
}

// checkView fails a view that gives one address to two owners, or whose
// Envoy ring differs from the lease ring.
func checkView(v lease.RingView) error {
	addrs := map[string]string{}
	for _, o := range v.Owners {
		if prev, ok := addrs[o.Addr]; ok {
			return fmt.Errorf("owners %q and %q share the address %s", prev, o.Name, o.Addr)
		}
		addrs[o.Addr] = o.Name
	}
	if len(v.Owners) == 0 {
		return nil
	}
	want, err := desiredRing(v)
	if err != nil {
		return err
	}
	got, err := envoyRing(v)
	if err != nil {
		return err
	}
	if !sameRing(want, got) {
		return fmt.Errorf("Envoy's ring (%d entries) differs from the lease ring (%d entries)", got.Len(), want.Len())
	}
	return nil
}

// The checker above is what the test relies on: a view with two owners on
// one address must fail it, since Envoy's ring then drops an owner.
func TestNegativeControlSharedAddressView(t *testing.T) {
	owners, err := ring.Apportion([]string{"a", "b", "c"}, 256)
	if err != nil {
		t.Fatal(err)
	}
	v := lease.RingView{RingSize: 256}
	for i, o := range owners {
		addr := fmt.Sprintf("127.0.0.1:%d", 9000+i)
		if o.Name == "c" {
			addr = "127.0.0.1:9000" // a's address
		}
		v.Owners = append(v.Owners, lease.RingOwner{Name: o.Name, Addr: addr, VNodes: o.VNodes})
	}
	if err := checkView(v); err == nil {
		t.Fatal("a view with two owners on one address passed the check")
	}
	want, _ := desiredRing(v)
	got, err := envoyRing(v)
	if err != nil {
		t.Fatal(err)
	}
	if sameRing(want, got) {
		t.Fatal("Envoy's ring with an endpoint dropped for its address equals the lease ring")
	}
}

// TestGuardFollowsNamespaceHeader: a namespace routed by another header
// than X-Fuge-Key, and a server guarded as the presence server's main does
// it (a guard with no header of its own; e2e does not import examples, so a
// small key-value handler stands in for the presence service). Before issue 15 the guard read X-Fuge-Key
// whatever the namespace said, so every request was refused with 400; now
// the Owner hears the namespace's header from the manager and the guard
// reads the key from it.
func TestGuardFollowsNamespaceHeader(t *testing.T) {
	const header = "X-Tenant-Id"
	m := fugetest.StartManager(t, fugetest.Options{T: time.Second, RingSize: 64, Header: header})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	owner := m.Owner(t, "p1", ln.Addr().String(), nil)
	guard, err := ownerguard.NewGuard(owner, ownerguard.GuardConfig{Name: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	vals := map[string]string{}
	kv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/devices/")
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			vals[key] = string(b)
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet:
			v, ok := vals[key]
			if !ok {
				http.NotFound(w, r)
				return
			}
			io.WriteString(w, v)
		}
	})
	srv := &http.Server{Handler: guard.HTTP(kv)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	fugetest.Eventually(t, "p1 to hold the ring", func() bool { return len(owner.Held()) > 0 })
	if got := owner.RoutingHeader(); got != header {
		t.Fatalf("Owner.RoutingHeader() = %q, want %q", got, header)
	}

	do := func(method, hdr, key, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+ln.Addr().String()+"/devices/"+key, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(hdr, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(http.MethodPut, header, "dev1", "10.0.0.1:5000"); code/100 != 2 {
		t.Fatalf("PUT with %s: %d %q", header, code, body)
	}
	if code, body := do(http.MethodGet, header, "dev1", ""); code != http.StatusOK || !strings.Contains(body, "10.0.0.1:5000") {
		t.Fatalf("GET with %s: %d %q", header, code, body)
	}
	code, body := do(http.MethodGet, ownerguard.DefaultKeyHeader, "dev1", "")
	if code != http.StatusBadRequest || !strings.Contains(body, header) {
		t.Fatalf("GET with only %s: %d %q, want 400 naming %s", ownerguard.DefaultKeyHeader, code, body, header)
	}
}
