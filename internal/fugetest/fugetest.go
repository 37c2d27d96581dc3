// Package fugetest starts real Fuge components on 127.0.0.1 for tests in
// other packages: a single-node manager with its xDS lease table, owners and
// lookups, all with protocol timers scaled by one lease duration.
package fugetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// DefaultTimeout bounds every wait in this package.
const DefaultTimeout = 30 * time.Second

// Options configures a test manager. Zero values mean the defaults below.
type Options struct {
	Namespace string        // default "ns"
	RingSize  int           // default 256
	Header    string        // routing header; default manager's (X-Fuge-Key)
	Balance   string        // the namespace's balancing policy; default manager's (manager.DefaultBalance)
	T         time.Duration // lease duration; default 2 s
	// Observer, if set, wraps the xDS lease table to watch the FSM; it must
	// forward every call to the table it is given.
	Observer func(*xds.LeaseTable) manager.Observer
	// TLS runs the manager with mutual TLS and certificates from a
	// development CA in a temporary directory (Manager.CertDir); Owner and
	// Lookup then connect with certificates of their own.
	TLS bool
	// SessionRate and SessionBurst are manager.ServerConfig's.
	SessionRate, SessionBurst int
	// AdminToken is manager.ServerConfig.AdminToken.
	AdminToken string
	// UnsafeNoInputChecks is manager.ServerConfig.UnsafeNoInputChecks: only
	// for the hostile-client tests' negative controls.
	UnsafeNoInputChecks bool
	// Timeout bounds Settled; default DefaultTimeout. It guards against a
	// hang, it does not measure speed: a test at R = 65536 under the race
	// detector on a loaded machine needs more.
	Timeout time.Duration
}

// Manager is a running single-node manager.
type Manager struct {
	Server   *manager.Server
	Table    *xds.LeaseTable
	GRPCAddr string // owner protocol and xDS
	HTTPAddr string // admin API
	NS       string
	T        time.Duration
	// CertDir holds the CA and certificates when Options.TLS is set.
	CertDir string
	// Timeout bounds Settled (Options.Timeout).
	Timeout time.Duration

	adminHTTP *http.Client // with an admin certificate under TLS

	mu     sync.Mutex
	owners map[string]*ownerguard.Owner // the latest started by Owner, by name, until closed at cleanup
}

// AdminURL is the admin API's URL for path (https under TLS).
func (m *Manager) AdminURL(path string) string {
	if m.CertDir != "" {
		return "https://" + m.HTTPAddr + path
	}
	return "http://" + m.HTTPAddr + path
}

// AdminClient is an HTTP client of the admin API with an admin's
// certificate under TLS (http.DefaultClient otherwise).
func (m *Manager) AdminClient() *http.Client { return m.adminHTTP }

// StartManager starts a single-node manager on 127.0.0.1 with its data in a
// temporary directory and waits until it leads. It is killed at cleanup.
func StartManager(t testing.TB, o Options) *Manager {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = "ns"
	}
	if o.RingSize == 0 {
		o.RingSize = 256
	}
	if o.T == 0 {
		o.T = 2 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	cfg := manager.DefaultServerConfig()
	cfg.NodeID = "m1"
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.LeaseDuration = o.T
	cfg.HeartbeatInterval = o.T / 6
	cfg.Namespaces = []manager.NamespaceConfig{{Name: o.Namespace, RingSize: o.RingSize, Header: o.Header, Balance: o.Balance}}
	cfg.RaftHeartbeatTimeout = 200 * time.Millisecond
	cfg.RaftElectionTimeout = 200 * time.Millisecond
	cfg.RaftLeaderLeaseTimeout = 100 * time.Millisecond
	cfg.AdminToken, cfg.UnsafeNoInputChecks = o.AdminToken, o.UnsafeNoInputChecks
	cfg.SessionRate, cfg.SessionBurst = o.SessionRate, o.SessionBurst
	var certs string
	if o.TLS {
		certs = t.TempDir()
		if err := fugetls.InitDir(certs, fugetls.InitOptions{Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		src, err := fugetls.NewSource(fugetls.DirFiles(certs, fugetls.ManagerBase))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = src
	}
	var srv *manager.Server
	lt := xds.NewLeaseTable(xds.LeaseTableConfig{Gate: func(ctx context.Context) error { return srv.CheckLeader(ctx) }})
	cfg.Observer = lt
	if o.Observer != nil {
		cfg.Observer = o.Observer(lt)
	}
	cfg.Heartbeat = lt.Heartbeat
	s, err := manager.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv = s
	if err := s.Start(lt.Register); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	_, g, h := s.Addrs()
	m := &Manager{Server: s, Table: lt, GRPCAddr: g, HTTPAddr: h, NS: o.Namespace, T: o.T, Timeout: o.Timeout, CertDir: certs, adminHTTP: http.DefaultClient}
	if certs != "" {
		m.adminHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: m.Source(t, fugetls.AdminID("test")).ClientConfig(fugetls.RoleManager)}}
	}
	Eventually(t, "the manager to lead", s.IsLeader)
	return m
}

// DialOptions are the gRPC options of a client of the manager with the
// identity id: a certificate issued for it when the manager runs with TLS,
// none otherwise.
func (m *Manager) DialOptions(t testing.TB, id fugetls.ID) []grpc.DialOption {
	t.Helper()
	if m.CertDir == "" {
		return nil
	}
	src := m.Source(t, id)
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig(fugetls.RoleManager)))}
}

// Source issues a certificate for id from the manager's CA (Options.TLS)
// and loads it.
func (m *Manager) Source(t testing.TB, id fugetls.ID) *fugetls.Source {
	t.Helper()
	base := string(id.Role) + "-" + id.Namespace + "-" + id.Name
	if err := fugetls.Issue(m.CertDir, base, id, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	src, err := fugetls.NewSource(fugetls.DirFiles(m.CertDir, base))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Owner starts an Owner named name that serves at addr and waits until it
// is ready (its first answer from the manager). It is closed at cleanup.
func (m *Manager) Owner(t testing.TB, name, addr string, onOwnership func(granted, revoked []ring.Range)) *ownerguard.Owner {
	t.Helper()
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: []string{m.GRPCAddr}, Namespace: m.NS, Name: name, Addr: addr,
		LeaseDuration: m.T, OnOwnership: onOwnership,
		DialOptions: m.DialOptions(t, fugetls.OwnerID(m.NS, name)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	if m.owners == nil {
		m.owners = map[string]*ownerguard.Owner{}
	}
	m.owners[name] = o
	m.mu.Unlock()
	t.Cleanup(func() {
		o.Close()
		m.mu.Lock()
		if m.owners[name] == o {
			delete(m.owners, name)
		}
		m.mu.Unlock()
	})
	Wait(t, "owner "+name+" ready", o.Ready())
	return o
}

// started is the owners that Owner started and that are still open, by
// name.
func (m *Manager) started() map[string]*ownerguard.Owner {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.owners)
}

// holds reports whether e's owner, if Owner started it (started), holds
// e's arc under e's generation: a grant is in the table, and so in the
// lookups' view, once committed, and reaches its owner a round trip later
// (later still while the manager waits for the owner's answer to its last
// message).
func holds(started map[string]*ownerguard.Owner, e lease.Entry) bool {
	o := started[e.Owner]
	if o == nil {
		return true
	}
	hd, ok := o.GetOwnershipHandle(e.Range.End)
	return ok && hd.Gen == e.Gen
}

// Lookup starts a Lookup on the namespace and waits until it holds the
// whole table. It is closed at cleanup.
func (m *Manager) Lookup(t testing.TB, name string, onLoss func([]ring.Range, bool)) *lb.Lookup {
	t.Helper()
	l, err := lb.NewLookup(lb.LookupConfig{
		Managers: []string{m.GRPCAddr}, Namespace: m.NS, Name: name,
		StalenessBound: m.T, OnLoss: onLoss,
		DialOptions: m.DialOptions(t, fugetls.ProxyID(name)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	Wait(t, "lookup "+name+" ready", l.Ready())
	return l
}

// Settled waits until every arc of the namespace is granted (by the
// manager's admin API) to one of the named owners, each owner holds some,
// each owner that Owner started holds its arcs itself (it has received
// the grants), and lookup shows exactly that table.
//
// It polls the lookup and the owners, which are in this process, and asks
// the admin API only once they agree: at R = 65536 the lease table is tens
// of thousands of arcs, which under the race detector on a loaded machine
// took the manager seconds to list, and polling it every few milliseconds
// kept the manager too busy to settle.
func (m *Manager) Settled(t testing.TB, l *lb.Lookup, owners ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, o := range owners {
		want[o] = true
	}
	EventuallyWithin(t, m.Timeout, "every arc granted, held by its owner and seen by the lookup", func() bool {
		got, started := l.Entries(), m.started()
		seen := map[string]bool{}
		for _, e := range got {
			if !want[e.Owner] || !holds(started, e) {
				return false
			}
			seen[e.Owner] = true
		}
		if len(seen) != len(want) {
			return false
		}
		arcs, err := m.Arcs()
		if err != nil || len(got) != len(arcs) {
			return false
		}
		for i, e := range got {
			a := arcs[i]
			if a.State != "granted" || e.Owner != a.Owner || uint64(e.Gen) != a.Generation || fmt.Sprintf("%016x", e.Range.End) != a.End {
				return false
			}
		}
		return true
	})
}

// Arc is one arc of the manager's lease table as its admin API shows it.
type Arc struct {
	Start, End string // 16 hex digits
	Owner      string
	Generation uint64
	State      string // granted, recalling, free
}

// Arcs reads the lease table, in ring order, from the admin API.
func (m *Manager) Arcs() ([]Arc, error) {
	resp, err := m.adminHTTP.Get(m.AdminURL("/v1/namespaces/" + m.NS + "/leases"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fugetest: leases: %s", resp.Status)
	}
	var out struct{ Arcs []Arc }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	return out.Arcs, nil
}

// Eventually polls cond until it holds or DefaultTimeout passes. It waits
// 2 ms between polls, or four times as long as the last poll took, so that
// a costly condition (a table of tens of thousands of arcs under the race
// detector) takes at most a fifth of a core from what it waits for.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, DefaultTimeout, what, cond)
}

// EventuallyWithin is Eventually with a deadline of its own.
func EventuallyWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		start := time.Now()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(max(2*time.Millisecond, 4*time.Since(start))) // polling interval, not a guess at a duration
	}
}

// Wait waits for ch to close or DefaultTimeout to pass.
func Wait(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(DefaultTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}
