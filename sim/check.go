package main

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// checker enforces the guarantees at every event.
//
//	I1  no two owner processes (incarnations, even of one name) believe they
//	    hold the same key at the same true instant
//	G   per point, generations only grow, and every visible change makes a new one
//	I4  every lease loss reaches every lookup as a loss notification within B
//	L   once faults stop, within Settle every arc is held by its desired owner,
//	    and every lookup's table equals the manager's
type checker struct {
	w     *world
	found []string
	gens  *ring.Table[genRec]
	view  *ring.Table[lease.Gen]    // the manager's view, for loss detection
	from  *ring.Table[lease.Gen]    // its MigratedFrom, for the M check (migrate.go)
	due   []*ring.Table[obligation] // per lookup: losses it must still signal
	bound time.Duration
	// lostAll marks lookups that signalled loss on every range and have not
	// synced since: they have declared their whole table lost, which covers
	// later losses until they reconnect and diff.
	lostAll []bool
}

type genRec struct {
	gen   lease.Gen
	owner string
}

// obligation holds, for one point, the losses a lookup still owes, oldest
// first: each is a generation it must signal at or beyond, by a deadline.
// Each loss keeps its own deadline: a notification of an older loss must
// not be judged against a newer one's generation, nor a newer loss against
// an older one's deadline.
type obligation struct {
	n    int
	owed [maxOwed]owed
}

type owed struct {
	gen      lease.Gen
	deadline time.Duration // true time
}

// maxOwed bounds the unmet losses kept per point; more than that within one
// bound B would take a lookup cut off while the table churns, and such a
// lookup signals loss on everything anyway. Past it, the newest two merge
// (the newer generation with the earlier deadline: stricter, never laxer).
const maxOwed = 8

func (o *obligation) add(gen lease.Gen, deadline time.Duration) {
	if o.n == maxOwed {
		last := &o.owed[maxOwed-1]
		last.gen = max(last.gen, gen)
		return
	}
	o.owed[o.n] = owed{gen: gen, deadline: deadline}
	o.n++
}

// clear drops the losses a notification at generation gen covers.
func (o *obligation) clear(gen lease.Gen) {
	k := 0
	for i := 0; i < o.n; i++ {
		if o.owed[i].gen > gen {
			o.owed[k] = o.owed[i]
			k++
		}
	}
	for i := k; i < o.n; i++ {
		o.owed[i] = owed{}
	}
	o.n = k
}

const maxReported = 20

func newChecker(w *world) *checker {
	c := &checker{w: w, gens: ring.NewTable(genRec{gen: 1}), view: ring.NewTable(lease.Gen(1)), from: ring.NewTable(lease.Gen(0)), bound: w.p.Bound()}
	for range w.p.Lookups {
		c.due = append(c.due, ring.NewTable(obligation{}))
		c.lostAll = append(c.lostAll, false)
	}
	return c
}

func (c *checker) violation(msg string) {
	if len(c.found) < maxReported {
		c.w.logf("VIOLATION %s", msg)
	}
	c.found = append(c.found, fmt.Sprintf("t=%v %s", c.w.s.now, msg))
}

// onGrant runs I1 when an owner's belief grows: beliefs only start when an
// owner accepts a grant, so checking then covers every instant.
func (c *checker) onGrant(*ownerNode) { c.checkI1() }

// interval is a linear piece [lo, hi] of a held range.
type interval struct {
	lo, hi uint64
	owner  string
	gen    lease.Gen
}

func (c *checker) checkI1() {
	var iv []interval
	for _, o := range c.w.order {
		for _, b := range o.beliefs() {
			for _, l := range b.leases {
				r := l.Range
				switch {
				case r.IsFull():
					iv = append(iv, interval{0, ^uint64(0), b.who, l.Gen})
				case r.Start < r.End:
					iv = append(iv, interval{r.Start + 1, r.End, b.who, l.Gen})
				default:
					if r.Start != ^uint64(0) {
						iv = append(iv, interval{r.Start + 1, ^uint64(0), b.who, l.Gen})
					}
					iv = append(iv, interval{0, r.End, b.who, l.Gen})
				}
			}
		}
	}
	slices.SortFunc(iv, func(a, b interval) int {
		if a.lo < b.lo {
			return -1
		} else if a.lo > b.lo {
			return 1
		}
		return 0
	})
	for i := 1; i < len(iv); i++ {
		a, b := iv[i-1], iv[i]
		if b.lo <= a.hi && a.owner != b.owner {
			c.violation(fmt.Sprintf("I1: %s (gen %d) and %s (gen %d) both hold [%016x, %016x]",
				a.owner, a.gen, b.owner, b.gen, b.lo, min(a.hi, b.hi)))
			return
		}
		if b.hi < a.hi {
			iv[i] = a // keep the piece reaching furthest
		}
	}
}

// onChanges checks generations and records the losses lookups must signal.
func (c *checker) onChanges(changes []lease.Change) {
	now := c.w.s.now
	for _, ch := range changes {
		e := ch.Entry
		c.gens.Span(e.Range, func(i int) {
			prev := c.gens.Value(i)
			// Every change lookups can see changes the generation; a
			// repeated change (same generation) must say the same.
			ok := e.Gen > prev.gen || (e.Gen == prev.gen && prev.owner == e.Owner)
			if !ok {
				r, _ := c.gens.At(i)
				c.violation(fmt.Sprintf("G: %v went from gen %d (%q) to gen %d (%q)", r, prev.gen, prev.owner, e.Gen, e.Owner))
			}
			c.gens.SetValue(i, genRec{gen: max(prev.gen, e.Gen), owner: e.Owner})
		})
		c.gens.Compact()
		loss := false
		c.view.Span(e.Range, func(i int) {
			if c.view.Value(i) != e.Gen {
				loss = true
			}
		})
		c.view.Set(e.Range, e.Gen)
		c.view.Compact()
		c.from.Set(e.Range, e.MigratedFrom)
		c.from.Compact()
		if !loss || ch.Clean {
			continue
		}
		for i, d := range c.due {
			if c.w.lookups[i].core.ManagerNonce() == 0 || c.lostAll[i] {
				continue // not connected: no table yet, or declared all lost
			}
			d.Span(e.Range, func(i int) {
				ob := d.Value(i)
				ob.add(e.Gen, now+c.bound)
				d.SetValue(i, ob)
			})
			d.Compact()
		}
	}
}

// onLoss clears the obligations a lookup's notification covers: a range
// notified at a generation at least the one owed.
func (c *checker) onLoss(l *lookupNode, out lb.Output) {
	d := c.due[c.lookupIndex(l)]
	if out.LossAll {
		d.Set(ring.Full(), obligation{})
		c.lostAll[c.lookupIndex(l)] = true
		return
	}
	for _, r := range out.Loss {
		d.Span(r, func(i int) {
			ob := d.Value(i)
			if ob.n == 0 {
				return
			}
			ar, _ := d.At(i)
			_, _, gen, _ := l.core.Lookup(ar.End)
			ob.clear(gen)
			d.SetValue(i, ob)
		})
	}
	d.Compact()
}

// onSynced notes that a lookup applied a response: it is connected again.
func (c *checker) onSynced(l *lookupNode) { c.lostAll[c.lookupIndex(l)] = false }

func (c *checker) lookupIndex(l *lookupNode) int {
	for i, x := range c.w.lookups {
		if x == l {
			return i
		}
	}
	panic("unknown lookup")
}

// everyEvent checks the I4 deadlines.
func (c *checker) everyEvent() {
	now := c.w.s.now
	for i, d := range c.due {
		for k := 0; k < d.Len(); k++ {
			r, ob := d.At(k)
			if ob.n > 0 && ob.owed[0].deadline < now {
				c.violation(fmt.Sprintf("I4: %s did not signal loss on %v (gen %d) within B=%v", c.w.lookups[i].name, r, ob.owed[0].gen, c.bound))
				d.SetValue(k, obligation{})
			}
		}
	}
}

// liveness runs once, Settle after faults stopped.
func (c *checker) liveness() {
	m := c.w.mgr.core
	arcs, _ := m.Leases(namespace)
	desired, _ := m.DesiredRing(namespace)
	if desired.Len() == 0 {
		owners, _ := m.Owners(namespace)
		c.violation(fmt.Sprintf("L: no owner in the desired ring after faults stopped (sessions %+v)", owners))
		return
	}
	for _, a := range arcs {
		want := desired.LookupOwner(a.Range.End)
		if a.State.String() != "granted" || a.Owner != want {
			c.violation(fmt.Sprintf("L: arc %v is %v by %q, want granted to %q", a.Range, a.State, a.Owner, want))
			return
		}
		o := c.w.owners[a.Owner]
		var core *ownerguard.Core
		if o != nil {
			core = o.core
			if tw := o.twin; tw != nil && (core == nil || !holds(core, a.Range.End, o.now())) {
				core = tw.core // the earlier incarnation took the name up again
			}
		}
		if core == nil {
			c.violation(fmt.Sprintf("L: arc %v granted to %q, which is not running", a.Range, a.Owner))
			return
		}
		h, ok := core.GetOwnershipHandle(a.Range.End, o.now())
		if !ok || h.Gen != a.Gen {
			c.violation(fmt.Sprintf("L: %s does not hold %v at gen %d (ok=%v gen=%d)", a.Owner, a.Range, a.Gen, ok, h.Gen))
			return
		}
	}
	if st, _ := m.State(namespace); !sameState(st, c.w.mgr.state) {
		c.violation(fmt.Sprintf("replicated state differs from the core's:\n core %+v %v\n repl %+v %v",
			st, st.Entries.Entries(), c.w.mgr.state, c.w.mgr.state.Entries.Entries()))
	}
	view, _ := m.View(namespace)
	for _, l := range c.w.lookups {
		if got := l.core.Entries(); !slices.Equal(got, view) {
			c.violation(fmt.Sprintf("L: %s's table (%d entries, LSN %d) differs from the manager's (%d entries)", l.name, len(got), l.core.LSN(), len(view)))
		}
	}
}

// holds reports whether c holds the point h at now.
func holds(c *ownerguard.Core, h uint64, now time.Time) bool {
	_, ok := c.GetOwnershipHandle(h, now)
	return ok
}

// sameState reports whether two namespace states are equal, their views
// compared entry by entry (a lease.View edited commit by commit and one
// built whole hold the same entries in chunks cut differently).
func sameState(a, b manager.NamespaceState) bool {
	ea, eb := a.Entries.Entries(), b.Entries.Entries()
	a.Entries, b.Entries = lease.View{}, lease.View{}
	return reflect.DeepEqual(a, b) && slices.Equal(ea, eb)
}
