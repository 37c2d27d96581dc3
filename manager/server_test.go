package manager_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
)

const defaultTestTimeout = 20 * time.Second

// fastRaft shortens raft's timers so elections take tens of milliseconds.
func fastRaft(c *manager.ServerConfig) {
	c.RaftHeartbeatTimeout = 100 * time.Millisecond
	c.RaftElectionTimeout = 100 * time.Millisecond
	c.RaftLeaderLeaseTimeout = 50 * time.Millisecond
}

func startNode(t testing.TB, id, join string, mut func(*manager.ServerConfig)) *manager.Server {
	t.Helper()
	cfg := manager.DefaultServerConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Join = join
	cfg.LeaseDuration = 3 * time.Second
	cfg.Namespaces = []manager.NamespaceConfig{{Name: "ns", RingSize: 64}}
	fastRaft(&cfg)
	if mut != nil {
		mut(&cfg)
	}
	s, err := manager.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return s
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a guess at duration
	}
}

func dial(t *testing.T, addr string) fugev1.OwnerServiceClient {
	t.Helper()
	return fugev1.NewOwnerServiceClient(dialConn(t, addr))
}

// dialConn is a plaintext client connection to addr, closed when the test
// ends.
func dialConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// exchange sends an owner request on stream and returns the response.
func exchange(t testing.TB, stream fugev1.OwnerService_LeaseClient, m *fugev1.LeaseRequest) lease.LeaseResponse {
	t.Helper()
	_, r := exchangeRaw(t, stream, m)
	return r
}

// exchangeRaw is exchange, returning the response as it came too.
func exchangeRaw(t testing.TB, stream fugev1.OwnerService_LeaseClient, m *fugev1.LeaseRequest) (*fugev1.LeaseResponse, lease.LeaseResponse) {
	t.Helper()
	if err := stream.Send(m); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.ResponseFrom(resp)
	if err != nil {
		t.Fatal(err)
	}
	return resp, r
}

// hello is a session's first request, with the test nodes' lease duration.
func hello(ns, owner string, nonce uint64) *fugev1.LeaseRequest {
	r := wire.Request(lease.LeaseRequest{Namespace: ns, Owner: owner, Addr: owner + ":1", Header: lease.Header{Nonce: nonce, Seq: 1}}, false)
	r.LeaseDurationMs = 3000
	return r
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return resp.StatusCode
}

func TestSingleNodeGrantsEveryArc(t *testing.T) {
	s := startNode(t, "n1", "", nil)
	eventually(t, "leadership", s.IsLeader)
	_, g, h := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	stream, err := dial(t, g).Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := exchange(t, stream, hello("ns", "a", 11))
	if len(r.Grant) != 1 || !r.Grant[0].Range.IsFull() || r.AckSeq != 1 || r.PeerNonce != 11 {
		t.Fatalf("first response = %+v, want the whole ring granted, acknowledging seq 1", r)
	}
	var leases struct {
		Arcs []struct{ Owner, State string }
	}
	if code := getJSON(t, "http://"+h+"/v1/namespaces/ns/leases", &leases); code != 200 {
		t.Fatalf("leases: %d", code)
	}
	if len(leases.Arcs) != 1 || leases.Arcs[0].Owner != "a" || leases.Arcs[0].State != "granted" {
		t.Errorf("leases = %+v", leases)
	}
	var cl struct {
		Role, LeaderID string
		LastIndex      uint64 `json:"last_index"`
	}
	getJSON(t, "http://"+h+"/v1/cluster", &cl)
	if cl.Role != "leader" || cl.LastIndex == 0 {
		t.Errorf("cluster = %+v", cl)
	}
}

// The manager answers an owner that reads packed leases with packed ones
// and reads its packed renewals; an owner from before packed leases (its
// requests do not say it reads them) gets and sends messages, as before.
func TestSingleNodePacksLeasesOnlyForOwnersThatReadThem(t *testing.T) {
	s := startNode(t, "n1", "", nil)
	eventually(t, "leadership", s.IsLeader)
	_, g, h := s.Addrs()
	resp, err := http.Post("http://"+h+"/v1/namespaces", "application/json", strings.NewReader(`{"name":"old","ring_size":64}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create namespace old: %v %v", resp, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	client := dial(t, g)
	for _, packed := range []bool{true, false} {
		ns := "ns"
		if !packed {
			ns = "old"
		}
		stream, err := client.Lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		send := func(m *fugev1.LeaseRequest) (*fugev1.LeaseResponse, lease.LeaseResponse) {
			t.Helper()
			m.Packed = packed
			raw, r := exchangeRaw(t, stream, m)
			if !raw.Packed {
				t.Errorf("%s: the response does not say the manager reads packed leases", ns)
			}
			return raw, r
		}
		raw, r := send(hello(ns, "a", 11))
		if len(r.Grant) != 1 || !r.Grant[0].Range.IsFull() {
			t.Fatalf("%s: first response %+v, want the whole ring granted", ns, r)
		}
		if got := len(raw.GrantPacked) == 3 && len(raw.Grant) == 0; got != packed {
			t.Errorf("%s (owner reads packed %v): grant %d messages, %d packed numbers", ns, packed, len(raw.Grant), len(raw.GrantPacked))
		}
		renew := wire.Request(lease.LeaseRequest{Namespace: ns, Owner: "a", Addr: "a:1",
			Header: lease.Header{Nonce: 11, Seq: 2, PeerNonce: r.Nonce, AckSeq: r.Seq}, Held: r.Grant}, packed)
		renew.LeaseDurationMs = 3000
		raw, r2 := send(renew)
		if len(r2.Renew) != 1 || r2.Renew[0] != r.Grant[0] || r2.AckSeq != 2 {
			t.Fatalf("%s: renewal answered %+v, want %v renewed", ns, r2, r.Grant)
		}
		if got := len(raw.RenewPacked) == 3 && len(raw.Renew) == 0; got != packed {
			t.Errorf("%s (owner reads packed %v): renew %d messages, %d packed numbers", ns, packed, len(raw.Renew), len(raw.RenewPacked))
		}
	}
}

func TestBadInputGetsAClearErrorAndChangesNothing(t *testing.T) {
	s := startNode(t, "n1", "", func(c *manager.ServerConfig) { c.MaxMessageBytes = 64 << 10 })
	eventually(t, "leadership", s.IsLeader)
	_, g, h := s.Addrs()
	client := dial(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	open := func(first *fugev1.LeaseRequest) (fugev1.OwnerService_LeaseClient, error) {
		st, err := client.Lease(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.Send(first); err != nil {
			return nil, err
		}
		_, err = st.Recv()
		return st, err
	}
	if _, err := open(hello("nope", "a", 1)); status.Code(err) != codes.NotFound {
		t.Errorf("unknown namespace: %v, want NotFound", err)
	}
	bad := hello("ns", "a", 1)
	bad.Header.Seq = 0
	if _, err := open(bad); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed: %v, want InvalidArgument", err)
	}
	longer := hello("ns", "a", 1)
	longer.LeaseDurationMs = 4000
	if _, err := open(longer); status.Code(err) != codes.InvalidArgument {
		t.Errorf("owner lease longer than the namespace's: %v, want InvalidArgument", err)
	}
	both := hello("ns", "a", 1)
	both.HeldPacked = []uint64{1, 2, 3}
	both.Held = []*fugev1.Lease{{Range: &fugev1.Range{Start: 1, End: 2}, Gen: 3}}
	if _, err := open(both); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "held_packed") {
		t.Errorf("held in both forms: %v, want InvalidArgument naming held_packed", err)
	}
	huge := hello("ns", "a", 1)
	huge.Addr = strings.Repeat("x", 100<<10)
	if _, err := open(huge); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized: %v, want ResourceExhausted", err)
	}
	if _, err := open(hello("ns", "a", 1)); err != nil {
		t.Fatalf("first session: %v", err)
	}
	if _, err := open(hello("ns", "a", 2)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second live session under the same name: %v, want AlreadyExists", err)
	}
	var leases struct{ Arcs []struct{ Owner string } }
	getJSON(t, "http://"+h+"/v1/namespaces/ns/leases", &leases)
	for _, a := range leases.Arcs {
		if a.Owner != "a" {
			t.Errorf("the refused session changed the table: %+v", leases)
		}
	}
	post := func(body string) int {
		resp, err := http.Post("http://"+h+"/v1/namespaces", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for body, want := range map[string]int{
		`{"name":`:                          400,
		`{"name":"x","ring_size":100}`:      400,
		`{"name":"x","ring_size":64,"z":1}`: 400,
		`{"name":"ns","ring_size":64}`:      409,
		`{"name":"x","lease_duration":"q"}`: 400,
		`{"name":"x","ring_size":64}`:       201,
	} {
		if got := post(body); got != want {
			t.Errorf("POST %s = %d, want %d", body, got, want)
		}
	}
	var nss struct{ Namespaces []struct{ Name string } }
	getJSON(t, "http://"+h+"/v1/namespaces", &nss)
	if len(nss.Namespaces) != 2 {
		t.Errorf("namespaces after bad creates = %+v, want ns and x", nss)
	}
	if code := getJSON(t, "http://"+h+"/v1/namespaces/zzz/leases", nil); code != 404 {
		t.Errorf("unknown namespace leases = %d", code)
	}
	req, _ := http.NewRequest("POST", "http://"+h+"/v1/namespaces/ns/owners/ghost/drain", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Errorf("drain unknown owner: %v %v", resp.StatusCode, err)
	}
}

func TestStandbyNamesTheLeader(t *testing.T) {
	a := startNode(t, "n1", "", nil)
	eventually(t, "leadership", a.IsLeader)
	_, ag, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	// The standby learns the leader's ID from raft heartbeats, and its
	// addresses once its state machine has caught up.
	eventually(t, "n2 to learn the leader's address", func() bool { _, g, _ := b.Leader(); return g == ag })
	_, bg, bh := b.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	st, err := dial(t, bg).Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(hello("ns", "a", 1))
	_, err = st.Recv()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("standby: %v, want FailedPrecondition", err)
	}
	if got := st.Trailer().Get(manager.LeaderTrailer); len(got) != 1 || got[0] != ag {
		t.Errorf("trailer %v, want leader %s", st.Trailer(), ag)
	}
	// The admin API redirects to the leader.
	var leases struct{ Namespace string }
	if code := getJSON(t, "http://"+bh+"/v1/namespaces/ns/leases", &leases); code != 200 || leases.Namespace != "ns" {
		t.Errorf("standby admin: %d %+v", code, leases)
	}
}

// A clean stop of the leader hands leadership to another voter.
func TestCleanStopHandsLeadershipOver(t *testing.T) {
	a := startNode(t, "n1", "", nil)
	eventually(t, "leadership", a.IsLeader)
	_, _, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	c := startNode(t, "n3", ah, nil)
	_, ag, _ := a.Addrs()
	eventually(t, "followers to know the leader", func() bool {
		_, gb, _ := b.Leader()
		_, gc, _ := c.Leader()
		return gb == ag && gc == ag
	})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	eventually(t, "a new leader", func() bool { return b.IsLeader() || c.IsLeader() })
	var got struct {
		Role string `json:"role"`
	}
	for _, n := range []*manager.Server{b, c} {
		if n.IsLeader() {
			_, _, h := n.Addrs()
			getJSON(t, "http://"+h+"/v1/cluster", &got)
		}
	}
	if got.Role != "leader" {
		t.Errorf("the new leader reports role %q", got.Role)
	}
}
