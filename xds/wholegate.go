package xds

import (
	"sync"
	"sync/atomic"
	"time"
)

// wholeGate bounds how many Lookup streams are being sent a whole table at
// once. 2,000 Lookups connecting together (a manager's start, a failover)
// each ask for the whole table, 300 KB at R = 4096; sent all at once, the
// tables share the link frame by frame and every one arrives at the end,
// and each receiver holds its part-read table meanwhile: in the load
// generator of bench/managerscale, whose lookups share one process, that
// was 600 MB of buffers in flight, whose fresh pages cost its copies from
// gRPC's read buffer 0.8-1 s of CPU (under 0.3 s with 200 in flight).
//
// A stream holds a slot from the send of a response of min blocks or more
// until its client has acknowledged every response sent (it has then read
// them), its stream ends, or hold passes. Streams waiting for a slot get
// one in the order they asked, but none waits longer than wait: past it,
// the stream sends its table without a slot. So a client that takes slots
// and never acknowledges (it need only open streams) delays another
// stream's table by wait at most, where without the gate it would not
// delay it at all.
type wholeGate struct {
	slots int           // streams sent a whole table at once
	min   int           // the blocks from which a response counts as a whole table
	hold  time.Duration // the longest a stream keeps its slot unacknowledged
	wait  time.Duration // the longest a stream waits for a slot

	mu      sync.Mutex
	used    int
	waiting []*lookupStream // in the order they asked; some may have stopped waiting

	waits, bypasses atomic.Uint64
}

// The gate's settings. 64 tables in flight fill a link whatever its speed
// (19 MB at R = 4096). 512 blocks are a whole table from R = 2048, while
// the largest change of one owner at R = 65536 resends about 260 blocks. A
// client acknowledges a table within milliseconds of reading it, so a
// second's hold is spent only by one that does not; 2,000 Lookups at
// R = 4096 have all been sent their tables within 2 s.
const (
	wholeSlots = 64
	wholeMin   = 512
	wholeHold  = time.Second
	wholeWait  = 2 * time.Second
)

func newWholeGate() wholeGate {
	return wholeGate{slots: wholeSlots, min: wholeMin, hold: wholeHold, wait: wholeWait}
}

// acquire takes a slot for st, whose lock the caller holds, or queues st
// for one and returns false.
func (g *wholeGate) acquire(st *lookupStream) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used < g.slots {
		g.used++
		return true
	}
	g.waiting = append(g.waiting, st)
	return false
}

// release returns a slot: to the first stream still waiting, whose sender
// it restarts, or to the gate.
func (g *wholeGate) release() {
	for {
		g.mu.Lock()
		st := popFirst(&g.waiting)
		if st == nil {
			g.used--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		st.mu.Lock()
		if st.done || !st.waiting {
			st.mu.Unlock()
			continue // it ended or stopped waiting: the next one
		}
		st.waiting = false
		st.stopWait()
		st.takeSlot()
		st.startSender()
		st.mu.Unlock()
		return
	}
}

// waitSlot stops st's sender until release gives it a slot or the wait's
// bound passes. st.mu is held; drain returns after it.
func (st *lookupStream) waitSlot() {
	g := &st.t.whole
	st.waiting = true
	st.wait++
	n := st.wait
	st.stopWait = st.t.clock.AfterFunc(g.wait, func() {
		st.mu.Lock()
		if st.done || !st.waiting || st.wait != n {
			st.mu.Unlock()
			return
		}
		g.bypasses.Add(1)
		st.waiting = false
		st.bypass = true
		st.startSender()
		st.mu.Unlock()
	})
	g.waits.Add(1) // once the bound is armed, which tests wait for
}

// takeSlot records that st holds a slot, and arms its hold. st.mu is held.
func (st *lookupStream) takeSlot() {
	st.slot = true
	st.hold++
	n := st.hold
	st.stopHold = st.t.clock.AfterFunc(st.t.whole.hold, func() {
		st.mu.Lock()
		release := st.hold == n && st.dropSlot()
		st.mu.Unlock()
		if release {
			st.t.whole.release()
		}
	})
}

// dropSlot gives up st's slot, if it holds one, and says whether it did:
// the caller then calls release, without st.mu, which it holds here.
func (st *lookupStream) dropSlot() bool {
	if !st.slot {
		return false
	}
	st.slot = false
	st.stopHold()
	return true
}
