package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fuge-project/fuge/internal/plot"
)

// over lists the tenants whose demand exceeds the limit by 10%: the ones
// the limit binds.
func (rd *runData) over(limit float64) []int {
	var out []int
	for t, d := range rd.demand {
		if d > 1.1*limit {
			out = append(out, t)
		}
	}
	return out
}

// ratio is what the over-limit tenants were admitted in window w over
// their limits.
func (rd *runData) ratio(w int, limit float64, over []int) float64 {
	s := 0.0
	for _, t := range over {
		s += rd.got.tenant(w, t)
	}
	return s / (float64(len(over)) * limit * rd.win.Seconds())
}

// target is what the design admits of the over-limit tenants in window w,
// over their limits: the view's part L·|V|/N_registered, and at each proxy
// in no view the least of its offered load and its panic share. It is 1
// when every proxy is in one view.
func (rd *runData) target(w int, limit float64, over []int) float64 {
	reg := float64(max(rd.register, rd.proxies))
	share := limit / reg * rd.win.Seconds()
	m := 0
	s := 0.0
	for p := range rd.proxies {
		if rd.inView[w][p] > 0 {
			m = max(m, rd.members[w][p])
			continue
		}
		for _, t := range over {
			s += min(rd.offered.get(w, p, t), share)
		}
	}
	s += float64(len(over)) * limit * rd.win.Seconds() * float64(m) / reg
	return s / (float64(len(over)) * limit * rd.win.Seconds())
}

// static is the baseline: each proxy admits L/N of each tenant, whatever
// its demand, over the load actually offered in window w.
func (rd *runData) static(w int, limit float64, over []int) float64 {
	s := 0.0
	share := limit / float64(rd.proxies) * rd.win.Seconds()
	for _, t := range over {
		for p := range rd.proxies {
			s += min(rd.offered.get(w, p, t), share)
		}
	}
	return s / (float64(len(over)) * limit * rd.win.Seconds())
}

func (rd *runData) meanOver(from, to time.Duration, f func(w int) float64) float64 {
	a, b := int(from/rd.win), min(int(to/rd.win), rd.windows)
	s, n := 0.0, 0
	for w := a; w < b; w++ {
		s += f(w)
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

// reconverge returns, for an event at window e, the windows (epochs) until
// ratio (admitted over target) is within ±5% for three windows in a row, counted from the
// event and from the first view change after it (-1: none seen); -1 for
// both if it never is before end.
func (rd *runData) reconverge(e, end int, ratio func(int) float64) (fromEvent, fromView int) {
	fromEvent, fromView = -1, -1
	for w := e; w+2 < end; w++ {
		if math.Abs(ratio(w)-1) <= 0.05 && math.Abs(ratio(w+1)-1) <= 0.05 && math.Abs(ratio(w+2)-1) <= 0.05 {
			fromEvent = w - e
			break
		}
	}
	before := rd.majorityView(max(e-1, 0))
	for w := e; w < end; w++ {
		if v := rd.majorityView(w); v != 0 && v != before {
			if fromEvent >= 0 {
				fromView = max(0, e+fromEvent-w)
			}
			break
		}
	}
	return fromEvent, fromView
}

// majorityView is the view id most proxies reported in window w.
func (rd *runData) majorityView(w int) uint64 {
	n := map[uint64]int{}
	for _, v := range rd.viewID[w] {
		if v != 0 {
			n[v]++
		}
	}
	best, bv := 0, uint64(0)
	for v, k := range n {
		if k > best || k == best && v > bv {
			best, bv = k, v
		}
	}
	return bv
}

// outside sums, over the windows in which a proxy was seen in no view at
// every poll, what it admitted for tenants whose offered load there
// exceeded 1.2 x its panic share, over that share.
func (rd *runData) outside(limit float64, over []int) (ratio float64, windows int) {
	reg := max(rd.register, rd.proxies)
	share := limit / float64(reg) * rd.win.Seconds()
	got, want := 0.0, 0.0
	for w := 1; w < rd.windows; w++ {
		for p := range rd.proxies {
			if rd.polls[w][p] == 0 || rd.inView[w][p] > 0 || rd.polls[w-1][p] == 0 || rd.inView[w-1][p] > 0 {
				continue
			}
			counted := false
			for _, t := range over {
				if rd.offered.get(w, p, t) > 1.2*share {
					got += rd.got.get(w, p, t)
					want += share
					counted = true
				}
			}
			if counted {
				windows++
			}
		}
	}
	if want == 0 {
		return math.NaN(), 0
	}
	return got / want, windows
}

// partition is the largest ratio of a window in which no proxy was in a
// view (every one at its panic share), -1 if there was none.
func (rd *runData) partition(limit float64, over []int) (worst float64, windows int) {
	worst = -1
	for w := 0; w < rd.windows; w++ {
		none := true
		for p := range rd.proxies {
			if rd.polls[w][p] == 0 || rd.inView[w][p] > 0 {
				none = false
			}
		}
		if none {
			worst = max(worst, rd.ratio(w, limit, over))
			windows++
		}
	}
	return worst, windows
}

type report struct {
	cfg  config
	runs []*runData
}

func (r *report) steady(rd *runData) float64 {
	over := rd.over(r.cfg.limit)
	return rd.meanOver(rd.steady[0], rd.steady[1], func(w int) float64 { return rd.ratio(w, r.cfg.limit, over) })
}

// worstReconverge is the largest number of epochs after a view change
// (or after the event, for events that changed no view) over the fault
// run's events, the hot-spot moves included.
func (r *report) worstReconverge() int {
	rd := r.runs[0]
	worst := 0
	for _, e := range r.eventsOf(rd) {
		fe, fv := r.reconvergeOf(rd, e)
		n := fe
		if fv >= 0 {
			n = fv
		}
		if fe < 0 {
			return -1
		}
		worst = max(worst, n)
	}
	return worst
}

type mark struct {
	at   time.Duration
	name string
}

// eventsOf lists a run's events and its hot-spot moves, by time.
func (r *report) eventsOf(rd *runData) []mark {
	var ms []mark
	for _, e := range rd.events {
		ms = append(ms, mark{e.at, e.name})
	}
	for at := r.cfg.hotEvery; at < time.Duration(rd.windows)*rd.win && (rd.hotUntil == 0 || at < rd.hotUntil); at += r.cfg.hotEvery {
		ms = append(ms, mark{at, "hot spot moves"})
	}
	slices.SortFunc(ms, func(a, b mark) int { return int(a.at - b.at) })
	return ms
}

func (r *report) reconvergeOf(rd *runData, m mark) (fromEvent, fromView int) {
	over := rd.over(r.cfg.limit)
	e := int(m.at / rd.win)
	end := rd.windows
	for _, n := range r.eventsOf(rd) {
		if n.at > m.at {
			end = int(n.at / rd.win)
			break
		}
	}
	// Over a sliding second (two epochs): a proxy that the shared machine
	// stalls for part of an epoch hands its requests to the next one, and
	// one epoch's count alone swings by a third with it.
	return rd.reconverge(e, end, func(w int) float64 {
		if w == 0 {
			return rd.ratio(w, r.cfg.limit, over) / rd.target(w, r.cfg.limit, over)
		}
		return (rd.ratio(w-1, r.cfg.limit, over) + rd.ratio(w, r.cfg.limit, over)) /
			(rd.target(w-1, r.cfg.limit, over) + rd.target(w, r.cfg.limit, over))
	})
}

func (r *report) line() string {
	out, _ := r.runs[0].outside(r.cfg.limit, r.runs[0].over(r.cfg.limit))
	return fmt.Sprintf("ratelimit: limiters %d steady admitted/limit %.2f loss20 admitted/limit %.2f reconverge %d epochs outside-view admitted/share %.2f",
		r.cfg.proxies, r.steady(r.runs[0]), r.steady(r.runs[1]), r.worstReconverge(), out)
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	c := r.cfg
	p("# Fleet-wide rate limits (bench/ratelimit)\n\n")
	p("%s, by `make bench-ratelimit`. %d fuge-proxy processes with `--ratelimit` (epoch %v, fan-out 2), a 3-node fuge-manager cluster, a sink backend in the harness, all on 127.0.0.1. "+
		"%d tenants with Zipf(1.1) demand, %.0f requests/s in all, each tenant limited to L = %.0f/s (burst L/5); the proxies' shares of the load follow Zipf(1) over their ranks and the hot proxy moves every %v (in the faults run, until the first fault). "+
		"Windows are epochs (%v). Ratios are over the tenants whose demand exceeds L by 10%%.\n\n",
		time.Now().UTC().Format(time.RFC3339), c.proxies, c.epoch, c.tenants, c.demand, c.limit, c.hotEvery, c.epoch)
	p("```\n%s\n```\n\n", r.line())
	for _, rd := range r.runs {
		over := rd.over(c.limit)
		p("## Run %s (gossip loss %.0f%%)\n\n", rd.name, rd.loss*100)
		p("%d CPUs, shared with everything else on the machine; load average %s when the load started.\n\n", rd.cpus, rd.load)
		p("Steady state (%v to %v): admitted/limit **%.3f**; the static L/N split over the same offered load: %.3f.\n\n",
			rd.steady[0], rd.steady[1], r.steady(rd), rd.meanOver(rd.steady[0], rd.steady[1], func(w int) float64 { return rd.static(w, c.limit, over) }))
		p("| tenant | demand/s | L/s | admitted/L, 1 s windows: mean (min-max) | 10 s windows: mean (min-max) |\n|---|---|---|---|---|\n")
		for t, d := range rd.demand {
			one := rd.tenantWindows(t, c.limit, time.Second)
			ten := rd.tenantWindows(t, c.limit, 10*time.Second)
			p("| %d | %.0f | %.0f | %s | %s |\n", t, d, c.limit, stats(one), stats(ten))
		}
		p("\n")
		if len(rd.events) > 0 || rd.name == "faults" {
			p("Epochs until what the over-limit tenants are admitted over the last second (two epochs) is within ±5%% of the design's target for three epochs in a row: L when every proxy is in one view; L·|V|/N_registered for the view plus the least of offered load and L/N_registered at each proxy outside it.\n\n")
			p("| at | event | epochs back within ±5%% | after the view change |\n|---|---|---|---|\n")
			for _, m := range r.eventsOf(rd) {
				fe, fv := r.reconvergeOf(rd, m)
				p("| %v | %s | %s | %s |\n", m.at, m.name, epochs(fe), epochs(fv))
			}
			p("\n")
			out, ow := rd.outside(c.limit, over)
			part, pw := rd.partition(c.limit, over)
			p("Outside any view: admitted/panic share %.3f over %d proxy-epochs (goal <= 1). Every proxy in panic at once (managers stopped): %d epochs, largest admitted/limit %.3f (goal <= 1 plus the burst).\n\n", out, ow, pw, part)
		}
		if rd.dropped > 0 {
			p("The load generator could not send %d requests (a stopped proxy's queue full).\n\n", rd.dropped)
		}
		p("![%s](%s.png)\n\n", rd.name, rd.name)
	}
	return b.String()
}

func epochs(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// tenantWindows is tenant t's admitted/L over consecutive windows of d.
func (rd *runData) tenantWindows(t int, limit float64, d time.Duration) []float64 {
	k := int(d / rd.win)
	var out []float64
	for w := 0; w+k <= rd.windows; w += k {
		s := 0.0
		for i := w; i < w+k; i++ {
			s += rd.got.tenant(i, t)
		}
		out = append(out, s/(limit*d.Seconds()))
	}
	return out
}

func stats(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	lo, hi, s := xs[0], xs[0], 0.0
	for _, x := range xs {
		lo, hi, s = min(lo, x), max(hi, x), s+x
	}
	return fmt.Sprintf("%.3f (%.2f-%.2f)", s/float64(len(xs)), lo, hi)
}

// write writes report.md and a plot per run into dir.
func (r *report) write(dir string) error {
	for _, rd := range r.runs {
		over := rd.over(r.cfg.limit)
		var xs []string
		agg := plot.Series{Name: "over-limit tenants", Color: 0}
		tgt := plot.Series{Name: "target", Color: 2}
		base := plot.Series{Name: "static L/N", Color: 7}
		one := plot.Series{Name: "limit", Color: 3}
		ts := []plot.Series{}
		tenantColors := []int{1, 4, 5, 6}
		for i, t := range over {
			ts = append(ts, plot.Series{Name: fmt.Sprintf("tenant %d", t), Color: tenantColors[i%len(tenantColors)]})
		}
		for w := 0; w < rd.windows; w++ {
			at := time.Duration(w) * rd.win
			label := ""
			if at%(5*time.Second) == 0 {
				label = fmt.Sprint(int(at.Seconds()))
			}
			xs = append(xs, label)
			agg.Y = append(agg.Y, rd.ratio(w, r.cfg.limit, over))
			base.Y = append(base.Y, rd.static(w, r.cfg.limit, over))
			tgt.Y = append(tgt.Y, rd.target(w, r.cfg.limit, over))
			one.Y = append(one.Y, 1)
			for i, t := range over {
				ts[i].Y = append(ts[i].Y, rd.got.tenant(w, t)/(r.cfg.limit*rd.win.Seconds()))
			}
		}
		names := []string{"events:"}
		for _, m := range r.eventsOf(rd) {
			names = append(names, fmt.Sprintf("  %v: %s", m.at, m.name))
		}
		title := fmt.Sprintf("%s: admitted/limit per epoch (%v)", rd.name, rd.win)
		// The tenants first, the aggregate last: on top.
		c := plot.Stack(plot.Lines(title, "seconds", "admitted/L", xs, append(ts, base, one, tgt, agg)), plot.Caption(names...))
		if err := c.Save(filepath.Join(dir, rd.name+".png")); err != nil {
			return err
		}
	}
	for _, rd := range r.runs {
		if err := os.WriteFile(filepath.Join(dir, rd.name+".csv"), []byte(r.csv(rd)), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644)
}

// csv is a run's windows: time, the over-limit tenants' admitted/L, the
// static split's, then per proxy its view id (0: in none) and what it
// admitted of the over-limit tenants.
func (r *report) csv(rd *runData) string {
	var b strings.Builder
	over := rd.over(r.cfg.limit)
	b.WriteString("seconds,admitted_over_limit,target,static_split")
	for p := range rd.proxies {
		fmt.Fprintf(&b, ",p%02d_view,p%02d_admitted", p+1, p+1)
	}
	b.WriteString("\n")
	for w := 0; w < rd.windows; w++ {
		fmt.Fprintf(&b, "%.1f,%.3f,%.3f,%.3f", (time.Duration(w) * rd.win).Seconds(), rd.ratio(w, r.cfg.limit, over), rd.target(w, r.cfg.limit, over), rd.static(w, r.cfg.limit, over))
		for p := range rd.proxies {
			v := rd.viewID[w][p]
			if rd.inView[w][p] == 0 {
				v = 0
			}
			got := 0.0
			for _, t := range over {
				got += rd.got.get(w, p, t)
			}
			fmt.Fprintf(&b, ",%d,%.0f", v, got)
		}
		b.WriteString("\n")
	}
	return b.String()
}
