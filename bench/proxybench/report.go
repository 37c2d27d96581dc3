package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// report is everything a run measured, written as report.md, results.json
// and PNG plots.
type report struct {
	Date            string
	Quick           bool
	Pinned          bool
	Env             map[string]string
	Config          string
	Targets         []string
	BackendTLS      bool
	Runs            []tputRun
	Pairs           []pair
	Latency         []latRun
	Churn           []churnRow
	Move            moveResult
	ManagerScale    string
	ManagerScaleErr error `json:"-"`
	Summary         string
	Took            time.Duration

	cfg config
}

func newReport(cfg config, pinned bool) *report {
	r := &report{Date: time.Now().Format("2006-01-02 15:04 MST"), Quick: cfg.quick, Pinned: pinned, Env: map[string]string{}, cfg: cfg}
	r.Config = fmt.Sprintf("pairs wanted %d (the other targets in the first %d rounds), wrk warm-up %v then %v per run, latency %d rounds of %v runs (the round-robin and TLS targets in the first %d), churn %v per balancer (a restart every %v, down %v), ring move %v + %v, quiet wait up to %v, lease duration %v (fuge-manager's default; %v in the churn section's namespace)",
		cfg.rounds, cfg.otherRounds, cfg.warm, cfg.run, cfg.latRounds, cfg.latDur, min(cfg.otherRounds, cfg.latRounds), cfg.churnDur, cfg.churnEvery, cfg.churnDown, cfg.moveSteady, cfg.moveAfter, cfg.quietMax, poolT, churnT)
	sh := func(k string, args ...string) {
		out, _ := exec.Command(args[0], args[1:]...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		r.Env[k] = line
	}
	sh("commit", "git", "describe", "--always", "--dirty")
	sh("go", "go", "version")
	sh("kernel", "uname", "-sr")
	sh("haproxy", "haproxy", "-v")
	sh("nginx", "nginx", "-v")
	sh("wrk", "wrk", "-v")
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				r.Env["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	r.Env["cpus"] = cpusOnline()
	r.Env["goarch"] = runtime.GOARCH
	return r
}

// byTarget groups the valid runs' figures.
func (r *report) byTarget(name string, f func(tputRun) float64) (stats, int, int) {
	var xs []float64
	total := 0
	for _, run := range r.Runs {
		if run.Target != name {
			continue
		}
		total++
		if run.Valid() {
			xs = append(xs, f(run))
		}
	}
	return summarize(xs), len(xs), total
}

func (r *report) latOf(name string) latRun {
	for _, l := range r.Latency {
		if l.Target == name {
			return l
		}
	}
	return latRun{}
}

// added is a median of differences, with its range when there are several.
func added(s stats) string {
	switch s.N {
	case 0:
		return "–"
	case 1:
		return fmt.Sprintf("%+.0f", s.Med)
	}
	return fmt.Sprintf("%+.0f (%+.0f–%+.0f)", s.Med, s.Min, s.Max)
}

func yesNo(ok bool) string {
	if ok {
		return "**met**"
	}
	return "not met"
}

func rng(s stats, f string) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s.Med, s.Min, s.Max)
}

func (r *report) markdown() string {
	var w strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&w, format, a...) }
	mode := "full run"
	if r.Quick {
		mode = "QUICK run (one pair of each, short runs: a smoke test, not a measurement)"
	}
	p("# fuge-proxy beside HAProxy, nginx and round-robin: %s\n\n", r.Date)
	p("%s, by `make bench` (bench/proxybench), in %v. Commit `%s`; %s; %s; CPUs %s (%s); %s; %s; %s.\n\n",
		mode, r.Took.Round(time.Second), r.Env["commit"], r.Env["go"], r.Env["kernel"], r.Env["cpus"], r.Env["cpu"], r.Env["haproxy"], r.Env["nginx"], r.Env["wrk"])
	if r.Pinned {
		p("Layout: each proxy with one worker (fuge-proxy `GOMAXPROCS=1`, HAProxy `nbthread 1`, nginx `worker_processes 1`) pinned to CPU 0 with taskset; wrk, the harness (its Owner sessions and load generators), three fasthttp backends (64-byte body) and fuge-manager on CPU 1. ")
	} else {
		p("Layout: **not pinned** (taskset missing or one CPU): figures are not comparable to pinned runs. ")
	}
	p("Keep-alive on both sides; HAProxy with `http-reuse always`, nginx with upstream `keepalive`; no access logs. fuge-proxy routes by real leases: Owner sessions in the harness hold the backends' addresses against a fuge-manager process over mutual TLS; the backends stay plain, so every target reaches the same servers.\n\n")
	p("Settings: %s.\n\n", r.Config)

	rps, cpu := pairStats(r.Pairs)
	p("## Summary\n\n    %s\n\n", r.Summary)
	busy := 0
	for _, pr := range r.Pairs {
		if pr.BothValid && !pr.QuietBoth {
			busy++
		}
	}
	if busy > 0 {
		p("%d of the %d pairs started while other processes used %.0f%% of a core or more (the harness waited up to %v for quiet, then ran anyway): see the pairs table.\n\n", busy, rps.N, 100*quietThreshold, r.cfg.quietMax)
	}
	// A timing goal is judged only when every run started on a quiet machine.
	quiet := true
	for _, run := range r.Runs {
		quiet = quiet && run.Quiet
	}
	for _, l := range r.Latency {
		quiet = quiet && l.OthersBefore < quietThreshold
	}
	timed := func(ok bool) string {
		if !quiet {
			return "no verdict: busy machine"
		}
		return yesNo(ok)
	}
	p("| goal | measured | |\n|---|---|---|\n")
	p("| fuge-proxy / haproxy-chash rps ratio ≥ 1.05 (median of pairs) | %.2f (%.2f–%.2f, %d pairs) | %s |\n", rps.Med, rps.Min, rps.Max, rps.N, timed(rps.N > 0 && rps.Med >= 1.05))
	p("| fuge-proxy / haproxy-chash CPU/request ratio ≤ 0.95 (median of pairs) | %.2f (%.2f–%.2f) | %s |\n", cpu.Med, cpu.Min, cpu.Max, timed(cpu.N > 0 && cpu.Med <= 0.95))
	f, h := r.latOf(tFuge), r.latOf(tHAChash)
	p("| added latency, wrk -c1: p50 and p99 no more than HAProxy's (medians of %d rounds) | fuge-proxy %+.0f / %+.0f µs, haproxy-chash %+.0f / %+.0f µs | %s |\n", f.Rounds,
		f.AddC1P50.Med, f.AddC1P99.Med, h.AddC1P50.Med, h.AddC1P99.Med, timed(f.AddC1P50.N > 0 && f.AddC1P50.Med <= h.AddC1P50.Med && f.AddC1P99.Med <= h.AddC1P99.Med))
	p("| added latency, %d requests/s open loop: p50 and p99 no more than HAProxy's (medians of %d rounds) | fuge-proxy %+.0f / %+.0f µs, haproxy-chash %+.0f / %+.0f µs | %s |\n", openRate, f.Rounds,
		f.AddOpenP50.Med, f.AddOpenP99.Med, h.AddOpenP50.Med, h.AddOpenP99.Med, timed(f.AddOpenP50.N > 0 && f.AddOpenP50.Med <= h.AddOpenP50.Med && f.AddOpenP99.Med <= h.AddOpenP99.Med))
	m := r.Move
	p("| 25%% ring move: no request fails, p99 in that second < 3× steady p99 | %d failed; p99 %.0f µs against %.0f µs steady (%.1f×) | %s |\n",
		m.Failed, m.Move.P99, m.Steady.P99, m.Move.P99/max(m.Steady.P99, 1), timed(m.Err == "" && m.Failed == 0 && m.Move.P99 < 3*m.Steady.P99))
	for _, c := range r.Churn {
		if c.Balancer == tFuge {
			p("| churn: fuge-proxy 0 stale reads and 0 split-brain writes | %d stale, %d split-brain (others: see item 3) | %s |\n", c.Stale, c.SplitWrites, yesNo(c.Stale == 0 && c.SplitWrites == 0))
		}
	}
	p("\n")

	p("## 1. Throughput and CPU per request\n\n`wrk -t1 -c%d` for %v after a warm-up, 10,000 keys in `X-Fuge-Key` round robin. Proxy CPU per request from /proc/<pid>/stat (utime + stime + cutime + cstime) over the run, divided by the requests wrk counted; the backends' the same, summed over the three. Medians over valid runs (min–max); a run is discarded if any request failed or was answered ≥ 400 (wrk's errors; the backends answer nothing but 200).\n\n", wrkConns, r.cfg.run)
	p("| target | valid runs | requests/s | proxy CPU µs/request | backends' CPU µs/request | p50 µs | p99 µs |\n|---|---|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		rs, n, total := r.byTarget(t, func(x tputRun) float64 { return x.RPS })
		cs, _, _ := r.byTarget(t, func(x tputRun) float64 { return x.ProxyUS })
		bs, _, _ := r.byTarget(t, func(x tputRun) float64 { return x.BackendUS })
		p50, _, _ := r.byTarget(t, func(x tputRun) float64 { return x.P50 })
		p99, _, _ := r.byTarget(t, func(x tputRun) float64 { return x.P99 })
		cpuCell := rng(cs, "%.1f")
		if t == tDirect {
			cpuCell = "– (no proxy)"
		}
		p("| %s | %d/%d | %s | %s | %s | %.0f | %.0f |\n", t, n, total, rng(rs, "%.0f"), cpuCell, rng(bs, "%.1f"), p50.Med, p99.Med)
	}
	p("\nThe pairs, in the order run (the first of each pair alternates). Each target of a pair is warmed up, then its %v are measured as %d wrk runs of %v alternating with the other target's (first, second, second, first, ...): this machine's speed drifts by 10%% and more within seconds, and two whole runs one after the other measured the drift as often as the proxies. Figures are over a target's runs of the round (requests and CPU summed; p50 and p99 the medians of its runs'). \"others\" is the CPU that processes other than this run's used, as a share of one core, before (what the harness waited on) and during the pair:\n\n", r.cfg.run, max(1, r.cfg.slices), r.cfg.run/time.Duration(max(1, r.cfg.slices)))
	p("| round | first | fuge-proxy rps | haproxy-chash rps | rps ratio | fuge-proxy µs/req | haproxy µs/req | CPU ratio | others before | others during | CPU %d / CPU %d busy (fuge-proxy run; haproxy run) | valid |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", proxyCPU, clientCPU)
	for _, pr := range r.Pairs {
		first := "haproxy"
		if pr.FirstFuge {
			first = "fuge"
		}
		valid := "yes"
		if !pr.BothValid {
			valid = fmt.Sprintf("no (errors %d/%d %s%s)", pr.Fuge.Errors, pr.HA.Errors, pr.Fuge.Err, pr.HA.Err)
		}
		if !pr.QuietBoth {
			valid += ", busy"
		}
		p("| %d | %s | %.0f | %.0f | %.2f | %.1f | %.1f | %.2f | %.0f%% / %.0f%% | %.0f%% / %.0f%% | %.0f%% / %.0f%%; %.0f%% / %.0f%% | %s |\n", pr.Round, first, pr.Fuge.RPS, pr.HA.RPS, pr.RPSRatio,
			pr.Fuge.ProxyUS, pr.HA.ProxyUS, pr.CPURatio, 100*pr.Fuge.OthersBefore, 100*pr.HA.OthersBefore, 100*pr.Fuge.OthersDuring, 100*pr.HA.OthersDuring,
			100*pr.Fuge.ProxyCPU.Busy, 100*pr.Fuge.ClientCPU.Busy, 100*pr.HA.ProxyCPU.Busy, 100*pr.HA.ClientCPU.Busy, valid)
	}
	p("\n%s\n", bottleneck(r.Pairs))
	p("\n![requests per second](throughput.png)\n\n![proxy CPU per request](cpu.png)\n\n")

	p("## 2. Latency added per hop\n\n(a) `wrk -t1 -c1 --latency` for %v; (b) the harness's open-loop generator at %d requests/s over %d connections for the same time after %v at that rate unmeasured, request k due at k/rate (paced by a timerfd to the microsecond, not by Go's timers, which wake in whole milliseconds and would send bursts) on connection k mod %d: a request's time counts from when it was due, so a slow answer delays the next ones and they count it (no coordinated omission); the generator's own timer lateness, when the connection was idle and could have sent on time, is taken out. Each target is measured once in each of %d rounds (the round-robin targets and TLS to the backends in the first %d), each round in another order; the figures are medians over the rounds, and \"added\" is the median over the rounds of the target minus direct in the same round (min–max beside it).\n\n", r.cfg.latDur, openRate, openConns, openWarm, openConns, r.cfg.latRounds, min(r.cfg.otherRounds, r.cfg.latRounds))
	p("| target | c1 p50 µs | c1 p99 µs | added p50 | added p99 | %d/s p50 µs | %d/s p99 µs | added p50 | added p99 | failed (c1 + open loop) |\n|---|---|---|---|---|---|---|---|---|---|\n", openRate, openRate)
	for _, l := range r.Latency {
		if l.Err != "" {
			p("| %s | %s | | | | | | | | |\n", l.Target, l.Err)
			continue
		}
		p("| %s | %.0f | %.0f | %s | %s | %.0f | %.0f | %s | %s | %d + %d |\n", l.Target, l.C1P50, l.C1P99, added(l.AddC1P50), added(l.AddC1P99),
			l.OpenP50, l.OpenP99, added(l.AddOpenP50), added(l.AddOpenP99), l.C1Errors, l.OpenFail)
	}
	p("\n![latency percentiles](latency.png)\n\n")

	p("## 3. The cost of inconsistency under churn\n\nThe presence example behind each balancer; every %v the first of its three servers restarts: SIGTERM (presence-server then leaves its leases cleanly), down for %v, started again at the same address, empty. %d clients each own %d of %d devices and write (PUT) or read (GET) one of them every 5 ms. Behind fuge-proxy the servers are presence-server (leases T = %v, ownerguard); behind HAProxy and nginx they are the same presence service with no lease (every server takes every key), health-checked every 250 ms, a failed connection retried on another server. Counted, never asserted:\n\n",
		r.cfg.churnEvery, r.cfg.churnDown, churnClients, churnDevices/churnClients, churnDevices, churnT)
	p("- **stale read**: a read returning a value older than the client's last acknowledged write of the device (from the clients' records);\n- **split-brain write**: a write a server accepted while another server's interval of accepted writes for the same device (first to last, per process incarnation and generation) was open (from the servers' history files, CLOCK_MONOTONIC);\n- lost read: a 404 after an acknowledged write (the server holding the device restarted empty; the presence client republishes on a loss notification, which these clients do not listen to); not an inconsistency;\n- failed: a call answered with neither 2xx nor 404, or not at all.\n\n")
	p("| balancer | servers | seconds | restarts | writes (acknowledged) | reads (answered) | stale reads | split-brain writes (devices) | lost reads | failed calls |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Churn {
		p("| %s | %s | %.0f | %d | %d (%d) | %d (%d) | **%d** | **%d** (%d) | %d | %d |\n", c.Balancer, c.Servers, c.Seconds, c.Restarts, c.Writes, c.WritesOK, c.Reads, c.ReadsOK, c.Stale, c.SplitWrites, c.SplitKeys, c.Lost, c.Failed)
	}
	p("\n![anomalies per balancer](anomalies.png)\n\n")

	p("## 4. fuge-proxy under a lease-table change\n\nA fourth owner, b4, joins the plain namespace (it then holds %.1f%% of the key space), the harness's closed-loop generator keeps %d connections busy through fuge-proxy, and %v in, b4 is drained through the admin API (`POST /v1/namespaces/default/owners/b4/drain`): its arcs are recalled and granted to b1–b3 while requests flow. The admin API showed every arc granted to b1–b3 %v after the drain.\n\n",
		100*m.Share, wrkConns, m.DrainAt, m.MoveTook.Round(time.Millisecond))
	if m.Err != "" {
		p("**The move failed to run: %s**\n\n", m.Err)
	}
	p("| window | requests/s | p99 µs | failed |\n|---|---|---|---|\n")
	p("| steady, before the drain | %.0f | %.0f | %d |\n| the second from the drain | %.0f | %.0f | %d |\n| the worst second after it | %.0f | %.0f | %d |\n\n",
		m.Steady.RPS, m.Steady.P99, m.Steady.Failed, m.Move.RPS, m.Move.P99, m.Move.Failed, m.WorstAfter.RPS, m.WorstAfter.P99, m.WorstAfter.Failed)
	p("Second by second (0 is the drain):\n\n| second | requests/s | p99 µs | failed |\n|---|---|---|---|\n")
	for _, s := range m.Seconds {
		p("| %+d | %.0f | %.0f | %d |\n", int(s.From/time.Second), s.RPS, s.P99, s.Failed)
	}
	p("\n![per second around the drain](move.png)\n\n")

	p("## 5. The manager's scale\n\n")
	switch {
	case r.Quick:
		p("Skipped in QUICK mode: `make bench` runs `go run ./bench/managerscale -ring 4096 -changes 4` (as `make bench-manager` does) after everything above has stopped, and puts its table here.\n")
	case r.ManagerScaleErr != nil || r.ManagerScale == "":
		p("`go run ./bench/managerscale` failed: %v\n", r.ManagerScaleErr)
	default:
		p("`go run ./bench/managerscale -ring 4096 -changes 4` (as `make bench-manager`), run after everything above had stopped, with every CPU:\n\n```\n%s\n```\n", r.ManagerScale)
	}
	return w.String()
}

// write writes report.md, results.json and the plots into dir.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.Summary = summaryLine(r.Pairs)
	if err := r.plots(dir); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644)
}

// bottleneck says which CPU limited the pairs' runs: with every proxy on
// one CPU and the client and the backends on the other, the busier of
// the two bounds the throughput, and a proxy that is cheaper per request
// than another shows it in requests/s only while its own CPU is the
// busier one.
func bottleneck(pairs []pair) string {
	var runs, client int
	var fp, fc, hp, hc, fu, hu []float64
	for _, pr := range pairs {
		if !pr.BothValid {
			continue
		}
		for _, x := range []tputRun{pr.Fuge, pr.HA} {
			if x.ClientCPU.Busy == 0 {
				continue
			}
			runs++
			if x.ClientCPU.Busy > x.ProxyCPU.Busy {
				client++
			}
		}
		fp, fc, fu = append(fp, pr.Fuge.ProxyCPU.Busy), append(fc, pr.Fuge.ClientCPU.Busy), append(fu, pr.Fuge.ClientUS)
		hp, hc, hu = append(hp, pr.HA.ProxyCPU.Busy), append(hc, pr.HA.ClientCPU.Busy), append(hu, pr.HA.ClientUS)
	}
	if runs == 0 {
		return "Which CPU limited the runs was not measured (the layout was not pinned)."
	}
	return fmt.Sprintf("Which CPU limited the pairs' runs: the client's CPU %d (wrk, the backends, the manager, this harness) was busier than the proxy's CPU %d in %d of %d runs. Medians: fuge-proxy's runs CPU %d %.0f%% and CPU %d %.0f%% busy, CPU %d %.1f µs per request; haproxy-chash's runs %.0f%% and %.0f%%, %.1f µs. While CPU %d is the busier, requests/s measure it, not the proxy: the CPU ratio above is the proxy's own cost.",
		clientCPU, proxyCPU, client, runs, proxyCPU, 100*summarize(fp).Med, clientCPU, 100*summarize(fc).Med, clientCPU, summarize(fu).Med,
		100*summarize(hp).Med, 100*summarize(hc).Med, summarize(hu).Med, clientCPU)
}
