package xds

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
)

var _ manager.RingObserver = (*LeaseTable)(nil)

// testManager is a single-node manager serving a lease table on 127.0.0.1.
type testManager struct {
	s          *manager.Server
	lt         *LeaseTable
	grpc, http string
}

func startManager(t *testing.T, ringSize int, set ...func(*LeaseTable)) *testManager {
	t.Helper()
	cfg := manager.DefaultServerConfig()
	cfg.NodeID = "m1"
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.LeaseDuration = time.Minute // sessions outlive the test without renewals
	cfg.Namespaces = []manager.NamespaceConfig{{Name: "ns", RingSize: ringSize}}
	cfg.RaftHeartbeatTimeout, cfg.RaftElectionTimeout, cfg.RaftLeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	var srv *manager.Server
	lt := NewLeaseTable(LeaseTableConfig{
		Logger:        slog.New(slog.NewTextHandler(w, nil)),
		Gate:          func(ctx context.Context) error { return srv.CheckLeader(ctx) },
		EnvoyListener: "127.0.0.1:10000",
	})
	cfg.Observer = lt
	cfg.Heartbeat = lt.Heartbeat
	cfg.XDSNACKs = func() uint64 { return lt.Stats().NACKs }
	cfg.XDSWholeTables = func() (uint64, uint64) { st := lt.Stats(); return st.WholeWaits, st.WholeBypasses }
	for _, f := range set {
		f(lt)
	}
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
	poll(t, "leadership", s.IsLeader)
	return &testManager{s: s, lt: lt, grpc: g, http: h}
}

// poll waits until cond holds or the test's deadline passes.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a guess at a duration
	}
}

// join opens an owner session over the owner protocol: one request, then
// the stream is only drained.
func (m *testManager) join(ctx context.Context, t *testing.T, name string, nonce uint64) {
	t.Helper()
	cc, err := grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	st, err := fugev1.NewOwnerServiceClient(cc).Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := wire.Request(lease.LeaseRequest{Namespace: "ns", Owner: name, Addr: "127.0.0.1:" + strconv.Itoa(int(9000+nonce)),
		Header: lease.Header{Nonce: nonce, Seq: 1}}, false)
	req.LeaseDurationMs = time.Minute.Milliseconds()
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}()
}

// desired reads the leader's desired ring from the admin API.
func (m *testManager) desired(t *testing.T) (size int, entries []string) {
	t.Helper()
	resp, err := http.Get("http://" + m.http + "/v1/namespaces/ns/ring")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		RingSize int `json:"ring_size"`
		Entries  []struct {
			Position string `json:"position"`
			Owner    string `json:"owner"`
			Index    int    `json:"index"`
		} `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, e := range out.Entries {
		entries = append(entries, fmt.Sprintf("%s %s#%d", e.Position, e.Owner, e.Index))
	}
	return out.RingSize, entries
}

// ringEntries lists a client's ring as the admin API does.
func ringEntries(t *testing.T, st *envoyState) []string {
	t.Helper()
	c, _ := st.res[ClusterTypeURL]["ns"].(*cluster.Cluster)
	cla, _ := st.res[EndpointTypeURL]["ns"].(*endpoint.ClusterLoadAssignment)
	if c == nil || cla == nil {
		return nil
	}
	r := envoyRing(t, c, cla)
	var out []string
	for p, e := range r.Entries() {
		out = append(out, fmt.Sprintf("%016x %s#%d", e.Hash, r.OwnerName(p), e.Index))
	}
	return out
}

func endpointNames(st *envoyState) []string {
	cla, _ := st.res[EndpointTypeURL]["ns"].(*endpoint.ClusterLoadAssignment)
	var out []string
	for _, loc := range cla.GetEndpoints() {
		for _, ep := range loc.GetLbEndpoints() {
			out = append(out, ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue())
		}
	}
	slices.Sort(out)
	return out
}

// TestManagerRing runs a manager with owners joining and draining, and an
// Envoy-like client over each variant of ADS: each receives Listener,
// Route, Cluster and Endpoints, new Endpoints after each change, and the
// ring it builds from them is the manager's desired ring, entry for entry.
func TestManagerRing(t *testing.T) {
	ctx := testContext(t)
	const size = 256
	m := startManager(t, size)
	m.join(ctx, t, "a", 1)
	m.join(ctx, t, "b", 2)

	conn, err := grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	// State of the world: LDS, then RDS, CDS, EDS.
	sotw := openNamedSotw(ctx, t, conn)
	sotwState := newEnvoyState()
	sotw.subscribe(testNode("ns"), ListenerTypeURL)
	sotwNext := func() { sotwState.sotw(t, sotw.recv()) }
	for _, step := range []struct {
		typeURL string
		names   []string
	}{{RouteTypeURL, []string{"ns"}}, {ClusterTypeURL, nil}, {EndpointTypeURL, []string{"ns"}}} {
		for sotwState.res[ListenerTypeURL] == nil || step.typeURL == ClusterTypeURL && sotwState.res[RouteTypeURL] == nil ||
			step.typeURL == EndpointTypeURL && sotwState.res[ClusterTypeURL] == nil {
			sotwNext()
		}
		sotw.subscribe(nil, step.typeURL, step.names...)
	}

	// Delta, in the same order.
	delta := openDelta(ctx, t, conn, testNode("ns"), ListenerTypeURL, nil)
	deltaState := newEnvoyState()
	deltaNext := func() { deltaState.delta(t, delta.recv()) }
	for _, step := range []struct {
		typeURL string
		names   []string
	}{{RouteTypeURL, []string{"ns"}}, {ClusterTypeURL, nil}, {EndpointTypeURL, []string{"ns"}}} {
		for deltaState.res[ListenerTypeURL] == nil || step.typeURL == ClusterTypeURL && deltaState.res[RouteTypeURL] == nil ||
			step.typeURL == EndpointTypeURL && deltaState.res[ClusterTypeURL] == nil {
			deltaNext()
		}
		delta.send(&discovery.DeltaDiscoveryRequest{TypeUrl: step.typeURL, ResourceNamesSubscribe: step.names})
	}

	lastVersion := map[string]uint64{}
	// converge reads responses until the client's endpoints are exactly
	// owners and its ring is the manager's desired ring.
	converge := func(what string, st *envoyState, next func(), owners ...string) {
		t.Helper()
		for {
			if slices.Equal(endpointNames(st), owners) {
				gotSize, want := m.desired(t)
				got := ringEntries(t, st)
				if gotSize == size && len(want) == size && slices.Equal(got, want) {
					break
				}
			}
			next()
		}
		if l := st.res[ListenerTypeURL]["ns/envoy"]; l == nil {
			t.Errorf("%s: no Envoy listener", what)
		} else if sa := l.(*listener.Listener).GetAddress().GetSocketAddress(); sa.GetPortValue() != 10000 {
			t.Errorf("%s: listener on %v", what, sa)
		}
		v, err := strconv.ParseUint(st.versions[EndpointTypeURL]["ns"], 10, 64)
		if err != nil || v <= lastVersion[what] {
			t.Errorf("%s: endpoints at version %q, after %d", what, st.versions[EndpointTypeURL]["ns"], lastVersion[what])
		}
		lastVersion[what] = v
		t.Logf("%s: endpoints %v at raft index %d; ring of %d entries equals the manager's", what, owners, v, size)
	}
	converge("sotw", sotwState, sotwNext, "a", "b")
	converge("delta", deltaState, deltaNext, "a", "b")

	m.join(ctx, t, "c", 3)
	converge("sotw", sotwState, sotwNext, "a", "b", "c")
	converge("delta", deltaState, deltaNext, "a", "b", "c")

	resp, err := http.Post("http://"+m.http+"/v1/namespaces/ns/owners/b/drain", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drain: %s", resp.Status)
	}
	converge("sotw", sotwState, sotwNext, "a", "c")
	converge("delta", deltaState, deltaNext, "a", "c")

	if s := m.lt.Stats(); s.BadRings != 0 || s.NACKs != 0 || s.RingPushes == 0 {
		t.Errorf("stats %+v", s)
	}

	// A NACK is counted, and shown in /metrics.
	sotw.send(&discovery.DiscoveryRequest{TypeUrl: EndpointTypeURL, ResourceNames: []string{"ns"},
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "test NACK"}})
	poll(t, "the NACK counted", func() bool { return m.lt.Stats().NACKs == 1 })
	if v := m.metric(t, "fuge_xds_nacks_total"); v != "1" {
		t.Errorf("/metrics: fuge_xds_nacks_total %s, want 1", v)
	}
}

// metric is the value of an unlabelled metric in the manager's /metrics.
func (m *testManager) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + m.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics lacks %s", name)
	return ""
}

// TestWholeTableMetrics checks that a manager's /metrics counts the whole
// tables that waited for a slot, and those sent without one.
func TestWholeTableMetrics(t *testing.T) {
	ctx := testContext(t)
	m := startManager(t, 4096, func(lt *LeaseTable) { lt.whole.slots = 1 })
	conn, err := grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// The namespace's first view (R=4096: 1,024 blocks) is a whole table.
	poll(t, "the namespace's view", func() bool { return m.lt.Stats().Namespaces == 1 })
	a := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	ra := a.recvRaw()
	if len(ra.Resources) < wholeMin {
		t.Fatalf("the first response has %d blocks, under the gate's %d", len(ra.Resources), wholeMin)
	}
	b := openDelta(ctx, t, conn, testNode("ns"), ArcBlockTypeURL, nil)
	poll(t, "b to wait", func() bool { return m.lt.Stats().WholeWaits == 1 })
	if w, by := m.metric(t, "fuge_xds_whole_table_waits_total"), m.metric(t, "fuge_xds_whole_table_bypasses_total"); w != "1" || by != "0" {
		t.Fatalf("/metrics: %s waits and %s bypasses, want 1 and 0", w, by)
	}
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ra.TypeUrl, ResponseNonce: ra.Nonce})
	if rb := b.recvRaw(); len(rb.Resources) != len(ra.Resources) {
		t.Fatalf("b was sent %d blocks, a %d", len(rb.Resources), len(ra.Resources))
	}
}
