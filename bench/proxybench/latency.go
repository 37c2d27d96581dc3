package main

import (
	"log"
)

// Item 2: the latency each proxy adds, as proxy minus direct: (a) wrk with
// one connection, p50 and p99; (b) the open-loop generator at
// openRate requests a second over openConns connections.

const (
	openRate  = 5000
	openConns = 64
)

// latRun is one target's latency figures (µs).
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
}

func (b *bench) latency(targets []*target) []latRun {
	var out []latRun
	for _, t := range targets {
		r := latRun{Target: t.name}
		r.OthersBefore, _ = b.ps.waitQuiet(b.cfg.quietMax)
		if _, err := b.runWrk(t.addr, 1, b.cfg.warm); err != nil {
			r.Err = err.Error()
			out = append(out, r)
			continue
		}
		w, err := b.runWrk(t.addr, 1, b.cfg.latDur)
		if err != nil {
			r.Err = err.Error()
			out = append(out, r)
			continue
		}
		r.C1P50, r.C1P99, r.C1Errors, r.C1Pcts = w.pct(50), w.pct(99), w.errors(), w.Pcts
		b.ps.waitQuiet(b.cfg.quietMax)
		ol := openLoop(t.addr, openRate, openConns, b.cfg.latDur)
		r.OpenP50, r.OpenP99, r.OpenP999, r.OpenSent, r.OpenFail, r.OpenLat = ol.P50, ol.P99, ol.P999, ol.Sent, ol.Failed, ol.Lat
		log.Printf("  %-30s c1 p50 %5.0f p99 %5.0f µs; %d/s open loop p50 %5.0f p99 %5.0f µs (%d sent, %d failed)",
			t.name, r.C1P50, r.C1P99, openRate, r.OpenP50, r.OpenP99, r.OpenSent, r.OpenFail)
		out = append(out, r)
	}
	return out
}
