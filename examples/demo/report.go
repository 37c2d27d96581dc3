package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// watch prints every change of the lease table: the share of keys that
// changed owner, and the owners' shares after it. Bursts of updates (a
// recall, then the grant) are coalesced for 100 ms.
func (d *demo) watch(ctx context.Context) {
	var prev = d.lookup.Entries()
	d.logf("lease table: %s", formatShares(shares(prev)))
	for {
		ch := d.lookup.Updated()
		cur := d.lookup.Entries()
		moved, regranted := diffTables(prev, cur)
		if len(moved) > 0 || regranted > 0 {
			line := "lease table: "
			if len(moved) > 0 {
				line += formatMoves(moved)
			}
			if regranted > 0 {
				if len(moved) > 0 {
					line += ", "
				}
				line += fmt.Sprintf("%.1f%% granted again to the same server", 100*regranted)
			}
			d.logf("%s; now %s", line, formatShares(shares(cur)))
			prev = cur
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// progress prints a line every second until ctx ends.
func (d *demo) progress(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := d.snapshot()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := d.snapshot()
		delta := s.sub(last)
		rate := float64(delta.reads+delta.writes) / s.at.Sub(last.at).Seconds()
		proxy := ""
		if m, err := scrape("http://" + d.proxyAdmin + "/metrics"); err == nil {
			proxy = fmt.Sprintf(" | proxy retries %.0f", m["fuge_proxy_retries_total"])
		}
		d.logf("%4.0f ops/s | ok %d  retried %d  failed %d | 404 after a loss %d  STALE %d | republished %d%s",
			rate, s.ok, s.retried, s.failed, s.verdicts[Missing], s.verdicts[Stale]+s.verdicts[Bogus], s.republished, proxy)
		last = s
	}
}

// scrape reads the unlabelled and labelled samples of a Prometheus text
// page, keyed by the sample's name with its labels as written.
func scrape(url string) (map[string]float64, error) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// finish prints the summary, stops every process and returns the exit
// status: 0 only for a completed run with no stale read and every 404
// explained.
func (d *demo) finish(runErr error) int {
	proxy, proxyErr := scrape("http://" + d.proxyAdmin + "/metrics")
	d.procs.StopAll(5*time.Second, "manager")
	total := d.snapshot().sub(snapshot{})
	v := total.verdicts
	d.say("")
	d.say("== summary (%.1f s)", time.Since(d.start).Seconds())
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttime\treads\twrites\tok\tretried\tfailed\t404 after a loss\tstale\tloss notices\trepublished\t")
	row := func(name string, took time.Duration, s snapshot) {
		fmt.Fprintf(tw, "%s\t%.1fs\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", name, took.Seconds(), s.reads, s.writes,
			s.ok, s.retried, s.failed, s.verdicts[Missing], s.verdicts[Stale]+s.verdicts[Bogus], s.losses, s.republished)
	}
	for _, p := range d.phases {
		row(p.name, p.took, p.stats)
	}
	row("whole run", time.Since(d.start), total)
	tw.Flush()
	d.say("")
	for _, n := range d.notes {
		d.say("%s", n)
	}
	d.say("reads checked: %d ok, %d not found after a loss notification, %d not found and unexplained,",
		v[OK], v[Missing], total.unexplained)
	d.say("  %d lost under the generation they were written in, %d STALE, %d never written", v[Lost], v[Stale], v[Bogus])
	d.say("republished: %d devices (%d failed) after %d loss notifications", total.republished, total.repFailed, total.losses)
	if proxyErr == nil {
		d.say("fuge-proxy: %.0f requests, %.0f retries; %.0f attempts refused (connection) and %.0f answered 421 (key not held there);",
			proxy[`fuge_proxy_requests_total{code="2xx"}`]+proxy[`fuge_proxy_requests_total{code="4xx"}`]+proxy[`fuge_proxy_requests_total{code="5xx"}`],
			proxy["fuge_proxy_retries_total"], proxy["fuge_proxy_refused_total"], proxy["fuge_proxy_misroutes_total"])
		d.say("  %.0f requests answered 503 after the proxy's retry budget, and retried by the client", proxy["fuge_proxy_give_ups_total"])
	}
	d.say("logs: %s/*.log (manager data in %s/manager-data)", d.opt.work, d.opt.work)
	bad := v[Stale] + v[Bogus] + v[Lost] + total.unexplained
	switch {
	case runErr != nil || !d.completed.Load():
		d.say("FAIL: the run did not complete")
		return 1
	case bad > 0:
		d.say("FAIL: %d reads broke the guarantees (stale, lost or unexplained)", bad)
		return 1
	}
	d.say("PASS: no stale read; every read that found nothing was explained by a loss notification.")
	return 0
}
