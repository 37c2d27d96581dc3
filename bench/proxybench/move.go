package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"
)

// Item 4: fuge-proxy while a quarter of the ring moves. A fourth owner, b4,
// joins the plain namespace (each owner then holds 25%), the closed-loop
// generator keeps 64 connections busy through fuge-proxy, and b4 is
// drained through the admin API: its arcs are recalled and granted to the
// other three while requests flow.

// secStat is one second's answers.
type secStat struct {
	From     time.Duration // relative to the drain
	RPS      float64
	P99      float64 // µs
	Failed   int64
	Requests int64
}

type moveResult struct {
	Steady      secStat       // before the drain (after a first second of warm-up)
	Move        secStat       // the second from the drain
	WorstAfter  secStat       // the second with the highest p99 after the drain
	MoveTook    time.Duration // from the drain until the admin API shows b1-b3 holding every arc
	Failed      int64         // in the whole run
	Seconds     []secStat
	Share       float64 // of the key space b4 held
	Err         string
	DrainAt     time.Duration
	RunDuration time.Duration
}

func statOf(ss []sample, from time.Duration, d time.Duration) secStat {
	st := secStat{From: from}
	var lat []float64
	for _, s := range ss {
		st.Requests++
		if !s.OK {
			st.Failed++
		}
		lat = append(lat, float64(s.Lat)/1e3)
	}
	slices.Sort(lat)
	st.P99 = quantile(lat, 0.99)
	if d > 0 {
		st.RPS = float64(st.Requests) / d.Seconds()
	}
	return st
}

func (b *bench) move(ctx context.Context, fuge *target) moveResult {
	res := moveResult{DrainAt: b.cfg.moveSteady, RunDuration: b.cfg.moveSteady + b.cfg.moveAfter}
	b4 := b.backends[3]
	o, err := b.startOwner(ctx, nsPlain, b4.name, b4.addr)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer func() {
		o.Close()
		if err := b.waitSettled(nsPlain, 30*time.Second, "b1", "b2", "b3"); err != nil {
			log.Printf("move: %v", err)
		}
	}()
	if err := b.waitSettled(nsPlain, 30*time.Second, "b1", "b2", "b3", "b4"); err != nil {
		res.Err = err.Error()
		return res
	}
	if arcs, err := b.arcs(nsPlain); err == nil {
		for _, a := range arcs {
			if a.Owner == "b4" {
				res.Share += a.share()
			}
		}
	}
	b.ps.waitQuiet(b.cfg.quietMax)
	closedLoop(fuge.addr, wrkConns, time.Second, 0, nil) // warm-up: connections to b4 too
	done := make(chan time.Duration, 1)
	samples := closedLoop(fuge.addr, wrkConns, res.RunDuration, res.DrainAt, func() {
		t0 := time.Now()
		if err := b.drain(nsPlain, "b4"); err != nil {
			res.Err = err.Error()
			done <- 0
			return
		}
		go func() {
			for !b.settled(nsPlain, "b1", "b2", "b3") && time.Since(t0) < 30*time.Second {
				time.Sleep(5 * time.Millisecond)
			}
			done <- time.Since(t0)
		}()
	})
	res.MoveTook = <-done
	var steady []sample
	buckets := map[int][]sample{}
	for _, s := range samples {
		if !s.OK {
			res.Failed++
		}
		if s.At >= time.Second && s.At < res.DrainAt {
			steady = append(steady, s)
		}
		k := int((s.At-res.DrainAt+10*time.Second)/time.Second) - 10 // floor, relative to the drain
		buckets[k] = append(buckets[k], s)
	}
	res.Steady = statOf(steady, time.Second-res.DrainAt, res.DrainAt-time.Second)
	first := -int(res.DrainAt/time.Second) + 1
	for k := first; time.Duration(k)*time.Second < res.RunDuration-res.DrainAt; k++ {
		st := statOf(buckets[k], time.Duration(k)*time.Second, time.Second)
		res.Seconds = append(res.Seconds, st)
		if k == 0 {
			res.Move = st
		}
		if k >= 0 && st.P99 > res.WorstAfter.P99 {
			res.WorstAfter = st
		}
	}
	log.Printf("  move: steady %.0f rps p99 %.0f µs; drain second %.0f rps p99 %.0f µs; %d failed; the table settled %v after the drain",
		res.Steady.RPS, res.Steady.P99, res.Move.RPS, res.Move.P99, res.Failed, res.MoveTook.Round(time.Millisecond))
	return res
}

func (s secStat) String() string {
	return fmt.Sprintf("%.0f rps, p99 %.0f µs, %d failed", s.RPS, s.P99, s.Failed)
}
