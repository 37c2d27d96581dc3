package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/fuge-project/fuge/internal/plot"
)

// colorOf gives each target one color in every plot.
func colorOf(name string) int {
	for i, n := range []string{tDirect, tFuge, tFugePlain, tFugeRR, tFugeTLS, tHAChash, tHARR, tNginx} {
		if n == name {
			return i
		}
	}
	return 7
}

// plots writes the report's PNGs into dir.
func (r *report) plots(dir string) error {
	var tput, cpu []plot.Bar
	for _, t := range r.Targets {
		i := colorOf(t)
		rs, n, _ := r.byTarget(t, func(x tputRun) float64 { return x.RPS })
		if n == 0 {
			continue
		}
		tput = append(tput, plot.Bar{Label: t, V: rs.Med, Lo: rs.Min, Hi: rs.Max, Color: i})
		if t != tDirect {
			cs, _, _ := r.byTarget(t, func(x tputRun) float64 { return x.ProxyUS })
			cpu = append(cpu, plot.Bar{Label: t, V: cs.Med, Lo: cs.Min, Hi: cs.Max, Color: i})
		}
	}
	pcts := []float64{50, 90, 99, 99.9}
	xs := []string{"p50", "p90", "p99", "p99.9"}
	var c1, open []plot.Series
	for _, l := range r.Latency {
		if l.Err != "" {
			continue
		}
		s1, s2 := plot.Series{Name: l.Target, Color: colorOf(l.Target)}, plot.Series{Name: l.Target, Color: colorOf(l.Target)}
		for _, p := range pcts {
			v := 0.0
			for _, pv := range l.C1Pcts {
				if pv[0] == p {
					v = pv[1]
				}
			}
			s1.Y = append(s1.Y, v)
			s2.Y = append(s2.Y, quantile(l.OpenLat, p/100))
		}
		c1, open = append(c1, s1), append(open, s2)
	}
	var stale, split []plot.Bar
	for _, c := range r.Churn {
		stale = append(stale, plot.Bar{Label: c.Balancer, V: float64(c.Stale), Color: colorOf(c.Balancer)})
		split = append(split, plot.Bar{Label: c.Balancer, V: float64(c.SplitWrites), Color: colorOf(c.Balancer)})
	}
	var secs []string
	p99 := plot.Series{Name: "p99 us", Color: colorOf(tFuge)}
	for _, s := range r.Move.Seconds {
		secs = append(secs, fmt.Sprintf("%+d", int(s.From/time.Second)))
		p99.Y = append(p99.Y, s.P99)
	}
	for name, c := range map[string]plot.Canvas{
		"throughput.png": plot.HBars("requests/s, wrk -t1 -c64, median and min-max of the valid runs", "requests/s", tput),
		"cpu.png":        plot.HBars("proxy CPU per request, median and min-max", "us/request", cpu),
		"latency.png": plot.Stack(
			plot.Lines("latency, wrk -c1 (one connection)", "percentile", "us", xs, c1),
			plot.Lines(fmt.Sprintf("latency, open loop %d requests/s over %d connections", openRate, openConns), "percentile", "us", xs, open)),
		"anomalies.png": plot.Stack(
			plot.HBars("stale reads under churn", "reads", stale),
			plot.HBars("split-brain writes under churn", "writes", split)),
		"move.png": plot.Lines("fuge-proxy p99 per second around the drain of b4 (25% of the ring)", "second from the drain", "us", secs, []plot.Series{p99}),
	} {
		if err := c.Save(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
