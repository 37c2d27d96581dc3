package main

import (
	"log"
	"slices"
	"time"
)

// Item 2: the latency each proxy adds, as proxy minus direct: (a) wrk with
// one connection, p50 and p99; (b) the open-loop generator at
// openRate requests a second over openConns connections. A p99 moves from
// run to run by more than the differences between proxies, so each target
// is measured in latRounds rounds, each round in another order, and the
// figures are medians over the rounds; "added" is the median over the
// rounds of the target minus direct in the same round.

const (
	openRate  = 5000
	openConns = 64
	openWarm  = 500 * time.Millisecond // the open loop's warm-up, not measured
)

// latRun is one target's latency figures (µs): one round's, or the
// medians of all rounds (then Rounds > 0 and the Add* fields are set).
type latRun struct {
	Target             string
	C1P50, C1P99       float64
	C1Errors           int64
	C1Pcts             [][]float64 // wrk's percentiles, for the plot
	OpenP50, OpenP99   float64
	OpenP999           float64
	OpenSent, OpenFail int64
	OpenLat            []float64 `json:"-"` // sorted, for the plot
	OthersBefore       float64
	Err                string

	Rounds                 int
	AddC1P50, AddC1P99     stats
	AddOpenP50, AddOpenP99 stats
}

func (b *bench) latency(targets []*target) []latRun {
	per := map[string][]latRun{}
	for round := range b.cfg.latRounds {
		log.Printf("latency round %d", round+1)
		for i := range targets {
			t := targets[(i+round)%len(targets)]
			if round >= b.cfg.otherRounds && !latGoalTarget(t.name) {
				continue
			}
			per[t.name] = append(per[t.name], b.latencyOnce(t))
		}
	}
	var out []latRun
	for _, t := range targets {
		out = append(out, mergeLat(per[t.name], per[tDirect]))
	}
	return out
}

// latGoalTarget reports whether a target is measured in every latency
// round: direct (what the others are compared with), the targets of the
// goal (fuge-proxy, HAProxy's consistent hash) and the two beside them
// (fuge-proxy without pipelining and spin, nginx). The round-robin ones
// and TLS to the backends run in the first otherRounds rounds, as in the
// throughput section: five rounds of all eight took 4.5 of the full run's
// 20 minutes.
func latGoalTarget(name string) bool {
	switch name {
	case tDirect, tFuge, tFugePlain, tHAChash, tNginx:
		return true
	}
	return false
}

func (b *bench) latencyOnce(t *target) latRun {
	r := latRun{Target: t.name}
	r.OthersBefore, _ = b.ps.waitQuiet(b.cfg.quietMax)
	if _, err := b.runWrk(t.addr, 1, b.cfg.latWarm); err != nil {
		r.Err = err.Error()
		return r
	}
	w, err := b.runWrk(t.addr, 1, b.cfg.latDur)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.C1P50, r.C1P99, r.C1Errors, r.C1Pcts = w.pct(50), w.pct(99), w.errors(), w.Pcts
	others, _ := b.ps.waitQuiet(b.cfg.quietMax)
	r.OthersBefore = max(r.OthersBefore, others)
	// A warm-up at the same rate first, as wrk's runs have: the proxies
	// open their connections to the backends as the load needs them, and
	// with TLS to the backends that ramp (a handshake of about 2 ms of
	// CPU each on the proxy's one core) set the whole run's p99.
	openLoop(t.addr, openRate, openConns, openWarm)
	ol := openLoop(t.addr, openRate, openConns, b.cfg.latDur)
	r.OpenP50, r.OpenP99, r.OpenP999, r.OpenSent, r.OpenFail, r.OpenLat = ol.P50, ol.P99, ol.P999, ol.Sent, ol.Failed, ol.Lat
	log.Printf("  %-30s c1 p50 %5.0f p99 %5.0f µs; %d/s open loop p50 %5.0f p99 %5.0f µs (%d sent, %d failed)",
		t.name, r.C1P50, r.C1P99, openRate, r.OpenP50, r.OpenP99, r.OpenSent, r.OpenFail)
	return r
}

// mergeLat folds a target's rounds into medians; round k of runs is
// compared with round k of direct. A round that failed leaves its error
// when no round succeeded.
func mergeLat(runs, direct []latRun) latRun {
	var ok []latRun
	var add [4][]float64
	out := latRun{}
	for k, r := range runs {
		out.Target = r.Target
		out.OthersBefore = max(out.OthersBefore, r.OthersBefore)
		out.C1Errors += r.C1Errors
		out.OpenSent += r.OpenSent
		out.OpenFail += r.OpenFail
		if r.Err != "" {
			out.Err = r.Err
			continue
		}
		ok = append(ok, r)
		if k < len(direct) && direct[k].Err == "" {
			d := direct[k]
			add[0] = append(add[0], r.C1P50-d.C1P50)
			add[1] = append(add[1], r.C1P99-d.C1P99)
			add[2] = append(add[2], r.OpenP50-d.OpenP50)
			add[3] = append(add[3], r.OpenP99-d.OpenP99)
		}
	}
	if len(ok) == 0 {
		return out
	}
	out.Err = ""
	out.Rounds = len(ok)
	med := func(f func(latRun) float64) float64 {
		xs := make([]float64, len(ok))
		for i, r := range ok {
			xs[i] = f(r)
		}
		return summarize(xs).Med
	}
	out.C1P50 = med(func(r latRun) float64 { return r.C1P50 })
	out.C1P99 = med(func(r latRun) float64 { return r.C1P99 })
	out.OpenP50 = med(func(r latRun) float64 { return r.OpenP50 })
	out.OpenP99 = med(func(r latRun) float64 { return r.OpenP99 })
	out.OpenP999 = med(func(r latRun) float64 { return r.OpenP999 })
	out.AddC1P50, out.AddC1P99 = summarize(add[0]), summarize(add[1])
	out.AddOpenP50, out.AddOpenP99 = summarize(add[2]), summarize(add[3])
	// The plot: wrk's percentiles, each the median over the rounds; the
	// open loop's latencies of every round together.
	for i, pv := range ok[0].C1Pcts {
		xs := []float64{}
		for _, r := range ok {
			if i < len(r.C1Pcts) && r.C1Pcts[i][0] == pv[0] {
				xs = append(xs, r.C1Pcts[i][1])
			}
		}
		out.C1Pcts = append(out.C1Pcts, []float64{pv[0], summarize(xs).Med})
	}
	for _, r := range ok {
		out.OpenLat = append(out.OpenLat, r.OpenLat...)
	}
	slices.Sort(out.OpenLat)
	return out
}
