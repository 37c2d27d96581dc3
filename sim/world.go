package main

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// epoch is true time zero; node clocks are offsets and rates against it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// event is one scheduled action at a true instant.
type event struct {
	at  time.Duration // true time since epoch
	seq uint64        // FIFO among equal times: the schedule is a total order
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// scheduler runs events in true-time order, all drawn from one seeded source.
type scheduler struct {
	now    time.Duration
	seq    uint64
	events eventHeap
	rnd    *rand.Rand
	count  uint64
}

func (s *scheduler) at(t time.Duration, fn func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	heap.Push(&s.events, event{at: t, seq: s.seq, fn: fn})
}

func (s *scheduler) after(d time.Duration, fn func()) { s.at(s.now+d, fn) }

// run processes events until none is left before end.
func (s *scheduler) run(end time.Duration, each func()) {
	for len(s.events) > 0 && s.events[0].at <= end {
		e := heap.Pop(&s.events).(event)
		s.now = e.at
		s.count++
		e.fn()
		each()
	}
	if s.now < end {
		s.now = end
	}
}

// uniform draws a duration in [lo, hi].
func (s *scheduler) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rnd.Int64N(int64(hi-lo)+1))
}

func (s *scheduler) chance(p float64) bool { return p > 0 && s.rnd.Float64() < p }

// clock is a node's local clock: local = epoch + offset + rate·true.
type clock struct {
	offset time.Duration
	rate   float64
}

func (c clock) local(t time.Duration) time.Time {
	return epoch.Add(c.offset + time.Duration(float64(t)*c.rate))
}

// trueAt converts a local instant back to true time (rounded up, so a timer
// never fires before its local deadline).
func (c clock) trueAt(l time.Time) time.Duration {
	d := float64(l.Sub(epoch)-c.offset) / c.rate
	t := time.Duration(d)
	if float64(t) < d {
		t++
	}
	return t
}

// link faults, per direction between a node and the manager.
type linkFaults struct {
	drop, dup          float64
	minDelay, maxDelay time.Duration
}

// network delivers messages with delay, drops, duplicates and reordering.
type network struct {
	s           *scheduler
	faults      linkFaults
	partitioned map[string]bool // node name -> cut off from the manager
}

// send schedules deliver after a random delay unless the message is lost.
func (n *network) send(node string, deliver func()) {
	if n.partitioned[node] || n.s.chance(n.faults.drop) {
		return
	}
	n.s.after(n.s.uniform(n.faults.minDelay, n.faults.maxDelay), deliver)
	if n.s.chance(n.faults.dup) {
		n.s.after(n.s.uniform(n.faults.minDelay, n.faults.maxDelay), deliver)
	}
}
