package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fuge-project/fuge/lb"
)

// convergence is how long single changes took to reach the lookups: from
// the owner's call (Close, or Start of its new incarnation) until a lookup
// applied a table in which the change is seen, over every lookup and
// change.
type convergence struct {
	changes      int
	p50, p99     time.Duration // per lookup and change
	slowest      time.Duration // until the last lookup saw the slowest change
	missed       int           // lookups that had not seen a change within the limit
	leave, enter time.Duration // the slowest change of each kind, until every lookup saw it
	// CPU used while the changes were timed, per change: by the manager
	// nodes and by this generator (its owners, its lookups and the
	// harness). On one machine the two share its cores, so a change is
	// seen no sooner than their sum over the cores allows.
	mgrCPU, genCPU time.Duration
	// Table updates (ArcBlock responses) and heartbeats the lookups
	// received while each change was timed, summed over the changes: a change
	// pushed in one piece is one update a lookup; heartbeats sent meanwhile
	// compete with it for the same cores.
	updates, heartbeats uint64
	lookups             int
}

func (c convergence) String() string {
	if c.changes == 0 {
		return "not measured"
	}
	s := fmt.Sprintf("%d changes: p50 %v, p99 %v, slowest %v (leave %v, return %v)", c.changes,
		c.p50.Round(100*time.Microsecond), c.p99.Round(100*time.Microsecond), c.slowest.Round(time.Millisecond),
		c.leave.Round(time.Millisecond), c.enter.Round(time.Millisecond))
	if c.missed > 0 {
		s += fmt.Sprintf(", %d lookups did not see a change", c.missed)
	}
	if c.mgrCPU+c.genCPU > 0 {
		s += fmt.Sprintf("; CPU a change: managers %v, generator %v", c.mgrCPU.Round(time.Millisecond), c.genCPU.Round(time.Millisecond))
	}
	if c.lookups > 0 {
		s += fmt.Sprintf("; table updates a change %.2f a lookup, heartbeats meanwhile %d", float64(c.updates)/float64(c.changes)/float64(c.lookups), c.heartbeats)
	}
	return s
}

// timeChanges makes n changes in turn, an owner chosen at random leaving
// cleanly (Close: its arcs go to the others at once, under new
// generations) and then coming back (a new incarnation under its name,
// which takes its arcs back), and times each until every lookup has seen
// it at a point of one of the owner's arcs: the point's address is no
// longer the owner's, then is again. A light lookup, which holds no arcs,
// has seen it when a response arrives carrying the arc that holds the
// point, at another address or at the owner's (pointWatch). That arc need
// not end in the point's block: an arc given back need not be the one
// taken away (after the leave, the point's arc merged with its neighbour
// of the same new owner, and the return gave the owner both), so watching
// the point's block missed returns once blocks held 4 arcs.
func (p *pool) timeChanges(ctx context.Context, httpAddr string, n int, rnd *rand.Rand, limit time.Duration) (convergence, error) {
	c := convergence{changes: n, lookups: len(p.lookups) + len(p.light)}
	var all []time.Duration
	var k int
	var h uint64
	var addr string
	for i := range n {
		var seen func(*lb.Lookup) bool
		var t0 time.Time
		// Heartbeats sent meanwhile compete with the change; table updates
		// count the pushes it took.
		c0 := p.counters()
		if i%2 == 0 {
			// An owner with an arc in the view: with about as many owners
			// as ring entries (5,000 at R=8192) one may hold none at the
			// moment, its only entries moving (balancing).
			var name string
			var err error
			for try := 0; ; try++ {
				k = rnd.IntN(len(p.owners))
				name = fmt.Sprintf("owner-%04d", k)
				if h, err = p.pointOf(httpAddr, name); err == nil {
					break
				}
				if try == 20 {
					return c, err
				}
				log.Printf("change %d: %v; choosing another owner", i+1, err)
			}
			addr = name + ":80"
			seen = func(l *lb.Lookup) bool { a, _, _, _ := l.Lookup(h); return a != addr }
			p.watchPoint(&pointWatch{h: h, addr: addr, at: false})
			t0 = time.Now()
			p.owners[k].Close()
		} else {
			seen = func(l *lb.Lookup) bool { a, _, _, _ := l.Lookup(h); return a == addr }
			p.watchPoint(&pointWatch{h: h, addr: addr, at: true})
			t0 = time.Now()
			o := p.newOwner(ctx, fmt.Sprintf("owner-%04d", k))
			// When the owner held the point, to tell the lease protocol's
			// part of a return from the fan-out's.
			go func(t0 time.Time) {
				wctx, cancel := context.WithTimeout(ctx, limit)
				defer cancel()
				select {
				case <-o.Ready():
				case <-wctx.Done():
					return
				}
				ready := time.Since(t0)
				for {
					up := o.Updated()
					if _, ok := o.GetOwnershipHandle(h); ok {
						break
					}
					select {
					case <-up:
					case <-wctx.Done():
						return
					}
				}
				log.Printf("change %d: the owner's session opened after %v, it held the point after %v", i+1, ready.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
			}(t0)
			p.mu.Lock()
			p.owners[k] = o
			p.mu.Unlock()
		}
		ts, missed := p.waitAll(seen, t0, limit)
		lts, lmissed := p.waitLight(t0, limit)
		ts, missed = slices.Sorted(slices.Values(append(ts, lts...))), missed+lmissed
		c.missed += missed
		last := ts[len(ts)-1]
		c.slowest = max(c.slowest, last)
		if i%2 == 0 {
			c.leave = max(c.leave, last)
		} else {
			c.enter = max(c.enter, last)
		}
		all = append(all, ts...)
		d := p.counters().sub(c0)
		c.updates += d.lookupUpdates
		c.heartbeats += d.heartbeats
		log.Printf("change %d (%s): the first lookup saw it after %v, the median %v, the last %v; table updates meanwhile %d, heartbeats %d", i+1, map[bool]string{true: "leave", false: "return"}[i%2 == 0],
			ts[0].Round(time.Millisecond), ts[len(ts)/2].Round(time.Millisecond), last.Round(time.Millisecond), d.lookupUpdates, d.heartbeats)
	}
	slices.Sort(all)
	c.p50, c.p99 = all[len(all)/2], all[len(all)*99/100]
	return c, nil
}

// waitAll waits until every lookup sees the change (seen) or limit has
// passed since t0, and returns the times from t0, sorted; lookups that did
// not see it count as limit, and in missed.
func (p *pool) waitAll(seen func(*lb.Lookup) bool, t0 time.Time, limit time.Duration) (times []time.Duration, missed int) {
	times = make([]time.Duration, len(p.lookups))
	expired := make(chan struct{})
	timer := time.AfterFunc(limit-time.Since(t0), func() { close(expired) })
	defer timer.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, l := range p.lookups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				up := l.Updated()
				if seen(l) {
					times[i] = time.Since(t0)
					return
				}
				select {
				case <-up:
				case <-expired:
					times[i] = limit
					mu.Lock()
					missed++
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(times)
	return times, missed
}

// watchPoint has the light lookups time the next arrival of the arc that
// holds w's point as w wants it.
func (p *pool) watchPoint(w *pointWatch) {
	for _, l := range p.light {
		l.seen.Store(0)
	}
	p.watch.Store(w)
}

// waitLight waits until every light lookup has received the watched arc
// or limit has passed since t0, and returns the times from t0; lookups
// that did not receive it count as limit, and in missed.
func (p *pool) waitLight(t0 time.Time, limit time.Duration) (times []time.Duration, missed int) {
	times = make([]time.Duration, len(p.light))
	for {
		left := 0
		for i, l := range p.light {
			if times[i] == 0 {
				if at := l.seen.Load(); at != 0 {
					times[i] = max(time.Unix(0, at).Sub(t0), 1)
				} else {
					left++
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Since(t0) > limit {
			for i := range times {
				if times[i] == 0 {
					times[i] = limit
					missed++
				}
			}
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.watch.Store(nil)
	return times, missed
}

// pointOf is the end of an arc that owner holds: in the table of a full
// lookup, which has seen every change before this one (timeChanges waited
// for it), or else in the manager's view. Decoding the view's JSON, 65,536
// arcs at R = 65536, cost this generator 180 ms of CPU before each leave
// (a third of its CPU profile of the changes; the convergence measured
// did not move beyond its spread without it).
func (p *pool) pointOf(httpAddr, owner string) (uint64, error) {
	if len(p.lookups) > 0 {
		for _, e := range p.lookups[0].Entries() {
			if e.Owner == owner {
				return e.Range.End, nil
			}
		}
		return 0, fmt.Errorf("%s holds no arc in the table of lookup 0", owner)
	}
	return pointInView(httpAddr, owner)
}

// pointInView is the end of an arc that owner holds in the manager's view.
func pointInView(httpAddr, owner string) (uint64, error) {
	var view struct {
		Entries []struct {
			End   string `json:"end"`
			Owner string `json:"owner"`
		} `json:"entries"`
	}
	body, err := get("http://" + httpAddr + "/v1/namespaces/" + namespace + "/view")
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		return 0, err
	}
	for _, e := range view.Entries {
		if e.Owner == owner {
			return strconv.ParseUint(e.End, 16, 64)
		}
	}
	return 0, fmt.Errorf("%s holds no arc in the view", owner)
}
