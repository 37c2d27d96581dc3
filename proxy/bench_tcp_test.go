package proxy

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// BenchmarkProxyTCP is BenchmarkProxy's plain case over real loopback TCP
// on both sides, so that it counts the system calls the in-memory
// listeners leave out; -cpu 1 puts client, proxy and owner on one P. Each
// op is one GET through the proxy on one of 16 keep-alive connections in
// turn.
func BenchmarkProxyTCP(b *testing.B) {
	o := startOwner(b, "a", func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentType("text/plain")
		ctx.SetBodyString("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	})
	p := startProxy(b, func(c *Config) {
		c.Balancer = staticBalancer{lb.Pick{Addr: o.addr, Range: ring.Full(), Gen: 7}}
		c.MaxConnsPerIP = -1
	})
	c := &fasthttp.HostClient{Addr: p.Addr().String(), Dial: func(a string) (net.Conn, error) { return net.Dial("tcp", a) }}
	b.ReportAllocs()
	b.SetParallelism(8) // 8 × GOMAXPROCS client connections
	start := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + p.Addr().String() + "/devices/42")
		req.Header.Set(DefaultHeader, "device-42")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
				b.Errorf("%v %d", err, resp.StatusCode())
				return
			}
		}
	})
	b.StopTimer()
	// CPU time of the whole process (client, proxy and owner) per request:
	// less sensitive than ns/op to other processes on a shared machine.
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
