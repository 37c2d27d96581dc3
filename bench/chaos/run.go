package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// RunConfig is one run.
type RunConfig struct {
	Seed      uint64
	Duration  time.Duration // random mode
	Scenarios []string      // in order, once each; empty: random for Duration
	Layout    Layout
	Dir, Bin  string
	Log       *slog.Logger
}

// Report is what a run found.
type Report struct {
	Seed        uint64
	Duration    time.Duration
	Ops         int
	Outcomes    map[Result]int
	Faults      int
	FaultCounts map[string]int
	Violations  []Violation
	Gaps        []time.Duration
	Serves      int
	Direct      int // calls sent straight to an owner
	ProxyFailed int // calls through a proxy that failed (definite error)
}

// Run starts the pool, runs the clients and the faults, heals everything,
// and checks the history.
func Run(ctx context.Context, cfg RunConfig) (*Report, error) {
	h := &Harness{L: cfg.Layout, Dir: cfg.Dir, Bin: cfg.Bin, Log: cfg.Log}
	h.hist.Bound = 2 * cfg.Layout.T
	defer h.Close()
	start := time.Now()
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	cfg.Log.Info("pool up", "took", time.Since(start).Round(time.Millisecond), "seed", cfg.Seed, "dir", cfg.Dir)

	cctx, stopClients := context.WithCancel(ctx)
	clientsDone := make(chan struct{})
	go func() { h.runClients(cctx, cfg.Seed); close(clientsDone) }()
	sleep(ctx, cfg.Layout.T) // a quiet start: every key written once or more

	counts := map[string]int{}
	var mu sync.Mutex
	runOne := func(fctx context.Context, name string, rng *rand.Rand) {
		s, _ := lookupScenario(name)
		mu.Lock()
		counts[name]++
		mu.Unlock()
		cfg.Log.Info("fault", "scenario", name)
		s(fctx, h, rng)
	}
	faultStart := time.Now()
	if len(cfg.Scenarios) > 0 {
		rng := rand.New(rand.NewPCG(cfg.Seed, 0))
		for _, n := range cfg.Scenarios {
			runOne(ctx, n, rng)
			sleep(ctx, cfg.Layout.T) // let the pool settle between faults
		}
	} else {
		// Two injectors at random: faults overlap.
		fctx, cancel := context.WithTimeout(ctx, cfg.Duration)
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(cfg.Seed, uint64(100+w)))
				for fctx.Err() == nil {
					runOne(fctx, Scenarios[rng.IntN(len(Scenarios))].Name, rng)
					sleep(fctx, time.Duration(rng.Int64N(int64(cfg.Layout.T))))
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	elapsed := time.Since(faultStart)
	// Heal: every link, every paused process, every owner running.
	h.links.HealAll()
	h.mu.Lock()
	var paused []*proc
	for _, p := range h.procs {
		if p.pause {
			paused = append(paused, p)
		}
	}
	h.mu.Unlock()
	for _, p := range paused {
		h.signal(p, 18) // SIGCONT
	}
	for _, m := range h.managers {
		h.restartManager(m)
	}
	for _, n := range h.ownerNames() {
		h.ensureOwner(n, 1)
	}
	sleep(ctx, 3*cfg.Layout.T)
	stopClients()
	<-clientsDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	h.Close()

	serves, err := h.readServes()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.hist.Serves = serves
	sort.Slice(h.hist.Serves, func(i, j int) bool { return h.hist.Serves[i].At < h.hist.Serves[j].At })
	hist := h.hist
	h.mu.Unlock()
	r := &Report{Seed: cfg.Seed, Duration: elapsed.Round(time.Second), Ops: len(hist.Ops), Outcomes: map[Result]int{},
		FaultCounts: counts, Serves: len(serves)}
	if len(cfg.Scenarios) == 0 {
		r.Duration = cfg.Duration
	}
	for _, c := range counts {
		r.Faults += c
	}
	for _, o := range hist.Ops {
		r.Outcomes[o.Result]++
		if o.Direct {
			r.Direct++
		} else if o.Result == Failed {
			r.ProxyFailed++
		}
	}
	cfg.Log.Info("checking", "ops", len(hist.Ops), "serves", len(serves), "tables", len(hist.Tables), "losses", len(hist.Losses))
	r.Violations = Check(&hist)
	r.Gaps = Unavailability(hist.Ops)
	return r, nil
}

// Summary is the one-line result.
func (r *Report) Summary() string {
	unknown := 0.0
	if r.Ops > 0 {
		unknown = 100 * float64(r.Outcomes[Unknown]) / float64(r.Ops)
	}
	return fmt.Sprintf("chaos: seed %d duration %v ops %d faults %d violations %d unknown %.1f%% unavailable p99 %.1fs max %.1fs",
		r.Seed, r.Duration, r.Ops, r.Faults, len(r.Violations), unknown,
		quantile(r.Gaps, 0.99).Seconds(), quantile(r.Gaps, 1).Seconds())
}

// Markdown is the full report.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# chaos run, seed %d\n\n", r.Seed)
	fmt.Fprintf(&b, "- fault time: %v; faults injected: %d\n", r.Duration, r.Faults)
	fmt.Fprintf(&b, "- client calls checked: %d (ok %d, failed %d, unknown %d, invalid %d); requests in owners' logs: %d\n",
		r.Ops, r.Outcomes[OK], r.Outcomes[Failed], r.Outcomes[Unknown], r.Outcomes[Invalid], r.Serves)
	fmt.Fprintf(&b, "- calls straight to an owner (a stale router): %d; calls through a proxy that failed: %d\n", r.Direct, r.ProxyFailed)
	fmt.Fprintf(&b, "- unavailability per key (gaps: %d): p50 %v, p99 %v, max %v\n\n",
		len(r.Gaps), quantile(r.Gaps, 0.5).Round(time.Millisecond), quantile(r.Gaps, 0.99).Round(time.Millisecond), quantile(r.Gaps, 1).Round(time.Millisecond))
	b.WriteString("| checker | violations |\n|---|---|\n")
	per := map[string]int{}
	for _, v := range r.Violations {
		per[v.Checker]++
	}
	for _, c := range Checkers {
		fmt.Fprintf(&b, "| %s | %d |\n", c, per[c])
	}
	b.WriteString("\n| scenario | times |\n|---|---|\n")
	for _, n := range ScenarioNames() {
		if r.FaultCounts[n] > 0 {
			fmt.Fprintf(&b, "| %s | %d |\n", n, r.FaultCounts[n])
		}
	}
	if len(r.Violations) > 0 {
		b.WriteString("\n## violations (first 50)\n\n")
		for i, v := range r.Violations {
			if i == 50 {
				break
			}
			fmt.Fprintf(&b, "- %s\n", v)
		}
	}
	b.WriteString("\n")
	return b.String()
}
