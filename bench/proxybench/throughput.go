package main

import (
	"fmt"
	"log"
	"slices"
	"time"
)

// Item 1: throughput and CPU per request, wrk -t1 -c64 through each target,
// the pair (fuge-proxy, haproxy-chash) interleaved, the others once a round.

// Target names, as the report prints them.
const (
	tDirect   = "direct (b1)"
	tFuge     = "fuge-proxy"
	tFugeRR   = "fuge-proxy (round-robin)"
	tFugeTLS  = "fuge-proxy (TLS to backends)"
	tHAChash  = "haproxy-chash"
	tHARR     = "haproxy-roundrobin"
	tNginx    = "nginx-chash"
	wrkConns  = 64
	pairFirst = tFuge
	pairOther = tHAChash
)

// tputRun is one measured wrk run.
type tputRun struct {
	Target       string
	Round        int
	RPS          float64
	Requests     int64
	ProxyUS      float64 // proxy CPU µs per request (0: direct)
	BackendUS    float64 // the backends' CPU µs per request, summed
	Errors       int64   // wrk's socket errors and answers >= 400
	OthersBefore float64 // other processes' CPU before the run, share of a core
	OthersDuring float64 // and during it
	Quiet        bool    // OthersBefore was under the threshold
	P50, P99     float64 // µs
	Err          string  // the run failed to run
	// The two CPUs during the run, when the layout is pinned: the
	// proxy's (busy, stolen) and the client's and backends' (busy,
	// stolen, and its busy time per request in µs). Whichever is busier
	// limited the run's throughput.
	ProxyCPU, ClientCPU cpuShares
	ClientUS            float64
}

// Valid is a run that ran and saw only 2xx answers.
func (r tputRun) Valid() bool { return r.Err == "" && r.Errors == 0 && r.Requests > 0 }

// pair is one interleaved (fuge-proxy, haproxy-chash) pair.
type pair struct {
	Round      int
	Fuge, HA   tputRun
	RPSRatio   float64
	CPURatio   float64
	FirstFuge  bool
	BothValid  bool
	QuietBoth  bool
	BeforeBoth float64
}

// backendTicks is the backends' CPU.
func (b *bench) backendTicks() int64 {
	var n int64
	for _, be := range b.backends {
		n += cpuTicks(be.p.Pid())
	}
	return n
}

// measureTput runs one warm-up and one measured wrk run through t.
func (b *bench) measureTput(t *target, round int) tputRun {
	r := tputRun{Target: t.name, Round: round}
	r.OthersBefore, r.Quiet = b.ps.waitQuiet(b.cfg.quietMax)
	if _, err := b.runWrk(t.addr, wrkConns, b.cfg.warm); err != nil {
		r.Err = err.Error()
		return r
	}
	m := b.ps.meter()
	var p0 int64
	if t.p != nil {
		p0 = cpuTicks(t.p.Pid())
	}
	be0 := b.backendTicks()
	pc0, cc0 := cpuTimesOf(proxyCPU), cpuTimesOf(clientCPU)
	w, err := b.runWrk(t.addr, wrkConns, b.cfg.run)
	be1 := b.backendTicks()
	if b.ps.pinned {
		r.ProxyCPU, r.ClientCPU = sharesSince(proxyCPU, pc0), sharesSince(clientCPU, cc0)
	}
	var p1 int64
	if t.p != nil {
		p1 = cpuTicks(t.p.Pid())
	}
	r.OthersDuring = m.others()
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.RPS, r.Requests, r.Errors = w.rps(), w.Requests, w.errors()
	r.P50, r.P99 = w.pct(50), w.pct(99)
	if w.Requests > 0 {
		tick := 1e6 / float64(clockTicks) // µs
		if t.p != nil {
			r.ProxyUS = float64(p1-p0) * tick / float64(w.Requests)
		}
		r.BackendUS = float64(be1-be0) * tick / float64(w.Requests)
		r.ClientUS = float64(r.ClientCPU.BusyTicks) * tick / float64(w.Requests)
	}
	log.Printf("  %-30s round %d: %8.0f rps, proxy %5.1f µs/req, backends %5.1f µs/req, p99 %6.0f µs, errors %d, others %.0f%%/%.0f%% of a core; CPU %d %.0f%% busy, CPU %d %.0f%% busy (%.1f µs/req), steal %.1f%%/%.1f%%",
		t.name, round, r.RPS, r.ProxyUS, r.BackendUS, r.P99, r.Errors, 100*r.OthersBefore, 100*r.OthersDuring,
		proxyCPU, 100*r.ProxyCPU.Busy, clientCPU, 100*r.ClientCPU.Busy, r.ClientUS, 100*r.ProxyCPU.Steal, 100*r.ClientCPU.Steal)
	return r
}

// throughput runs the rounds until cfg.rounds pairs are valid (at most
// three rounds more); the other targets run in the first cfg.otherRounds.
func (b *bench) throughput(targets []*target) (runs []tputRun, pairs []pair) {
	byName := map[string]*target{}
	var others []*target
	for _, t := range targets {
		byName[t.name] = t
		if t.name != pairFirst && t.name != pairOther {
			others = append(others, t)
		}
	}
	valid := 0
	for round := 1; valid < b.cfg.rounds && round <= b.cfg.rounds+3; round++ {
		start := time.Now()
		log.Printf("throughput round %d", round)
		p := pair{Round: round, FirstFuge: round%2 == 1}
		if p.FirstFuge {
			p.Fuge = b.measureTput(byName[pairFirst], round)
			p.HA = b.measureTput(byName[pairOther], round)
		} else {
			p.HA = b.measureTput(byName[pairOther], round)
			p.Fuge = b.measureTput(byName[pairFirst], round)
		}
		runs = append(runs, p.Fuge, p.HA)
		p.BothValid = p.Fuge.Valid() && p.HA.Valid()
		p.QuietBoth = p.Fuge.Quiet && p.HA.Quiet
		if p.BothValid {
			p.RPSRatio = p.Fuge.RPS / p.HA.RPS
			p.CPURatio = p.Fuge.ProxyUS / p.HA.ProxyUS
			valid++
		}
		pairs = append(pairs, p)
		if round <= b.cfg.otherRounds {
			for i := range others {
				runs = append(runs, b.measureTput(others[(i+round)%len(others)], round))
			}
		}
		log.Printf("round %d took %v", round, time.Since(start).Round(time.Second))
	}
	return runs, pairs
}

// stats is a median with its range.
type stats struct {
	N             int
	Med, Min, Max float64
}

func summarize(xs []float64) stats {
	if len(xs) == 0 {
		return stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{N: len(s), Med: med, Min: s[0], Max: s[len(s)-1]}
}

// pairStats are the medians and ranges of the valid pairs' ratios.
func pairStats(pairs []pair) (rps, cpu stats) {
	var r, c []float64
	for _, p := range pairs {
		if p.BothValid {
			r, c = append(r, p.RPSRatio), append(c, p.CPURatio)
		}
	}
	return summarize(r), summarize(c)
}

// summaryLine is the report's one machine-read line.
func summaryLine(pairs []pair) string {
	rps, cpu := pairStats(pairs)
	return fmt.Sprintf("fuge-proxy vs haproxy-chash: rps ratio %.2f (min %.2f max %.2f), cpu/request ratio %.2f (min %.2f max %.2f), pairs %d",
		rps.Med, rps.Min, rps.Max, cpu.Med, cpu.Min, cpu.Max, rps.N)
}
