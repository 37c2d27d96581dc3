package main

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// counts is a [window][proxy][tenant] table of counters.
type counts struct {
	windows, proxies, tenants int
	c                         []atomic.Int64
}

func newCounts(w, p, t int) *counts {
	return &counts{windows: w, proxies: p, tenants: t, c: make([]atomic.Int64, w*p*t)}
}

func (c *counts) add(w, p, t int) {
	if w >= 0 && w < c.windows && p >= 0 && p < c.proxies && t >= 0 && t < c.tenants {
		c.c[(w*c.proxies+p)*c.tenants+t].Add(1)
	}
}

func (c *counts) get(w, p, t int) float64 { return float64(c.c[(w*c.proxies+p)*c.tenants+t].Load()) }

// tenant sums a tenant's counts over every proxy in window w.
func (c *counts) tenant(w, t int) float64 {
	s := 0.0
	for p := range c.proxies {
		s += c.get(w, p, t)
	}
	return s
}

// sink is the backend: it answers 200 and counts what it admitted by
// window, proxy (X-Proxy) and tenant (X-Tenant).
type sink struct {
	start atomic.Int64 // UnixNano of the run's start; windows count from it
	win   time.Duration
	got   *counts
}

func (s *sink) handle(ctx *fasthttp.RequestCtx) {
	w := int(time.Duration(time.Now().UnixNano()-s.start.Load()) / s.win)
	s.got.add(w, atoi(ctx.Request.Header.Peek("X-Proxy")), atoi(ctx.Request.Header.Peek("X-Tenant")))
	ctx.SetStatusCode(fasthttp.StatusOK)
}

func atoi(b []byte) int {
	n := 0
	if len(b) == 0 {
		return -1
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// loadGen offers each tenant's demand across the proxies, open loop: the
// proxies' shares follow Zipf(1) over their ranks, and the hot proxy (rank
// 0) moves every hotEvery. A proxy marked down gets nothing; its part goes
// to the others.
type loadGen struct {
	start    time.Time
	win      time.Duration
	demand   []float64 // per tenant, requests per second
	hotEvery time.Duration
	hotUntil time.Duration // the hot proxy stays put after this (0: never)
	proxies  []*proxyProc
	offered  *counts // sent
	limited  *counts // answered 429
	failed   *counts // no answer, or another status
	dropped  atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

type job struct{ tenant int }

// weights are the proxies' shares of the load at d into the run.
func (g *loadGen) weights(d time.Duration, out []float64) {
	n := len(g.proxies)
	if g.hotUntil > 0 && d > g.hotUntil {
		d = g.hotUntil
	}
	hot := int(d/g.hotEvery) % n
	sum := 0.0
	for p := range n {
		out[p] = 0
		if g.proxies[p].down.Load() {
			continue
		}
		rank := (p - hot + n) % n
		out[p] = 1 / float64(rank+1)
		sum += out[p]
	}
	for p := range out {
		out[p] /= sum
	}
}

// run offers the load until stop is closed.
func (g *loadGen) run() {
	n, nt := len(g.proxies), len(g.demand)
	jobs := make([]chan job, n)
	for p := range n {
		jobs[p] = make(chan job, 4096)
		c := &fasthttp.HostClient{Addr: g.proxies[p].listen, MaxConns: 64, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
		for range 24 {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.worker(c, p, jobs[p])
			}()
		}
	}
	carry := make([]float64, n*nt)
	w := make([]float64, n)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-g.stop:
			for _, j := range jobs {
				close(j)
			}
			g.wg.Wait()
			return
		case now := <-t.C:
			dt := now.Sub(last).Seconds()
			last = now
			g.weights(now.Sub(g.start), w)
			for p := range n {
				for tn := range nt {
					want := g.demand[tn]*w[p]*dt + carry[p*nt+tn]
					k := math.Floor(want)
					carry[p*nt+tn] = want - k
					for range int(k) {
						select {
						case jobs[p] <- job{tn}:
						default:
							g.dropped.Add(1)
						}
					}
				}
			}
		}
	}
}

func (g *loadGen) worker(c *fasthttp.HostClient, p int, jobs <-chan job) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + c.Addr + "/api/x")
	req.Header.Set("X-Fuge-Key", "k")
	req.Header.Set("X-Proxy", strconv.Itoa(p))
	for j := range jobs {
		req.Header.Set("X-Tenant", strconv.Itoa(j.tenant))
		win := int(time.Since(g.start) / g.win)
		g.offered.add(win, p, j.tenant)
		err := c.DoTimeout(req, resp, 2*time.Second)
		switch {
		case err == nil && resp.StatusCode() == fasthttp.StatusTooManyRequests:
			g.limited.add(win, p, j.tenant)
		case err != nil || resp.StatusCode() != fasthttp.StatusOK:
			g.failed.add(win, p, j.tenant)
		}
	}
}
