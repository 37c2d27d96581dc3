package main

import (
	"math"
	"sync"

	"github.com/fuge-project/fuge/ring"
)

// Verdict is the checker's judgement of one read.
type Verdict int

// The verdicts.
const (
	// OK: the latest address written, or one written since the read began.
	OK Verdict = iota
	// Missing: 404 under another generation than the last acknowledged
	// write's. It is explained once a loss notification for the device
	// with a newer generation than that write's has arrived, before the
	// read or after it.
	Missing
	// Lost: 404 under the very generation of the last acknowledged write:
	// state vanished while the lease was held, which no loss explains.
	Lost
	// Stale: an address older than the last acknowledged write.
	Stale
	// Bogus: an address the client never wrote for the device.
	Bogus
)

var verdictNames = [...]string{"ok", "missing", "lost", "STALE", "bogus"}

func (v Verdict) String() string { return verdictNames[v] }

// Checker checks that every read returns the device's latest address, or a
// 404 that a loss notification explains (PRS §2: single copy, and recovery
// notification). It knows the devices from the writes it is told of; a
// device's writes must be reported in the order they took effect (the
// client's OnWrite gives that order). It is safe for concurrent use.
type Checker struct {
	mu      sync.Mutex
	devices map[string]*history
	counts  [len(verdictNames)]int
	pending int // Missing reads not yet explained
}

// history is what the checker knows of one device.
type history struct {
	hash    uint64
	index   map[string]int // address -> its write number, from 1
	writes  int            // write numbers given
	acked   int            // write number of the last acknowledged write; 0 if none
	ackGen  uint64         // generation it was stored under
	notice  uint64         // newest generation a loss notification named for the device
	waiting []uint64       // ackGen of each unexplained Missing read
}

// Token is what a read must be judged against: the device's state when the
// read was sent.
type Token struct {
	acked  int
	ackGen uint64
}

// NewChecker returns a Checker that knows no device.
func NewChecker() *Checker { return &Checker{devices: map[string]*history{}} }

func (c *Checker) device(id string) *history {
	d := c.devices[id]
	if d == nil {
		d = &history{hash: ring.HashString(id), index: map[string]int{}}
		c.devices[id] = d
	}
	return d
}

// Attempt records that addr is about to be written for id. Addresses must
// be new for each attempt (a retry of the same write may repeat one).
func (c *Checker) Attempt(id, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.device(id)
	if _, ok := d.index[addr]; !ok {
		d.writes++
		d.index[addr] = d.writes
	}
}

// Acked records that the write of addr for id was acknowledged, stored under
// generation gen.
func (c *Checker) Acked(id, addr string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.device(id)
	n, ok := d.index[addr]
	if !ok {
		d.writes++
		n, d.index[addr] = d.writes, d.writes
	}
	d.acked, d.ackGen = n, gen
}

// Token returns the state a read of id sent now must be judged against.
func (c *Checker) Token(id string) Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.device(id)
	return Token{acked: d.acked, ackGen: d.ackGen}
}

// Read judges a read of id begun at tok: found with addr, or a 404, served
// under generation gen.
func (c *Checker) Read(id string, tok Token, found bool, addr string, gen uint64) Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.device(id)
	v := OK
	switch {
	case found:
		n, ok := d.index[addr]
		if !ok {
			v = Bogus
		} else if n < tok.acked {
			v = Stale
		}
	case tok.acked == 0:
		// Nothing acknowledged yet: not finding it is right.
	case gen == tok.ackGen:
		v = Lost
	default:
		v = Missing
		if d.notice <= tok.ackGen {
			d.waiting = append(d.waiting, tok.ackGen)
			c.pending++
		}
	}
	c.counts[v]++
	return v
}

// Notice records a loss notification on ranges (on everything if all);
// genAt returns the generation the lookup now has at a hash. It returns
// the number of Missing reads it explained.
func (c *Checker) Notice(ranges []ring.Range, all bool, genAt func(hash uint64) uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	explained := 0
	for _, d := range c.devices {
		if !all && !inRanges(ranges, d.hash) {
			continue
		}
		g := uint64(math.MaxUint64)
		if !all {
			g = genAt(d.hash)
		}
		d.notice = max(d.notice, g)
		kept := d.waiting[:0]
		for _, ackGen := range d.waiting {
			if d.notice > ackGen {
				explained++
			} else {
				kept = append(kept, ackGen)
			}
		}
		d.waiting = kept
	}
	c.pending -= explained
	return explained
}

func inRanges(ranges []ring.Range, h uint64) bool {
	for _, r := range ranges {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// Counts returns the reads judged so far by verdict, and how many Missing
// reads no notification has explained yet.
func (c *Checker) Counts() (counts [len(verdictNames)]int, unexplained int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts, c.pending
}

// Behind returns the number of devices with an acknowledged write whose
// generation differs from the one genAt returns for them now: devices whose
// state the pool may have lost and the client has not yet written again.
func (c *Checker) Behind(genAt func(hash uint64) uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.devices {
		if d.acked > 0 && d.ackGen != genAt(d.hash) {
			n++
		}
	}
	return n
}
