package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

const (
	defaultTestTimeout = 30 * time.Second
	testNS             = "ns"
	testRing           = 256
)

// freePort reserves a port on 127.0.0.1 for a node that must come back on
// the same address after a restart (raft membership names addresses).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type node struct {
	cfg manager.ServerConfig
	srv *manager.Server
	lt  *xds.LeaseTable
}

type cluster struct {
	t     *testing.T
	T     time.Duration
	mu    sync.Mutex
	nodes []*node
}

func newCluster(t *testing.T, n int, T time.Duration) *cluster {
	t.Helper()
	return newClusterWith(t, n, T, nil)
}

// newClusterWith starts n nodes, each configured by configure (if not nil)
// after the test defaults.
func newClusterWith(t *testing.T, n int, T time.Duration, configure func(*manager.ServerConfig)) *cluster {
	t.Helper()
	return buildCluster(t, n, T, configure, func(c *cluster, nd *node) error { return tryStart(c, nd, nil) })
}

// buildCluster starts n nodes with start, each configured by configure (if
// not nil) after the test defaults, and waits until they are all voters.
// A node's first start that finds a port taken (freePort released it, and
// another test's process may bind it before the node does) is tried again
// on new ports: nothing knows its addresses yet.
func buildCluster(t *testing.T, n int, T time.Duration, configure func(*manager.ServerConfig), start func(*cluster, *node) error) *cluster {
	t.Helper()
	c := &cluster{t: t, T: T}
	for i := range n {
		cfg := manager.DefaultServerConfig()
		cfg.NodeID = fmt.Sprintf("m%d", i+1)
		cfg.DataDir = t.TempDir()
		cfg.LeaseDuration = T
		cfg.HeartbeatInterval = T / 6
		cfg.Namespaces = []manager.NamespaceConfig{{Name: testNS, RingSize: testRing}}
		cfg.RaftHeartbeatTimeout = 200 * time.Millisecond
		cfg.RaftElectionTimeout = 200 * time.Millisecond
		cfg.RaftLeaderLeaseTimeout = 100 * time.Millisecond
		if i > 0 {
			cfg.Join = c.nodes[0].cfg.HTTPAddr
		}
		nd := &node{}
		c.nodes = append(c.nodes, nd)
		for try := 1; ; try++ {
			cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = freePort(t), freePort(t), freePort(t)
			if configure != nil {
				configure(&cfg)
			}
			nd.cfg = cfg
			err := start(c, nd)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.EADDRINUSE) || try == 3 {
				t.Fatalf("starting %s: %v", cfg.NodeID, err)
			}
			t.Logf("starting %s: %v; again on new ports", cfg.NodeID, err)
			cfg.DataDir = t.TempDir()
		}
		if i == 0 {
			c.waitLeader()
		}
	}
	c.waitVoters(n)
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.srv != nil {
				nd.srv.Kill()
			}
		}
	})
	return c
}

func (c *cluster) start(nd *node) { startWith(c.t, c, nd, nil) }

// startWith starts a node with a new lease table; wrap, if not nil, puts an
// observer of the FSM in front of it (which must forward to it).
func startWith(t *testing.T, c *cluster, nd *node, wrap func(*xds.LeaseTable) manager.Observer) {
	t.Helper()
	if err := tryStart(c, nd, wrap); err != nil {
		t.Fatal(err)
	}
}

// tryStart is startWith returning its error.
func tryStart(c *cluster, nd *node, wrap func(*xds.LeaseTable) manager.Observer) error {
	var srv *manager.Server
	nd.lt = xds.NewLeaseTable(xds.LeaseTableConfig{Gate: func(ctx context.Context) error { return srv.CheckLeader(ctx) }})
	cfg := nd.cfg
	cfg.Observer = nd.lt
	if wrap != nil {
		cfg.Observer = wrap(nd.lt)
	}
	cfg.Heartbeat = nd.lt.Heartbeat
	s, err := manager.NewServer(cfg)
	if err != nil {
		return err
	}
	srv = s
	if err := s.Start(nd.lt.Register); err != nil {
		return err
	}
	c.mu.Lock()
	nd.srv = s
	c.mu.Unlock()
	return nil
}

func (c *cluster) kill(nd *node) {
	nd.srv.Kill()
	c.mu.Lock()
	nd.srv = nil
	c.mu.Unlock()
}

// leader returns the node that leads and runs its lease core, or nil.
func (c *cluster) leader() *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.srv != nil && nd.srv.IsLeader() {
			return nd
		}
	}
	return nil
}

func (c *cluster) waitLeader() *node {
	c.t.Helper()
	var l *node
	eventually(c.t, "a leader", func() bool { l = c.leader(); return l != nil })
	return l
}

// waitVoters waits until n running nodes know the leader's address and
// each lists n voters in its raft configuration. Knowing the leader is not
// enough: a joining node learns it from the leader's first AppendEntries,
// before its addition is in the others' logs, and a test that killed the
// leader then left two nodes that could not elect one (TestClusterOverTLS
// under load, 2 runs in 10: one node's configuration lacked the other).
func (c *cluster) waitVoters(n int) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("%d nodes knowing the leader's address and %d voters", n, n), func() bool {
		k := 0
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, nd := range c.nodes {
			if nd.srv != nil {
				if _, g, _ := nd.srv.Leader(); g != "" && nd.srv.Voters() == n {
					k++
				}
			}
		}
		return k == n
	})
}

func (c *cluster) grpcAddrs() []string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, nd.cfg.GRPCAddr)
	}
	return out
}

// eventually polls cond until it holds or the test timeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyState(t, what, cond, nil)
}

// eventuallyState is eventually, whose failure also says what state
// returns (if not nil), so that a timeout under load can be told from a
// stuck system.
func eventuallyState(t *testing.T, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			if state != nil {
				t.Fatalf("timed out waiting for %s: %s", what, state())
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a guess at a duration
	}
}

// recorder counts upcalls from owners and lookups.
type recorder struct {
	mu      sync.Mutex
	revoked map[string][]ring.Range
	granted map[string]int
	loss    map[string][]ring.Range
	lossAll map[string]int
}

func newRecorder() *recorder {
	return &recorder{revoked: map[string][]ring.Range{}, granted: map[string]int{}, loss: map[string][]ring.Range{}, lossAll: map[string]int{}}
}

func (r *recorder) ownership(name string) func(granted, revoked []ring.Range) {
	return func(granted, revoked []ring.Range) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.granted[name] += len(granted)
		r.revoked[name] = append(r.revoked[name], revoked...)
	}
}

func (r *recorder) lossFn(name string) func([]ring.Range, bool) {
	return func(rs []ring.Range, all bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.loss[name] = append(r.loss[name], rs...)
		if all {
			r.lossAll[name]++
		}
	}
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.revoked)
	clear(r.granted)
	clear(r.loss)
	clear(r.lossAll)
}

func (r *recorder) counts() (revoked, loss, lossAll int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.revoked {
		revoked += len(v)
	}
	for _, v := range r.loss {
		loss += len(v)
	}
	for _, v := range r.lossAll {
		lossAll += v
	}
	return
}

func startOwner(t *testing.T, c *cluster, name string, rec *recorder) *ownerguard.Owner {
	t.Helper()
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: c.grpcAddrs(), Namespace: testNS, Name: name, Addr: name + ".local:80",
		LeaseDuration: c.T, OnOwnership: rec.ownership(name),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func startLookup(t *testing.T, c *cluster, name string, rec *recorder) *lb.Lookup {
	t.Helper()
	return runLookup(t, lb.LookupConfig{
		Managers: c.grpcAddrs(), Namespace: testNS, Name: name,
		OnLoss: rec.lossFn(name), StalenessBound: 3 * c.T,
	})
}

// runLookup starts a Lookup of cfg, closed when the test ends.
func runLookup(t *testing.T, cfg lb.LookupConfig) *lb.Lookup {
	t.Helper()
	l, err := lb.NewLookup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// closeLookups closes ls before a test reads the loss upcalls they made:
// a Lookup calls OnLoss on its own goroutine after it publishes the table
// that caused it, so a converged table may have its upcall still queued;
// Close returns once every queued upcall is delivered.
func closeLookups(ls []*lb.Lookup) {
	for _, l := range ls {
		l.Close()
	}
}

// converged reports whether the leader's lease table has every arc granted
// to its desired owner, every owner holds exactly its arcs at the table's
// generations, and every lookup's table equals the leader's view.
func converged(c *cluster, owners map[string]*ownerguard.Owner, lookups []*lb.Lookup) bool {
	l := c.leader()
	if l == nil {
		return false
	}
	view, ok := leaderView(l)
	if !ok {
		return false
	}
	want := map[string]map[lease.Gen]int{}
	for _, e := range view {
		if e.Owner == "" {
			return false
		}
		o := owners[e.Owner]
		if o == nil {
			return false
		}
		h, ok := o.GetOwnershipHandle(e.Range.End)
		if !ok || h.Gen != e.Gen {
			return false
		}
		if want[e.Owner] == nil {
			want[e.Owner] = map[lease.Gen]int{}
		}
		want[e.Owner][e.Gen]++
	}
	for name := range owners {
		if len(want[name]) == 0 {
			return false // every owner must be in the ring
		}
	}
	for _, lk := range lookups {
		got := lk.Entries()
		if len(got) != len(view) {
			return false
		}
		for i := range got {
			if got[i] != view[i] {
				return false
			}
		}
	}
	return true
}

// leaderView reads the leader's view through its admin API.
func leaderView(nd *node) ([]lease.Entry, bool) {
	return fetchView(nd.cfg.HTTPAddr)
}

func fetchView(httpAddr string) ([]lease.Entry, bool) {
	resp, err := http.Get("http://" + httpAddr + "/v1/namespaces/" + testNS + "/view")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, false
	}
	var v struct{ Entries []manager.ViewEntry }
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return nil, false
	}
	out := make([]lease.Entry, len(v.Entries))
	for i, e := range v.Entries {
		s, _ := strconv.ParseUint(e.Start, 16, 64)
		en, _ := strconv.ParseUint(e.End, 16, 64)
		out[i] = lease.Entry{Range: ring.Range{Start: s, End: en}, Owner: e.Owner, Addr: e.Addr, Gen: lease.Gen(e.Generation)}
	}
	return out, true
}

func post(t *testing.T, httpAddr, path string) int {
	t.Helper()
	resp, err := http.Post("http://"+httpAddr+path, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestBuildClusterRetriesTakenPort gives a node's first start a raft port
// another listener holds, as another test's process could take a port
// freePort released: the cluster must still come up, on new ports.
func TestBuildClusterRetriesTakenPort(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tries := 0
	c := newClusterWith(t, 1, 2*time.Second, func(cfg *manager.ServerConfig) {
		if tries++; tries == 1 {
			cfg.RaftAddr = taken.Addr().String()
		}
	})
	if tries != 2 {
		t.Fatalf("configured %d times, want 2 (one start refused, one on new ports)", tries)
	}
	if got := c.nodes[0].cfg.RaftAddr; got == taken.Addr().String() {
		t.Fatalf("the node kept the taken port %s", got)
	}
}
