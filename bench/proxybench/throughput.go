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
	tDirect    = "direct (b1)"
	tFuge      = "fuge-proxy"
	tFugeRR    = "fuge-proxy (round-robin)"
	tFugePlain = "fuge-proxy (no pipelining, no spin)"
	tFugeTLS   = "fuge-proxy (TLS to backends)"
	tHAChash   = "haproxy-chash"
	tHARR      = "haproxy-roundrobin"
	tNginx     = "nginx-chash"
	wrkConns   = 64
	pairFirst  = tFuge
	pairOther  = tHAChash
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
	Slices              int // the wrk runs summed (measurePair cuts a run into several)
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
	if !b.prepareTput(t, &r) {
		return r
	}
	m := b.ps.meter()
	var acc tputAcc
	acc.run(b, t, b.cfg.run)
	r.OthersDuring = m.others()
	acc.fill(&r)
	r.log()
	return r
}

// measurePair measures the pair in one round: each target's measured time
// (cfg.run) is cut into cfg.slices wrk runs, and the two targets' runs
// alternate, first then second, then second then first (ABBA), so that
// both see the same machine. This 2-core machine's speed drifts by 10% and
// more within seconds (one target's figures in consecutive 6 s runs of a
// round differed that much while nothing else ran, 2026-11-28): two whole
// runs one after the other measured the drift as often as the proxies.
func (b *bench) measurePair(first, second *target, round int) (tputRun, tputRun) {
	rs := [2]tputRun{{Target: first.name, Round: round}, {Target: second.name, Round: round}}
	ts := [2]*target{first, second}
	for i, t := range ts {
		if !b.prepareTput(t, &rs[i]) {
			return rs[0], rs[1]
		}
	}
	n := max(1, b.cfg.slices)
	d := b.cfg.run / time.Duration(n)
	var accs [2]tputAcc
	m := b.ps.meter()
	for k := range n {
		order := [2]int{0, 1}
		if k%2 == 1 {
			order = [2]int{1, 0}
		}
		for _, i := range order {
			accs[i].run(b, ts[i], d)
		}
	}
	others := m.others()
	for i := range rs {
		rs[i].OthersDuring = others
		accs[i].fill(&rs[i])
		rs[i].log()
	}
	return rs[0], rs[1]
}

// prepareTput waits for a quiet machine and warms t up; false if the
// warm-up failed (r.Err says why).
func (b *bench) prepareTput(t *target, r *tputRun) bool {
	r.OthersBefore, r.Quiet = b.ps.waitQuiet(b.cfg.quietMax)
	if _, err := b.runWrk(t.addr, wrkConns, b.cfg.warm); err != nil {
		r.Err = err.Error()
		return false
	}
	return true
}

// tputAcc sums one target's wrk runs of a round: requests, time, errors,
// the CPU its proxy, the backends and the two CPUs spent, and the runs'
// percentiles.
type tputAcc struct {
	runs                 int
	requests, durationUS int64
	errors               int64
	proxyTicks, beTicks  int64
	proxyCPU, clientCPU  cpuTimes
	p50s, p99s           []float64
	err                  string
}

// run measures one wrk run of d through t into a.
func (a *tputAcc) run(b *bench, t *target, d time.Duration) {
	var p0 int64
	if t.p != nil {
		p0 = cpuTicks(t.p.Pid())
	}
	be0 := b.backendTicks()
	pc0, cc0 := cpuTimesOf(proxyCPU), cpuTimesOf(clientCPU)
	w, err := b.runWrk(t.addr, wrkConns, d)
	pc1, cc1 := cpuTimesOf(proxyCPU), cpuTimesOf(clientCPU)
	be1 := b.backendTicks()
	var p1 int64
	if t.p != nil {
		p1 = cpuTicks(t.p.Pid())
	}
	if err != nil {
		a.err = err.Error()
		return
	}
	a.runs++
	a.requests += w.Requests
	a.durationUS += w.DurationUS
	a.errors += w.errors()
	a.proxyTicks += p1 - p0
	a.beTicks += be1 - be0
	if b.ps.pinned {
		a.proxyCPU = a.proxyCPU.plus(pc1.since(pc0))
		a.clientCPU = a.clientCPU.plus(cc1.since(cc0))
	}
	a.p50s, a.p99s = append(a.p50s, w.pct(50)), append(a.p99s, w.pct(99))
}

// fill puts the sums into r: rates over the runs' summed time and
// requests, the median of the runs' p50s and of their p99s.
func (a *tputAcc) fill(r *tputRun) {
	if a.err != "" {
		r.Err = a.err
		return
	}
	r.RPS = wrkResult{Requests: a.requests, DurationUS: a.durationUS}.rps()
	r.Requests, r.Errors = a.requests, a.errors
	r.P50, r.P99 = summarize(a.p50s).Med, summarize(a.p99s).Med
	r.ProxyCPU, r.ClientCPU = a.proxyCPU.shares(), a.clientCPU.shares()
	if a.requests > 0 {
		tick := 1e6 / float64(clockTicks) // µs
		r.ProxyUS = float64(a.proxyTicks) * tick / float64(a.requests)
		r.BackendUS = float64(a.beTicks) * tick / float64(a.requests)
		r.ClientUS = float64(r.ClientCPU.BusyTicks) * tick / float64(a.requests)
	}
	r.Slices = a.runs
}

func (r tputRun) log() {
	log.Printf("  %-30s round %d: %8.0f rps, proxy %5.1f µs/req, backends %5.1f µs/req, p99 %6.0f µs, errors %d, others %.0f%%/%.0f%% of a core; CPU %d %.0f%% busy, CPU %d %.0f%% busy (%.1f µs/req), steal %.1f%%/%.1f%%; %d wrk runs",
		r.Target, r.Round, r.RPS, r.ProxyUS, r.BackendUS, r.P99, r.Errors, 100*r.OthersBefore, 100*r.OthersDuring,
		proxyCPU, 100*r.ProxyCPU.Busy, clientCPU, 100*r.ClientCPU.Busy, r.ClientUS, 100*r.ProxyCPU.Steal, 100*r.ClientCPU.Steal, r.Slices)
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
			p.Fuge, p.HA = b.measurePair(byName[pairFirst], byName[pairOther], round)
		} else {
			p.HA, p.Fuge = b.measurePair(byName[pairOther], byName[pairFirst], round)
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
