package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/ratelimit"
)

// installLimits gives p the limits as a manager would, with no manager:
// the node is in no view, so each limit admits L/registered.
func installLimits(t testing.TB, p *Proxy, registered int, rules ...*fugev1.RateLimitRule) *rateLimiter {
	t.Helper()
	node, err := ratelimit.NewNode("p1", ratelimit.NodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	node.SetRegistered(registered)
	r := &rateLimiter{log: slog.New(slog.DiscardHandler), base: time.Now(), node: node}
	r.rules.Store(&rlRules{})
	r.mu.Lock()
	r.setLimitsLocked(&fugev1.RateLimitConfig{Version: 1, Limits: rules})
	r.mu.Unlock()
	if got := len(r.rules.Load().rules); got != len(rules) {
		t.Fatalf("%d of %d limits installed", got, len(rules))
	}
	p.rl.Store(r)
	return r
}

func TestRateLimit429(t *testing.T) {
	owner := startOwner(t, "a", nil)
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(owner.addr, 1), owner.addr) })
	r := installLimits(t, p, 1,
		&fugev1.RateLimitRule{Name: "tenant-api", RoutePrefix: "/api/", Header: "X-Tenant", Requests: 2, PeriodMs: 10_000, Burst: 2},
		&fugev1.RateLimitRule{Name: "dark", RoutePrefix: "/dark/", Header: "X-Tenant", Requests: 1, PeriodMs: 10_000, Burst: 1, Mode: "shadow"})
	c := newClient(t)
	base := "http://" + p.Addr().String()
	get := func(path string, headers ...string) *http.Response {
		resp, _ := do(t, c, "GET", base+path, "", append([]string{DefaultHeader, "k"}, headers...)...)
		return resp
	}
	for i := range 2 {
		if resp := get("/api/x", "X-Tenant", "acme"); resp.StatusCode != 200 {
			t.Fatalf("request %d within the burst: %d", i, resp.StatusCode)
		}
	}
	resp, body := do(t, c, "GET", base+"/api/x", "", DefaultHeader, "k", "X-Tenant", "acme")
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || retry < 4 || retry > 5 ||
		resp.Header.Get("RateLimit-Policy") != `"tenant-api";q=2;w=10` ||
		resp.Header.Get("RateLimit") != `"tenant-api";r=0;t=`+strconv.Itoa(retry) || body != msgRateLimited+"tenant-api\n" {
		t.Fatalf("over the limit: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// Another key, another path, no key: not limited by tenant-api.
	for _, h := range [][]string{{"/api/x", "X-Tenant", "other"}, {"/x", "X-Tenant", "acme"}, {"/api/x"}} {
		if resp := get(h[0], h[1:]...); resp.StatusCode != 200 {
			t.Fatalf("%q: %d", h, resp.StatusCode)
		}
	}
	// Shadow mode admits and counts.
	for range 5 {
		if resp := get("/dark/x", "X-Tenant", "acme"); resp.StatusCode != 200 {
			t.Fatalf("shadow limit refused: %d", resp.StatusCode)
		}
	}
	if l, s := r.limited.Load(), r.shadowed.Load(); l != 1 || s != 3 { // shadow: a burst of 2 (minBurst), then 3 over
		t.Fatalf("limited %d, shadowed %d; want 1 and 3", l, s)
	}
	if owner.hits.Load() != 2+3+5 {
		t.Fatalf("the owner saw %d requests, want the 10 admitted", owner.hits.Load())
	}
}

// TestRateLimitFleet runs two proxies as fuge-proxy runs them, registered
// with a real manager over mutual TLS: they join one view, gossip, and
// share the limit.
func TestRateLimitFleet(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{TLS: true})
	owner := startOwner(t, "a", nil)
	body := `{"limits":[{"name":"t","header":"X-Tenant","requests":20,"period":"1s","burst":4}]}`
	req, _ := http.NewRequest(http.MethodPut, m.AdminURL("/v1/namespaces/"+m.NS+"/ratelimits"), bytes.NewBufferString(body))
	resp, err := m.AdminClient().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT limits: %v %v", resp, err)
	}
	resp.Body.Close()

	var proxies []*Proxy
	var stops []func()
	for _, name := range []string{"p1", "p2"} {
		p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(owner.addr, 1), owner.addr) })
		stop, err := p.EnableRateLimits(RateLimitConfig{Name: name, Epoch: 100 * time.Millisecond, Managers: []string{m.GRPCAddr},
			Namespace: m.NS, TLS: m.Source(t, fugetls.ProxyID(name)).ClientConfig(fugetls.RoleManager)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		proxies = append(proxies, p)
		stops = append(stops, stop)
	}
	fugetest.Eventually(t, "both proxies in one view of two", func() bool {
		for _, p := range proxies {
			s, _ := p.RateLimitStatus()
			if !s.Node.InView || s.Node.Members != 2 {
				return false
			}
		}
		return true
	})
	c := newClient(t)
	admin, js := do(t, c, "GET", "http://"+proxies[0].AdminAddr().String()+"/ratelimit", "")
	var st RateLimitStatus
	if err := json.Unmarshal([]byte(js), &st); err != nil || admin.StatusCode != 200 || st.Node.Registered != 2 || !st.Node.InView {
		t.Fatalf("GET /ratelimit: %d %v %s", admin.StatusCode, err, js)
	}
	// Each proxy starts at L/2 = 10/s with a bucket of 2: a quick burst of
	// 40 at one proxy is mostly refused.
	ok := 0
	for range 40 {
		resp, _ := do(t, c, "GET", "http://"+proxies[0].Addr().String()+"/", "", DefaultHeader, "k", "X-Tenant", "acme")
		if resp.StatusCode == 200 {
			ok++
		}
	}
	if ok < 2 || ok > 30 {
		t.Fatalf("admitted %d of 40 at one proxy of two under 20/s", ok)
	}

	// p2 vanishes without a goodbye: after its suspect time (5/8 of the
	// 4 s registration) p1 gets a view of its own, still counting p2
	// registered (it may be admitting its panic share somewhere).
	stops[1]()
	fugetest.Eventually(t, "a view without p2", func() bool {
		s, _ := proxies[0].RateLimitStatus()
		return s.Node.InView && s.Node.Members == 1 && s.Node.Registered == 2
	})

	// A proxy certificate names one proxy: registering as another is refused.
	cc, err := grpc.NewClient(m.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(m.Source(t, fugetls.ProxyID("p1")).ClientConfig(fugetls.RoleManager))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), fugetest.DefaultTimeout)
	defer cancel()
	stream, err := fugev1.NewProxyServiceClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&fugev1.ProxySessionRequest{Msg: &fugev1.ProxySessionRequest_Register{Register: &fugev1.ProxyRegister{Namespace: m.NS, Name: "p3", GossipAddr: "127.0.0.1:9"}}})
	if _, err := stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("registering as p3 with p1's certificate: %v", err)
	}
}

// TestRateLimitRelay cuts p1's direct link to p2 (its pushes go to a
// socket that drops them): after a few epochs without acknowledgements p1
// sends them through the manager too, and its estimate of the fleet's
// demand still counts p2's.
func TestRateLimitRelay(t *testing.T) {
	m := fugetest.StartManager(t, fugetest.Options{})
	owner := startOwner(t, "a", nil)
	body := `{"limits":[{"name":"t","header":"X-Tenant","requests":1000,"period":"1s"}]}`
	req, _ := http.NewRequest(http.MethodPut, m.AdminURL("/v1/namespaces/"+m.NS+"/ratelimits"), bytes.NewBufferString(body))
	resp, err := m.AdminClient().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT limits: %v %v", resp, err)
	}
	resp.Body.Close()
	var proxies []*Proxy
	for _, name := range []string{"p1", "p2"} {
		p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(owner.addr, 1), owner.addr) })
		stop, err := p.EnableRateLimits(RateLimitConfig{Name: name, Epoch: 50 * time.Millisecond, Managers: []string{m.GRPCAddr}, Namespace: m.NS})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		proxies = append(proxies, p)
	}
	fugetest.Eventually(t, "one view of two", func() bool {
		for _, p := range proxies {
			if s, _ := p.RateLimitStatus(); !s.Node.InView || s.Node.Members != 2 {
				return false
			}
		}
		return true
	})
	// A UDP socket that reads and drops: p1's direct pushes to p2 vanish.
	sinkhole, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sinkhole.Close()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, _, err := sinkhole.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	r1 := proxies[0].rl.Load()
	r1.mu.Lock()
	r1.addrs["p2"] = sinkhole.LocalAddr().(*net.UDPAddr)
	r1.mu.Unlock()
	// Ten times p2's demand at p1, whose pushes (and acknowledgements)
	// reach p2 only through the manager: without the relay p2 hears
	// nothing of p1, its weight drains into the link, and its estimate
	// runs away from the total.
	c := newClient(t)
	url1, url2 := "http://"+proxies[0].Addr().String()+"/", "http://"+proxies[1].Addr().String()+"/"
	fugetest.Eventually(t, "p1 to relay and p2 to count p1's demand", func() bool {
		for range 10 {
			do(t, c, "GET", url1, "", DefaultHeader, "k", "X-Tenant", "acme")
		}
		do(t, c, "GET", url2, "", DefaultHeader, "k", "X-Tenant", "acme")
		s1, _ := proxies[0].RateLimitStatus()
		s2, _ := proxies[1].RateLimitStatus()
		if s1.Relayed == 0 {
			return false
		}
		total, est := 0.0, 0.0
		for _, s := range []RateLimitStatus{s1, s2} {
			for _, k := range s.Keys {
				if k.Key == "acme" {
					total += k.Demand
				}
			}
		}
		for _, k := range s2.Keys {
			if k.Key == "acme" {
				est = k.Estimate
			}
		}
		return total > 0 && math.Abs(est-total) < 0.25*total
	})
}
