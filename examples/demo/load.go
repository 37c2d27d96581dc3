package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fuge-project/fuge/examples/presence"
)

// opStats counts the load's operations. An operation is ok when its first
// attempt settled it (a write acknowledged, a read answered 200 or 404),
// retried when the client needed more attempts, failed when it gave up.
type opStats struct {
	reads, writes          atomic.Uint64
	ok, retried, failed    atomic.Uint64
	republished, repFailed atomic.Uint64
	losses                 atomic.Uint64
}

// snapshot is opStats and the checker's verdicts at one moment.
type snapshot struct {
	at                             time.Time
	reads, writes                  uint64
	ok, retried, failed            uint64
	republished, repFailed, losses uint64
	verdicts                       [len(verdictNames)]int
	unexplained                    int
}

func (d *demo) snapshot() snapshot {
	s := &d.stats
	v, u := d.checker.Counts()
	return snapshot{
		at: time.Now(), reads: s.reads.Load(), writes: s.writes.Load(),
		ok: s.ok.Load(), retried: s.retried.Load(), failed: s.failed.Load(),
		republished: s.republished.Load(), repFailed: s.repFailed.Load(), losses: s.losses.Load(),
		verdicts: v, unexplained: u,
	}
}

// sub returns the counts from s0 to s.
func (s snapshot) sub(s0 snapshot) snapshot {
	d := snapshot{
		at: s.at, reads: s.reads - s0.reads, writes: s.writes - s0.writes,
		ok: s.ok - s0.ok, retried: s.retried - s0.retried, failed: s.failed - s0.failed,
		republished: s.republished - s0.republished, repFailed: s.repFailed - s0.repFailed, losses: s.losses - s0.losses,
		unexplained: s.unexplained,
	}
	for i := range s.verdicts {
		d.verdicts[i] = s.verdicts[i] - s0.verdicts[i]
	}
	return d
}

// count classifies a finished operation; it ignores those cut short by the
// end of the load.
func (s *opStats) count(ctx context.Context, a presence.Answer, err error) {
	switch {
	case ctx.Err() != nil:
	case err != nil && !errors.Is(err, presence.ErrNotFound):
		s.failed.Add(1)
	case a.Attempts > 1:
		s.retried.Add(1)
	default:
		s.ok.Add(1)
	}
}

// device is the load's state for one device. busy is held by the one
// operation in flight; the other fields belong to its holder.
type device struct {
	id      string
	busy    atomic.Bool
	version int  // addresses written
	acked   bool // some write acknowledged
}

// load starts one operation every interval, on the next device that has
// none in flight, in a goroutine of its own: a device not yet acknowledged
// is written, others are read, and written a new address one time in five.
// Operations on a device are never concurrent, and devices whose server is
// gone do not hold up the others.
func (d *demo) load(ctx context.Context, devs []*device, interval time.Duration, ops *sync.WaitGroup) {
	rng := rand.New(rand.NewPCG(1, 2))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for range devs {
			dv := devs[next]
			next = (next + 1) % len(devs)
			if dv.busy.CompareAndSwap(false, true) {
				write, octet := !dv.acked || rng.IntN(5) == 0, 1+rng.IntN(254)
				ops.Go(func() {
					defer dv.busy.Store(false)
					d.operate(ctx, dv, write, octet)
				})
				break
			}
		}
	}
}

// operate runs one operation on dv, which the caller holds.
func (d *demo) operate(ctx context.Context, dv *device, write bool, octet int) {
	if write {
		dv.version++
		addr := fmt.Sprintf("192.0.2.%d:%d", octet, 10000+dv.version)
		d.checker.Attempt(dv.id, addr)
		d.stats.writes.Add(1)
		a, err := d.client.Publish(ctx, dv.id, addr)
		d.stats.count(ctx, a, err)
		dv.acked = dv.acked || err == nil
		return
	}
	tok := d.checker.Token(dv.id)
	d.stats.reads.Add(1)
	a, err := d.client.Get(ctx, dv.id)
	d.stats.count(ctx, a, err)
	if ctx.Err() != nil || (err != nil && !errors.Is(err, presence.ErrNotFound)) {
		return
	}
	v := d.checker.Read(dv.id, tok, err == nil, a.Addr, a.Gen)
	switch v {
	case Stale, Bogus, Lost:
		d.logf("%s READ: %s answered %q by %s under generation %d (status %d)", v, dv.id, a.Addr, a.Owner, a.Gen, a.Status)
	}
}
