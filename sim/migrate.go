package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// State migration in the simulator (Params.Migration). Every owner core has
// a MigrationAddr, so the manager flags clean handoffs as migrations. The
// transfer itself is modelled here, over the same faulty world: an export
// offer lives in its owner process (a crash loses it) until its deadline;
// an import is fetched after a random delay, sometimes longer than the
// import deadline, and is dropped (never answered) or fails outright with
// some probability, and succeeds only if the old owner still offers the
// range to this owner. The checker's M check: an owner that serves a range
// under a generation the manager's view marks MigratedFrom another must
// have imported that range under that generation, and an owner never
// offers what it still holds.

// migState is one owner process's migration state.
type ownerMig struct {
	offers   []simOffer
	imported *ring.Table[lease.Gen] // ranges imported, by generation granted
}

type simOffer struct {
	ownerguard.Offer
	until time.Duration // true time
}

// Transfer faults, per import.
const (
	importDropP = 0.1 // the fetch is never answered: the import times out
	importFailP = 0.1 // the fetch fails at once
)

// resetMig forgets a process's migration state: a crash or a new
// incarnation loses it.
func (o *ownerNode) resetMig() { o.mig = ownerMig{imported: ring.NewTable(lease.Gen(0))} }

// migrate takes a core output's offers and starts its imports.
func (o *ownerNode) migrate(out ownerguard.Output) {
	if len(out.Offers) == 0 && len(out.Imports) == 0 {
		return
	}
	now := o.now()
	for _, of := range out.Offers {
		for _, l := range o.core.Held(now) {
			if overlaps(l.Range, of.Range) {
				o.w.violate("M: %s offers %v for export while it holds %v", o.name, of.Range, l)
			}
		}
		// A newer offer of a range supersedes an older one, as in the shell.
		o.mig.offers = slices.DeleteFunc(o.mig.offers, func(old simOffer) bool { return overlaps(old.Range, of.Range) })
		o.mig.offers = append(o.mig.offers, simOffer{of, o.clk.trueAt(of.Deadline)})
	}
	core, s := o.core, o.w.s
	for _, im := range out.Imports {
		if o.w.p.UnsafeServeImports {
			// The planted bug: serve at once, before any state arrived.
			o.handle(core.Imported(im.Range, im.Gen, true, now))
			continue
		}
		switch {
		case s.chance(importDropP):
			o.w.logf("%s: the fetch of %v from %s is lost", o.name, im.Range, im.Peer)
		case s.chance(importFailP):
			s.after(s.uniform(time.Millisecond, 50*time.Millisecond), func() { o.imported(core, im, false) })
		default:
			s.after(s.uniform(time.Millisecond, 3*time.Second), func() { o.imported(core, im, o.fetch(im)) })
		}
	}
}

// fetch takes the offers of im's range to o from the old owner's process,
// if they are still there, and records the import.
func (o *ownerNode) fetch(im ownerguard.Import) bool {
	src := o.w.owners[im.Peer]
	if src == nil || src.core == nil {
		return false // its process is gone, and its state with it
	}
	now := o.w.s.now
	covered := ring.NewTable(false)
	var used []int
	for i, of := range src.mig.offers {
		if of.Peer == o.name && now < of.until && overlaps(of.Range, im.Range) {
			covered.Set(of.Range, true)
			used = append(used, i)
		}
	}
	whole := true
	covered.Span(im.Range, func(i int) { whole = whole && covered.Value(i) })
	if !whole {
		return false
	}
	for k, i := range used {
		src.mig.offers = slices.Delete(src.mig.offers, i-k, i-k+1)
	}
	return true
}

// imported ends an import on the process that started it.
func (o *ownerNode) imported(core *ownerguard.Core, im ownerguard.Import, ok bool) {
	if o.core != core {
		return // that process is gone
	}
	if o.w.s.now < o.pausedUntil {
		o.w.s.at(o.pausedUntil, func() { o.imported(core, im, ok) })
		return
	}
	if ok {
		o.mig.imported.Set(im.Range, im.Gen)
		o.mig.imported.Compact()
	}
	o.handle(core.Imported(im.Range, im.Gen, ok, o.now()))
}

// checkServes is the M check for the ranges an owner just started serving.
func (c *checker) checkServes(o *ownerNode, granted []ring.Range) {
	if !c.w.p.Migration || o.core == nil {
		return
	}
	now := o.now()
	for _, r := range granted {
		ring.WalkIn(c.view, c.from, r, func(p ring.Range, gen, from lease.Gen) {
			h, ok := o.core.GetOwnershipHandle(p.End, now)
			if !ok || h.Gen != gen || from == 0 {
				return
			}
			if got := o.mig.imported.Get(p.End); got != gen {
				c.violation(fmt.Sprintf("M: %s serves %v under gen %d, migrated from gen %d, without having imported it", o.name, p, gen, from))
			}
		})
	}
}

func overlaps(a, b ring.Range) bool {
	if a.IsFull() || b.IsFull() {
		return true
	}
	return a.Contains(b.End) || b.Contains(a.End)
}
