package manager_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/manager"
)

// proxyClient is one proxy's session, its messages read into channels.
type proxyClient struct {
	stream fugev1.ProxyService_SessionClient
	views  chan *fugev1.ViewUpdate
	limits chan *fugev1.RateLimitConfig
	relays chan *fugev1.GossipRelay
	err    chan error

	// mu serializes the stream's sends: the test's and the renewals'.
	mu     sync.Mutex
	closed bool // CloseSend was called: no more renewals
}

// send sends m on the session's stream.
func (p *proxyClient) send(m *fugev1.ProxySessionRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stream.Send(m)
}

// closeSend ends the session cleanly, as a proxy that shuts down does.
func (p *proxyClient) closeSend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.stream.CloseSend()
}

// renew sends a renewal every interval until the session is closed, as a
// proxy does: a member that stops renewing leaves the view after the
// suspect time (5/8 of the lease), and a test that takes longer than that
// between its steps (as under -race on a busy machine) must not lose its
// clients for it.
func (p *proxyClient) renew(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		if !p.closed {
			p.stream.Send(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Renew{Renew: &fugev1.ProxyRenew{Seq: seq}}})
		}
		p.mu.Unlock()
	}
}

func openProxy(t *testing.T, addr, ns, name string) *proxyClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := fugev1.NewProxyServiceClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Register{Register: &fugev1.ProxyRegister{
		Namespace: ns, Name: name, GossipAddr: "127.0.0.1:9", Incarnation: 1}}}); err != nil {
		t.Fatal(err)
	}
	p := &proxyClient{stream: st, views: make(chan *fugev1.ViewUpdate, 64), limits: make(chan *fugev1.RateLimitConfig, 64),
		relays: make(chan *fugev1.GossipRelay, 64), err: make(chan error, 1)}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				p.err <- err
				return
			}
			switch m := m.Msg.(type) {
			case *fugev1.ProxySessionResponse_View:
				p.views <- m.View
			case *fugev1.ProxySessionResponse_Limits:
				p.limits <- m.Limits
			case *fugev1.ProxySessionResponse_Relay:
				p.relays <- m.Relay
			}
		}
	}()
	go p.renew(ctx, 100*time.Millisecond)
	return p
}

// view waits for a view with n members.
func (p *proxyClient) view(t *testing.T, n int) *fugev1.ViewUpdate {
	t.Helper()
	timeout := time.After(defaultTestTimeout)
	for {
		select {
		case v := <-p.views:
			if len(v.Members) == n {
				return v
			}
		case err := <-p.err:
			t.Fatalf("session ended: %v", err)
		case <-timeout:
			t.Fatalf("no view with %d members", n)
		}
	}
}

func TestProxySessionsGetViewsLimitsAndRelay(t *testing.T) {
	s := startNode(t, "n1", "", func(c *manager.ServerConfig) {
		c.ProxyLease = 800 * time.Millisecond
		c.ViewInterval = 200 * time.Millisecond
	})
	eventually(t, "leadership", s.IsLeader)
	_, grpcAddr, httpAddr := s.Addrs()
	a := openProxy(t, grpcAddr, "ns", "pa")
	b := openProxy(t, grpcAddr, "ns", "pb")
	va := a.view(t, 2)
	vb := b.view(t, 2)
	if va.Id != vb.Id || va.Registered != 2 || va.Members[0].Name != "pa" || va.Members[1].Name != "pb" {
		t.Fatalf("views %v and %v", va, vb)
	}

	// Limits: a refused PUT changes nothing; a good one reaches both.
	put := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, "http://"+httpAddr+"/v1/namespaces/ns/ratelimits", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.String()
	}
	for _, bad := range []struct{ body, field string }{
		{`{"limits":[{"name":"t","header":"x-tenant","requests":0,"period":"1s"}]}`, "requests"},
		{`{"limits":[{"name":"t","header":"x tenant","requests":10,"period":"1s"}]}`, "limits[0].header"},
		{`{"limits":[{"name":"t","header":"x-tenant","requests":10,"period":"1s","route_prefix":"api"}]}`, "route_prefix"},
		{`{"limits":[{"name":"t","header":"x-tenant","requests":10,"period":"1s","mode":"loud"}]}`, "mode"},
		{`{"limits":[{"name":"t","header":"x-tenant","requests":10,"period":"1s","on_no_view":"x"}]}`, "on_no_view"},
		{`{"limits":[{"name":"t","header":"x-tenant","requests":10,"period":"1s","max_keys":-3}]}`, "max_keys"},
		{`{"limits":[{"name":"t","header":"x-tenant","requests":10,"period":"1 sec"}]}`, "period"},
	} {
		if code, msg := put(bad.body); code != http.StatusBadRequest || !strings.Contains(msg, bad.field) {
			t.Errorf("PUT %s: %d %s, want 400 naming %s", bad.body, code, msg, bad.field)
		}
	}
	var got manager.RateLimitSet
	getJSON(t, "http://"+httpAddr+"/v1/namespaces/ns/ratelimits", &got)
	if len(got.Limits) != 0 {
		t.Fatalf("refused PUTs changed the limits: %+v", got)
	}
	code, msg := put(`{"limits":[{"name":"tenant-api","route_prefix":"/api/","header":"x-tenant","requests":1000,"period":"30s","burst":200,"overrides":{"acme":5000},"mode":"shadow"}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, msg)
	}
	for _, p := range []*proxyClient{a, b} {
		timeout := time.After(defaultTestTimeout)
		for done := false; !done; {
			select {
			case l := <-p.limits:
				if len(l.Limits) == 1 {
					r := l.Limits[0]
					if r.Name != "tenant-api" || r.PeriodMs != 30_000 || r.Overrides["acme"] != 5000 || r.Mode != "shadow" || r.OnNoView != "panic_share" || r.MaxKeys != 10_000 {
						t.Fatalf("limits pushed: %v", r)
					}
					done = true
				}
			case <-timeout:
				t.Fatal("limits not pushed")
			}
		}
	}

	// Relay: a's datagram reaches b, named as from a whatever a claims.
	if err := a.send(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Relay{Relay: &fugev1.GossipRelay{From: "pz", To: "pb", Payload: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-b.relays:
		if r.From != "pa" || string(r.Payload) != "x" {
			t.Fatalf("relayed %v", r)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("relay not delivered")
	}

	// b closes cleanly: a new view without it.
	b.closeSend()
	v := a.view(t, 1)
	if v.Id <= va.Id || v.Registered != 1 {
		t.Fatalf("after b left: %v", v)
	}
	var pr struct {
		View manager.ProxyView `json:"view"`
	}
	getJSON(t, "http://"+httpAddr+"/v1/namespaces/ns/proxies", &pr)
	if pr.View.ID != v.Id {
		t.Fatalf("admin view %+v, pushed %v", pr.View, v)
	}
	_ = json.Marshal
}

func TestProxySessionRefusesBadRegister(t *testing.T) {
	s := startNode(t, "n1", "", nil)
	eventually(t, "leadership", s.IsLeader)
	_, grpcAddr, _ := s.Addrs()
	for _, reg := range []*fugev1.ProxyRegister{
		{Namespace: "nope", Name: "p", GossipAddr: "127.0.0.1:9"},
		{Namespace: "ns", Name: "bad name", GossipAddr: "127.0.0.1:9"},
		{Namespace: "ns", Name: "p", GossipAddr: "nowhere"},
	} {
		p := openProxyRaw(t, grpcAddr, reg)
		if _, err := p.Recv(); err == nil {
			t.Errorf("register %v accepted", reg)
		}
	}
}

func openProxyRaw(t *testing.T, addr string, reg *fugev1.ProxyRegister) fugev1.ProxyService_SessionClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	st, err := fugev1.NewProxyServiceClient(cc).Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Register{Register: reg}}); err != nil {
		t.Fatal(err)
	}
	return st
}
