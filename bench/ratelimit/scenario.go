package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fuge-project/fuge/internal/procs"
)

const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// event is a fault injected at a time into the run.
type event struct {
	at   time.Duration
	name string
	do   func(*cluster) error
}

// runData is what one run recorded.
type runData struct {
	name     string
	cpus     int
	loss     float64
	win      time.Duration
	windows  int
	steady   [2]time.Duration // the steady-state interval
	events   []event
	demand   []float64 // per tenant
	proxies  int
	got      *counts // admitted, counted at the sink
	offered  *counts // sent by the load generator
	limited  *counts
	failed   *counts
	dropped  int64
	inView   [][]int    // [window][proxy] status polls that saw the proxy in a view
	polls    [][]int    // [window][proxy] status polls answered
	viewID   [][]uint64 // [window][proxy] the last view id seen
	members  [][]int    // [window][proxy] the members of that view (0: in none)
	register int        // N_registered as the proxies last saw it
	load     string     // /proc/loadavg's 1-minute figure at the start of the load
	hotUntil time.Duration
}

// scenario runs one run: a fresh cluster, the load for d, the events.
func scenario(c config, dir, bin, name string, loss float64, d time.Duration, events []event, steady [2]time.Duration) (*runData, error) {
	var hotUntil time.Duration
	if len(events) > 0 {
		hotUntil = events[0].at // the faults, one at a time
	}
	logs := filepath.Join(dir, name)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	ps := &procs.Group{Dir: logs}
	defer ps.StopAll(5 * time.Second)
	win := c.epoch
	windows := int(d/win) + 2
	rd := &runData{name: name, cpus: runtime.NumCPU(), loss: loss, win: win, windows: windows, steady: steady, events: events, proxies: c.proxies,
		got: newCounts(windows, c.proxies, c.tenants), offered: newCounts(windows, c.proxies, c.tenants),
		limited: newCounts(windows, c.proxies, c.tenants), failed: newCounts(windows, c.proxies, c.tenants)}
	rd.demand = make([]float64, c.tenants)
	tot := 0.0
	for t := range rd.demand {
		rd.demand[t] = 1 / math.Pow(float64(t+1), 1.1)
		tot += rd.demand[t]
	}
	for t := range rd.demand {
		rd.demand[t] *= c.demand / tot
	}
	for range windows {
		rd.inView = append(rd.inView, make([]int, c.proxies))
		rd.polls = append(rd.polls, make([]int, c.proxies))
		rd.viewID = append(rd.viewID, make([]uint64, c.proxies))
		rd.members = append(rd.members, make([]int, c.proxies))
	}

	cl := &cluster{dir: filepath.Join(dir, name), bin: bin, ps: ps}
	defer cl.close()
	fmt.Fprintf(os.Stderr, "ratelimit: %s: starting 3 managers, the sink, %d proxies\n", name, c.proxies)
	if err := cl.startManagers(3); err != nil {
		return nil, err
	}
	sk := &sink{win: win, got: rd.got}
	sk.start.Store(time.Now().Add(time.Hour).UnixNano()) // nothing counts before the load
	if err := cl.startSink(sk); err != nil {
		return nil, err
	}
	if err := cl.setLimits(c.limit, c.limit/5); err != nil {
		return nil, err
	}
	if err := cl.startProxies(c.proxies, c.epoch, loss); err != nil {
		return nil, err
	}
	// Start on an epoch boundary, so windows are the proxies' epochs.
	start := time.Now().Truncate(win).Add(win)
	time.Sleep(time.Until(start))
	sk.start.Store(start.UnixNano())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rd.load = strings.Fields(string(b))[0]
	}
	rd.hotUntil = hotUntil
	g := &loadGen{start: start, win: win, demand: rd.demand, hotEvery: c.hotEvery, hotUntil: hotUntil, proxies: cl.proxies,
		offered: rd.offered, limited: rd.limited, failed: rd.failed, stop: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(g.run)
	stopPoll := make(chan struct{})
	wg.Go(func() { rd.poll(cl, start, stopPoll) })
	fmt.Fprintf(os.Stderr, "ratelimit: %s: load for %v\n", name, d)
	for _, e := range events {
		time.Sleep(time.Until(start.Add(e.at)))
		fmt.Fprintf(os.Stderr, "ratelimit: %s: %v: %s\n", name, e.at, e.name)
		if err := e.do(cl); err != nil {
			close(g.stop)
			close(stopPoll)
			wg.Wait()
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	time.Sleep(time.Until(start.Add(d)))
	// Each proxy's view of its keys at the end, for whoever reads the logs.
	for _, pp := range cl.proxies {
		if b, err := getRaw("http://" + pp.admin + "/ratelimit"); err == nil {
			os.WriteFile(filepath.Join(logs, pp.name+"-status.json"), b, 0o644)
		}
	}
	close(g.stop)
	close(stopPoll)
	wg.Wait()
	rd.dropped = g.dropped.Load()
	rd.windows = int(d / win)
	return rd, nil
}

// poll records every proxy's view four times an epoch.
func (rd *runData) poll(cl *cluster, start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(rd.win / 4)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			w := int(now.Sub(start) / rd.win)
			if w < 0 || w >= len(rd.polls) {
				continue
			}
			var wg sync.WaitGroup
			reg := make([]int, len(cl.proxies))
			for i, pp := range cl.proxies {
				if pp.down.Load() {
					continue
				}
				wg.Go(func() {
					st, err := pp.status()
					if err != nil {
						return
					}
					rd.polls[w][i]++ // each proxy's cells are written by its goroutine alone
					if st.Node.InView {
						rd.inView[w][i]++
						rd.members[w][i] = st.Node.Members
					}
					rd.viewID[w][i] = st.Node.View
					reg[i] = st.Node.Registered
				})
			}
			wg.Wait()
			for _, r := range reg {
				rd.register = max(rd.register, r)
			}
		}
	}
}
