package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/ring"
)

// crash kills p2 and waits until its ranges are held by the others and every
// device is written again under its current generation.
func (d *demo) crash(ctx context.Context) error {
	d.aliveMu.Lock()
	p2 := d.alive["p2"]
	delete(d.alive, "p2")
	d.aliveMu.Unlock()
	hold := time.Duration(float64(d.opt.lease) * 65 / 60)
	d.logf("== kill -9 p2 (pid %d): the manager grants its ranges again once its leases expire, T·65/60 = %v after its last renewal", p2.Pid(), hold)
	killed := time.Now()
	p2.Kill()
	if err := d.waitFor(ctx, "p2's ranges to be granted to p1 and p3", 10*d.opt.lease, func() bool {
		return d.holdersAre("p1", "p3")
	}); err != nil {
		return err
	}
	regrant := time.Since(killed)
	d.logf("p2's ranges granted to p1 and p3, %v after the kill", regrant.Round(10*time.Millisecond))
	if err := d.waitFor(ctx, "every device to be republished", 10*d.opt.lease, func() bool {
		return d.checker.Behind(d.genAt) == 0
	}); err != nil {
		return err
	}
	all := time.Since(killed)
	d.logf("every device is stored under its current generation again, %v after the kill", all.Round(10*time.Millisecond))
	d.notes = append(d.notes, fmt.Sprintf("kill -9 p2: ranges granted again after %v (the manager holds a lease %v after its last renewal), devices republished after %v",
		regrant.Round(10*time.Millisecond), hold, all.Round(10*time.Millisecond)))
	return nil
}

// join starts p4 and waits until it holds its share and every device is
// written again under its current generation.
func (d *demo) join(ctx context.Context) error {
	d.logf("== start p4: the manager recalls part of every server's ranges and grants them to p4")
	started := time.Now()
	if err := d.startServer(4); err != nil {
		return err
	}
	if err := d.waitFor(ctx, "p4 to get its share", 10*d.opt.lease, func() bool {
		return d.holdersAre("p1", "p3", "p4")
	}); err != nil {
		return err
	}
	moved := time.Since(started)
	if err := d.waitFor(ctx, "every device to be republished", 10*d.opt.lease, func() bool {
		return d.checker.Behind(d.genAt) == 0
	}); err != nil {
		return err
	}
	all := time.Since(started)
	d.logf("every device is stored under its current generation again, %v after p4 started", all.Round(10*time.Millisecond))
	d.notes = append(d.notes, fmt.Sprintf("start p4: its share granted after %v (process start included), devices republished after %v",
		moved.Round(10*time.Millisecond), all.Round(10*time.Millisecond)))
	return nil
}

// phase runs fn and records its counts as a row of the summary.
func (d *demo) phase(ctx context.Context, name string, fn func(context.Context) error) error {
	s0 := d.snapshot()
	err := fn(ctx)
	s := d.snapshot()
	d.phases = append(d.phases, phase{name: name, stats: s.sub(s0), took: s.at.Sub(s0.at)})
	return err
}

// onLoss is the Lookup's loss-notification upcall: the checker learns of
// the loss, and the client republishes the devices in the lost ranges.
func (d *demo) onLoss(ranges []ring.Range, all bool) {
	d.stats.losses.Add(1)
	share := 1.0
	if !all {
		share = 0
		for _, r := range ranges {
			share += r.Share()
		}
	}
	d.checker.Notice(ranges, all, d.genAt)
	if d.client == nil {
		return
	}
	ids := d.client.Affected(ranges, all)
	what := fmt.Sprintf("%d range%s", len(ranges), map[bool]string{true: "s"}[len(ranges) != 1])
	if all {
		what = "everything (no word from the manager)"
	}
	if len(ids) == 0 {
		d.logf("loss notification: %s, %.1f%% of keys; no device there yet", what, 100*share)
		return
	}
	d.logf("loss notification: %s, %.1f%% of keys: republishing %d devices", what, 100*share, len(ids))
	r0, f0 := d.stats.republished.Load(), d.stats.repFailed.Load()
	start := time.Now()
	d.client.Republish(d.upcallCtx, ranges, all)
	d.logf("republished %d devices in %v (%d failed)", d.stats.republished.Load()-r0,
		time.Since(start).Round(time.Millisecond), d.stats.repFailed.Load()-f0)
}

func (d *demo) onRepublish(id string, a presence.Answer, err error) {
	if err != nil {
		d.stats.repFailed.Add(1)
		return
	}
	d.stats.republished.Add(1)
}

// genAt is the Lookup's generation at a hash.
func (d *demo) genAt(h uint64) uint64 {
	_, _, g, _ := d.lookup.Lookup(h)
	return uint64(g)
}

// holdersAre reports whether the Lookup's table has every range granted, to
// exactly the named servers.
func (d *demo) holdersAre(names ...string) bool {
	s := shares(d.lookup.Entries())
	if len(s) != len(names) {
		return false
	}
	for _, n := range names {
		if s[n] == 0 {
			return false
		}
	}
	return true
}
