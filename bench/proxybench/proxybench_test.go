package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The summary line is read by scripts: its form must not drift.
func TestSummaryLine(t *testing.T) {
	pairs := []pair{
		{BothValid: true, RPSRatio: 0.97, CPURatio: 1.03},
		{BothValid: true, RPSRatio: 1.05, CPURatio: 0.95},
		{BothValid: false, RPSRatio: 9, CPURatio: 9}, // discarded
		{BothValid: true, RPSRatio: 1.02, CPURatio: 0.98},
	}
	got := summaryLine(pairs)
	want := "fuge-proxy vs haproxy-chash: rps ratio 1.02 (min 0.97 max 1.05), cpu/request ratio 0.98 (min 0.95 max 1.03), pairs 3"
	if got != want {
		t.Fatalf("summaryLine:\n got %s\nwant %s", got, want)
	}
	form := regexp.MustCompile(`^fuge-proxy vs haproxy-chash: rps ratio \d+\.\d\d \(min \d+\.\d\d max \d+\.\d\d\), cpu/request ratio \d+\.\d\d \(min \d+\.\d\d max \d+\.\d\d\), pairs \d+$`)
	if !form.MatchString(got) || !form.MatchString(summaryLine(nil)) {
		t.Fatalf("summary %q or the empty one %q is not of the issue's form", got, summaryLine(nil))
	}
}

// splitBrain counts a write inside another holder's interval of writes,
// per row, and nothing for holders that take turns.
func TestSplitBrain(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Row 1: u1#1 writes d at 10 and 40; u2#1 writes d at 20 (inside u1's
	// interval: one split-brain write) and reads at 30 (not a write).
	// Row 2: p1 under generation 5, then p2 under 6, then p1 under 7:
	// turns, no overlap. A line cut by a kill is skipped.
	write("u1#1", "10 r1-d 1 204", "40 r1-d 1 204", "15 r1-e 1 204")
	write("u2#1", "20 r1-d 1 204", "30 r1-d 1 200", "35 r1-e 1 20")
	write("p1#1", "10 r2-d 5 204", "12 r2-d 5 204", "50 r2-d 7 204", "60 r2-d 7 204")
	write("p2#1", "20 r2-d 6 204", "30 r2-d 6 204")
	rows := []churnRow{{prefix: "r1-"}, {prefix: "r2-"}}
	splitBrain([]string{dir}, rows)
	if rows[0].SplitWrites != 1 || rows[0].SplitKeys != 1 {
		t.Errorf("row 1: %d split-brain writes on %d keys, want 1 on 1", rows[0].SplitWrites, rows[0].SplitKeys)
	}
	if rows[1].SplitWrites != 0 || rows[1].SplitKeys != 0 {
		t.Errorf("row 2: %d split-brain writes on %d keys, want 0", rows[1].SplitWrites, rows[1].SplitKeys)
	}
}

// The balancers' configurations carry the layout the report promises.
func TestConfigs(t *testing.T) {
	servers := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	h := haproxyConfig("127.0.0.1:9", "hdr(X-Fuge-Key)", servers, false)
	for _, want := range []string{"nbthread 1", "http-reuse always", "balance hdr(X-Fuge-Key)", "hash-type consistent", "server s3 127.0.0.1:3\n"} {
		if !strings.Contains(h, want) {
			t.Errorf("haproxy config lacks %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "log ") || strings.Contains(h, "check") {
		t.Errorf("haproxy throughput config logs or checks:\n%s", h)
	}
	if rr := haproxyConfig("127.0.0.1:9", "roundrobin", servers, true); strings.Contains(rr, "hash-type") || !strings.Contains(rr, "check inter 250ms") {
		t.Errorf("round-robin config with checks:\n%s", rr)
	}
	n := nginxConfig("/tmp/x", "127.0.0.1:9", servers, false)
	for _, want := range []string{"worker_processes 1;", "master_process off;", "access_log off;", "hash $http_x_fuge_key consistent;", "keepalive 256;", `proxy_set_header Connection "";`} {
		if !strings.Contains(n, want) {
			t.Errorf("nginx config lacks %q:\n%s", want, n)
		}
	}
}

// wrk's percentiles are found by value.
func TestWrkResult(t *testing.T) {
	r := wrkResult{Requests: 600, DurationUS: 2_000_000, Status: 1, Pcts: [][]float64{{50, 120}, {99, 900}}}
	if r.rps() != 300 || r.pct(99) != 900 || r.pct(99.9) != 0 || r.errors() != 1 {
		t.Fatalf("rps %v p99 %v p99.9 %v errors %d", r.rps(), r.pct(99), r.pct(99.9), r.errors())
	}
}

// An arc's share of the key space, across zero too.
func TestArcShare(t *testing.T) {
	for _, c := range []struct {
		a    arc
		want float64
	}{
		{arc{Start: "0000000000000000", End: "4000000000000000"}, 0.25},
		{arc{Start: "c000000000000000", End: "0000000000000000"}, 0.25},
		{arc{Start: "zz", End: "0000000000000000"}, 0},
	} {
		if got := c.a.share(); got != c.want {
			t.Errorf("%+v: share %v, want %v", c.a, got, c.want)
		}
	}
}

// mergeLat takes medians over the rounds, and "added" pairs each round
// with direct's same round; a failed round is left out.
func TestMergeLat(t *testing.T) {
	direct := []latRun{{Target: tDirect, C1P50: 20, C1P99: 400, OpenP50: 100}, {Target: tDirect, C1P50: 30, C1P99: 900, OpenP50: 120}, {Target: tDirect, C1P50: 25, C1P99: 500, OpenP50: 110}}
	runs := []latRun{{Target: tFuge, C1P50: 120, C1P99: 1000, OpenP50: 150}, {Target: tFuge, Err: "boom"}, {Target: tFuge, C1P50: 135, C1P99: 800, OpenP50: 170}}
	m := mergeLat(runs, direct)
	if m.Err != "" || m.Rounds != 2 {
		t.Fatalf("merged %d rounds, error %q; want 2 and none", m.Rounds, m.Err)
	}
	if m.C1P50 != 127.5 || m.C1P99 != 900 {
		t.Errorf("c1 p50 %v p99 %v, want the medians 127.5 and 900", m.C1P50, m.C1P99)
	}
	// Round 1: 120-20 = 100, round 3: 135-25 = 110; p99 600 and 300.
	if m.AddC1P50 != (stats{N: 2, Med: 105, Min: 100, Max: 110}) || m.AddC1P99 != (stats{N: 2, Med: 450, Min: 300, Max: 600}) {
		t.Errorf("added c1 %+v / %+v", m.AddC1P50, m.AddC1P99)
	}
	if m.AddOpenP50.Med != 55 {
		t.Errorf("added open p50 %v, want 55", m.AddOpenP50.Med)
	}
	if f := mergeLat([]latRun{{Target: tFuge, Err: "boom"}}, direct); f.Err != "boom" || f.Rounds != 0 {
		t.Errorf("no round succeeded: %+v", f)
	}
}

// bottleneck counts the runs whose client CPU was the busier, over valid
// pairs only, and says so when nothing was measured.
func TestBottleneck(t *testing.T) {
	run := func(proxy, client, us float64) tputRun {
		return tputRun{ProxyCPU: cpuShares{Busy: proxy}, ClientCPU: cpuShares{Busy: client}, ClientUS: us}
	}
	pairs := []pair{
		{BothValid: true, Fuge: run(0.85, 0.97, 20), HA: run(0.93, 0.95, 21)},
		{BothValid: true, Fuge: run(0.99, 0.90, 18), HA: run(0.92, 0.96, 22)},
		{BothValid: false, Fuge: run(0.10, 0.99, 1), HA: run(0.10, 0.99, 1)}, // discarded
	}
	got := bottleneck(pairs)
	for _, want := range []string{"in 3 of 4 runs", "CPU 0 92% and CPU 1 94% busy, CPU 1 19.0 µs", "92% and 96%, 21.5 µs"} {
		if !strings.Contains(got, want) {
			t.Errorf("bottleneck(...) = %q, want it to contain %q", got, want)
		}
	}
	if got := bottleneck(nil); !strings.Contains(got, "not measured") {
		t.Errorf("bottleneck(nil) = %q", got)
	}
	if c := cpuTimesOf(0); c.total == 0 || c.busy > c.total {
		t.Errorf("cpuTimesOf(0) = %+v, want CPU 0's times from /proc/stat", c)
	}
}

// A pair's target is measured as several wrk runs: its figures are rates
// over their summed requests and time, and the medians of their
// percentiles; a failed run fails the target.
func TestTputAccFill(t *testing.T) {
	a := tputAcc{runs: 3, requests: 150_000, durationUS: 3_000_000, errors: 0,
		proxyTicks: 300, beTicks: 150, proxyCPU: cpuTimes{270, 3, 300}, clientCPU: cpuTimes{297, 0, 300},
		p50s: []float64{900, 1000, 1100}, p99s: []float64{2000, 5000, 2500}}
	var r tputRun
	a.fill(&r)
	tick := 1e6 / float64(clockTicks)
	if r.RPS != 50_000 || r.Requests != 150_000 || r.Slices != 3 || r.P50 != 1000 || r.P99 != 2500 {
		t.Fatalf("fill: %+v", r)
	}
	if want := 300 * tick / 150_000; r.ProxyUS != want {
		t.Errorf("proxy µs/request %v, want %v", r.ProxyUS, want)
	}
	if r.ProxyCPU.Busy != 0.9 || r.ClientCPU.Busy != 0.99 || r.ProxyCPU.Steal != 0.01 {
		t.Errorf("CPU shares %+v %+v", r.ProxyCPU, r.ClientCPU)
	}
	a.err = "wrk: refused"
	var bad tputRun
	a.fill(&bad)
	if bad.Valid() {
		t.Errorf("a target with a failed wrk run is valid: %+v", bad)
	}
}
