package ownerguard

import (
	"cmp"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// State migration, the Core's part (the manager's is manager/migrate.go).
//
// An owner with a MigrationAddr says so in every request. A response may
// then recall ranges as migrations (MigrateOut, naming the new owner): the
// Core drops them at once like any recall, and if it held each one whole,
// serving, under the order's generation, it offers it for export
// (Output.Offers) and lists it as Migrated in its next request, which
// releases it. A response may also grant ranges as imports (MigrateIn,
// naming the old owner): the Core holds them, lists and renews them, but
// marks them Importing, so the checks refuse them, and hands the shell an
// Import to fetch. Imported(ok) makes them served; Imported(not ok), or
// the import's deadline passing, drops them, and the next request omits
// them: the manager regrants them under a new generation that is not
// migrated, so lookups notify the loss. The Core never serves an
// importing range, and never holds one the manager did not grant after
// the old owner released it, so a migration adds no way to two owners.

// DefaultImportTimeout caps CoreConfig.ImportTimeout's default,
// min(T/2, 2 s): a range being imported is refused (421) meanwhile, and
// fuge-proxy retries a refused request for up to 2 s.
const DefaultImportTimeout = 2 * time.Second

// Import is a range granted as an import: the shell fetches its state from
// Peer at PeerAddr, hands it to the application, and calls Core.Imported.
// The range is not served before, and is given up at Deadline.
type Import struct {
	Range    ring.Range
	Gen      lease.Gen // the generation granted
	Peer     string    // the previous owner
	PeerAddr string    // its MigrationService
	Deadline time.Time
}

// Offer is a range recalled as a migration: the shell lets Peer, and only
// Peer, fetch its state, as held under Gen, until Deadline.
type Offer struct {
	Range    ring.Range
	Gen      lease.Gen // the generation it was held under here
	Peer     string    // the new owner
	Deadline time.Time
}

// migState is the Core's migration state.
type migState struct {
	imports  []Import     // in flight
	migrated []ring.Range // released as migrated: listed until a response is accepted
	handover bool
	stats    MigrationStats
}

// MigrationStats counts a Core's migrations, per range.
type MigrationStats struct {
	Offered, Imports, Imported, ImportsFailed, ImportsTimedOut uint64
}

// MigrationStats returns the migration counters.
func (c *Core) MigrationStats() MigrationStats { return c.mig.stats }

// fill adds the migration fields to a request.
func (m *migState) fill(c *Core, req *lease.LeaseRequest) {
	req.MigrationAddr = c.cfg.MigrationAddr
	req.Migrated = m.migrated
	req.Handover = m.handover
}

// markImports marks as Importing the ranges of next granted under an
// import order, and keeps the import state of what was held under the
// same generation before (a grant repeated because our confirmation
// crossed it). It returns the imports to start. next is the Core's own
// new table, not yet installed.
func (c *Core) markImports(next *ring.Table[slot], resp lease.LeaseResponse, n int64) []Import {
	// A range released as migrated stays listed while the manager still
	// recalls it: a response may acknowledge a request the manager
	// dropped as racing (it records the sequence number all the same), and
	// a request that omitted the range without listing it would release
	// it plainly.
	c.mig.migrated = slices.DeleteFunc(c.mig.migrated, func(r ring.Range) bool {
		return !slices.ContainsFunc(resp.MigrateOut, func(o lease.Migration) bool { _, ok := intersect(o.Range, r); return ok })
	})
	if c.cfg.MigrationAddr == "" {
		return nil
	}
	prev := c.held
	if c.expiry <= n {
		prev = ring.NewTable(slot{})
	}
	orders := slices.SortedFunc(slices.Values(resp.MigrateIn), func(a, b lease.Migration) int { return cmp.Compare(a.Range.End, b.Range.End) })
	// Cut next at the orders' ends, so that each piece of the walk lies in
	// one order or in none: a grant merged with an adjacent one of the
	// same generation may be part import, part plain.
	xs := make([]uint64, 0, 2*len(orders))
	for _, o := range orders {
		xs = append(xs, o.Range.Start, o.Range.End)
	}
	next.SplitAll(xs)
	var sets []ring.Assignment[slot]
	started := map[int]bool{}
	ring.Walk(prev, next, func(r ring.Range, pv, nv slot) {
		if !nv.Held {
			return
		}
		if pv.Held && pv.Gen == nv.Gen {
			if pv.Importing != nv.Importing {
				nv.Importing = pv.Importing
				sets = append(sets, ring.Assignment[slot]{Range: r, Value: nv})
			}
			return
		}
		if k, ok := orderAt(orders, r.End, nv.Gen); ok {
			nv.Importing = true
			sets = append(sets, ring.Assignment[slot]{Range: r, Value: nv})
			started[k] = true
		}
	})
	next.SetAll(sets)
	next.Compact()
	if len(sets) == 0 {
		return nil
	}
	var out []Import
	for k := range orders {
		if !started[k] {
			continue
		}
		o := orders[k]
		im := Import{Range: o.Range, Gen: o.Gen, Peer: o.Peer, PeerAddr: o.PeerAddr,
			Deadline: time.Unix(0, n+int64(c.cfg.ImportTimeout))}
		c.mig.imports = append(c.mig.imports, im)
		c.mig.stats.Imports++
		out = append(out, im)
	}
	return out
}

// orderAt finds the order (sorted by End, disjoint) whose range contains h
// under generation g.
func orderAt(os []lease.Migration, h uint64, g lease.Gen) (int, bool) {
	i, _ := slices.BinarySearchFunc(os, h, func(o lease.Migration, h uint64) int { return cmp.Compare(o.Range.End, h) })
	for _, k := range []int{i, 0} { // a range wrapping past zero ends first
		if k < len(os) && os[k].Range.Contains(h) && os[k].Gen == g {
			return k, true
		}
	}
	return 0, false
}

// offerExports returns the offers of a response's MigrateOut: each range
// held here whole, served, under the order's generation, and no longer
// held in next. They are listed as Migrated in the next request.
func (c *Core) offerExports(next *ring.Table[slot], resp lease.LeaseResponse, n int64) []Offer {
	if c.cfg.MigrationAddr == "" || len(resp.MigrateOut) == 0 || c.expiry <= n {
		return nil
	}
	var out []Offer
	for _, o := range resp.MigrateOut {
		whole := true
		ring.WalkIn(c.held, next, o.Range, func(_ ring.Range, pv, nv slot) {
			whole = whole && pv.serving() && pv.Gen == o.Gen && !nv.Held
		})
		if !whole {
			continue
		}
		out = append(out, Offer{Range: o.Range, Gen: o.Gen, Peer: o.Peer, Deadline: time.Unix(0, n+int64(c.cfg.ExportTimeout))})
		c.mig.migrated = append(c.mig.migrated, o.Range)
		c.mig.stats.Offered++
	}
	return out
}

// withoutOffers returns the revoked ranges less the offered ones.
func withoutOffers(revoked []ring.Range, offers []Offer) []ring.Range {
	if len(offers) == 0 {
		return revoked
	}
	t := ring.NewTable(false)
	for _, r := range revoked {
		t.Set(r, true)
	}
	for _, o := range offers {
		t.Set(o.Range, false)
	}
	t.Compact()
	var out []ring.Range
	t.Each(func(r ring.Range, v bool) {
		if v {
			out = appendRange(out, r)
		}
	})
	return closeRanges(out)
}

// Imported ends an import of r under gen: with ok, the range is served
// from now on (Output.Granted); without, it is dropped and the next
// request, sent now, releases it, so that the manager regrants it with a
// loss notification. An import that is no longer in flight (its deadline
// passed, or the range was lost meanwhile) is ignored.
func (c *Core) Imported(r ring.Range, gen lease.Gen, ok bool, now time.Time) Output {
	k := slices.IndexFunc(c.mig.imports, func(im Import) bool { return im.Range == r && im.Gen == gen })
	if k < 0 || !c.started {
		return Output{}
	}
	c.mig.imports = slices.Delete(c.mig.imports, k, k+1)
	n := now.UnixNano()
	if !ok {
		c.mig.stats.ImportsFailed++
		if c.dropImport(r, gen, n) {
			return Output{Send: c.send(now)}
		}
		return Output{}
	}
	c.mig.stats.Imported++
	if c.expiry <= n {
		return Output{}
	}
	next := c.held.Clone()
	var granted []ring.Range
	next.UpdateAll([]ring.Range{r}, func(_ int, a ring.Range, v slot) slot {
		if v.Held && v.Importing && v.Gen == gen {
			v.Importing = false
			granted = appendRange(granted, a)
		}
		return v
	})
	if len(granted) == 0 {
		return Output{}
	}
	next.Compact()
	c.install(next, c.expiry)
	return Output{Granted: closeRanges(granted)}
}

// dropImport drops what is held of r under gen and still importing; it
// reports whether anything was.
func (c *Core) dropImport(r ring.Range, gen lease.Gen, n int64) bool {
	if c.expiry <= n {
		return false
	}
	next := c.held.Clone()
	dropped := false
	next.UpdateAll([]ring.Range{r}, func(_ int, _ ring.Range, v slot) slot {
		if v.Held && v.Importing && v.Gen == gen {
			dropped = true
			return slot{}
		}
		return v
	})
	if !dropped {
		return false
	}
	next.Compact()
	c.install(next, c.expiry)
	return true
}

// failDue gives up the imports whose deadline passed; it reports whether
// the held set changed (a request must go out).
func (m *migState) failDue(c *Core, n int64) bool {
	changed := false
	m.imports = slices.DeleteFunc(m.imports, func(im Import) bool {
		if im.Deadline.UnixNano() > n {
			return false
		}
		m.stats.ImportsTimedOut++
		changed = c.dropImport(im.Range, im.Gen, n) || changed
		return true
	})
	return changed
}

// next is the earliest import deadline.
func (m *migState) next() (int64, bool) {
	if len(m.imports) == 0 {
		return 0, false
	}
	d := m.imports[0].Deadline.UnixNano()
	for _, im := range m.imports[1:] {
		d = min(d, im.Deadline.UnixNano())
	}
	return d, true
}

// Handover asks the manager to move every range this owner holds to the
// others with its state (lease.LeaseRequest.Handover), and returns the
// request to send. The recalls come back as migration orders; once
// nothing is held (or the shell gives up waiting), Leave ends the
// incarnation as usual. Without a MigrationAddr it does nothing.
func (c *Core) Handover(now time.Time) Output {
	if !c.started || c.cfg.MigrationAddr == "" {
		return Output{}
	}
	c.mig.handover = true
	return Output{Send: c.send(now)}
}
