package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// BenchmarkProxyRateLimit is BenchmarkProxy's "plain" case with a
// fleet-wide limit configured that the request matches (and is admitted
// by): the difference between the two is the admission check's cost in
// the proxy's hot path. It must report 0 allocs/op.
func BenchmarkProxyRateLimit(b *testing.B) {
	ownerLn := fasthttputil.NewInmemoryListener()
	owner := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go owner.Serve(ownerLn)
	b.Cleanup(func() { owner.Shutdown() })
	p, err := New(Config{
		Balancer: staticBalancer{lb.Pick{Addr: "owner-a", Range: ring.Full(), Gen: 7}},
		Dial:     func(string) (net.Conn, error) { return ownerLn.Dial() },
	})
	if err != nil {
		b.Fatal(err)
	}
	installLimits(b, p, 1, &fugev1.RateLimitRule{Name: "tenant-api", RoutePrefix: "/devices/", Header: "X-Tenant", Requests: 1e9, PeriodMs: 1000, Burst: 1e9})
	frontLn := fasthttputil.NewInmemoryListener()
	go p.Serve(frontLn)
	b.Cleanup(func() { p.Shutdown(context.Background()) })
	c := &fasthttp.HostClient{Addr: "proxy", Dial: func(string) (net.Conn, error) { return frontLn.Dial() }}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("http://proxy/devices/42")
	req.Header.Set(DefaultHeader, "device-42")
	req.Header.Set("X-Tenant", "acme")
	do := func() {
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v %d", err, resp.StatusCode())
		}
	}
	do()
	b.ReportAllocs()
	for b.Loop() {
		do()
	}
}

// BenchmarkRateLimitAdmit is the admission check alone, as the proxy runs
// it on a request: route prefix, header, Allow.
func BenchmarkRateLimitAdmit(b *testing.B) {
	p, err := New(Config{Balancer: staticBalancer{}})
	if err != nil {
		b.Fatal(err)
	}
	r := installLimits(b, p, 1, &fugev1.RateLimitRule{Name: "tenant-api", RoutePrefix: "/devices/", Header: "X-Tenant", Requests: 1e9, PeriodMs: 1000, Burst: 1e9})
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("http://proxy/devices/42")
	ctx.Request.Header.Set(DefaultHeader, "device-42")
	ctx.Request.Header.Set("X-Tenant", "acme")
	ctx.Request.Header.Set("User-Agent", "bench")
	// fasthttp's server stamps each request's arrival with time.Now (its
	// monotonic reading included), which admit reads; a hand-made ctx has
	// a zero time. One arrival time for every call: the limit is far
	// above what the loop asks for.
	at := time.Now()
	if !r.admitAt(&ctx, at) {
		b.Fatal("refused")
	}
	b.ReportAllocs()
	for b.Loop() {
		r.admitAt(&ctx, at)
	}
}
