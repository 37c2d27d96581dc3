package manager

import (
	"fmt"
	"slices"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Verify checks the lease core's internal invariants against a full pass
// over every table: that the lookups' view is the projection of the lease
// table, that each session's index lists exactly its arcs, that every held
// arc will expire, and that each cached message is current. The core keeps
// these incrementally, touching only what changed, so a slip would go
// unseen until a lookup or an owner diverged; the simulator and the tests
// call Verify after every event. It costs O(table size × sessions).
func (m *Manager) Verify() error {
	for _, name := range m.sortedNames() {
		if err := m.ns[name].verify(); err != nil {
			return fmt.Errorf("manager: namespace %q: %w", name, err)
		}
	}
	return nil
}

func (n *namespace) verify() error {
	// The view is the table's projection exactly, clean marks included
	// (restore marks both alike, durable.go).
	proj := ring.Map(n.table, n.projection)
	proj.Compact()
	view := n.view.Clone()
	view.Compact()
	if !ring.Equal(proj, view) {
		return fmt.Errorf("the lookups' view (%d arcs) is not the lease table's projection (%d arcs)", view.Len(), proj.Len())
	}
	// Its neighbours are merged now and then: it stays within its bound,
	// and the merged count it caches is the count.
	if n.view.Len() > 2*n.table.Len()+viewSlack {
		return fmt.Errorf("the lookups' view has %d arcs, over twice the table's %d and %d", n.view.Len(), n.table.Len(), viewSlack)
	}
	if n.viewArcs >= 0 && n.viewArcs != view.Len() {
		return fmt.Errorf("the lookups' view would merge into %d arcs, counted %d", view.Len(), n.viewArcs)
	}
	waiting, indexed := 0, 0
	for addr, names := range n.byAddr {
		for _, name := range names {
			if s := n.sessions[name]; s == nil || s.addr != addr {
				return fmt.Errorf("the address index lists %q at %s, which is not its session's address", name, addr)
			}
		}
		indexed += len(names)
	}
	if indexed != len(n.sessions) {
		return fmt.Errorf("the address index lists %d sessions, the namespace has %d", indexed, len(n.sessions))
	}
	for _, name := range sortedKeys(n.sessions) {
		s := n.sessions[name]
		if s.waiting {
			waiting++
		}
		want := ring.NewTable(mineArc{})
		var sets []ring.Assignment[mineArc]
		// A grant not yet sent (the message waits for s's answer to the
		// last one, deferMessage) is not held by s: its expiry is
		// scheduled when the message goes out, which must be pending.
		granted, unsent := false, false
		n.table.Each(func(r ring.Range, a arc) {
			if a.holder == name && a.st != Free && !a.orphan {
				sets = append(sets, ring.Assignment[mineArc]{Range: r, Value: mineOf(a)})
				if s.unsent(a) {
					unsent = true
				} else {
					granted = granted || a.st == Granted
				}
			}
		})
		want.SetAll(sets)
		want.Compact()
		s.flush()
		mine := s.mine.Clone()
		mine.Compact()
		if !ring.Equal(want, mine) {
			return fmt.Errorf("session %q's index does not match its arcs", name)
		}
		if granted && !s.untilQueued {
			return fmt.Errorf("session %q holds Granted arcs with no expiry scheduled", name)
		}
		if unsent && !n.dirty[name] && !n.held[name] {
			return fmt.Errorf("session %q has grants never sent and no message pending", name)
		}
		if s.msgVersion == s.version+1 {
			var renew, grant []lease.Lease
			recalled, cached := ring.NewTable(false), ring.NewTable(false)
			n.table.Each(func(r ring.Range, a arc) {
				if a.holder == name && a.st == Recalling && !a.orphan {
					recalled.Set(r, true)
				}
				if a.holder != name || a.st != Granted || a.orphan {
					return
				}
				if a.confirmed {
					renew = append(renew, lease.Lease{Range: r, Gen: a.gen})
				} else {
					grant = append(grant, lease.Lease{Range: r, Gen: a.gen})
				}
			})
			if !slices.Equal(canonLeases(renew), s.renew) || !slices.Equal(canonLeases(grant), s.grant) {
				return fmt.Errorf("session %q's cached message is stale: renew %v grant %v, cached %v %v",
					name, canonLeases(renew), canonLeases(grant), s.renew, s.grant)
			}
			for _, r := range s.recalls {
				cached.Set(r, true)
			}
			recalled.Compact()
			cached.Compact()
			if !ring.Equal(recalled, cached) {
				return fmt.Errorf("session %q's cached recalls %v are not its Recalling arcs", name, s.recalls)
			}
		}
	}
	if waiting != n.waiting {
		return fmt.Errorf("%d sessions waiting, counted %d", waiting, n.waiting)
	}
	var bad error
	n.table.Each(func(r ring.Range, a arc) {
		if bad != nil || a.st == Free {
			return
		}
		switch s := n.sessions[a.holder]; {
		case a.orphan || a.st == Recalling:
			if a.expiry == 0 {
				bad = fmt.Errorf("arc %v (%s of %q) has no expiry", r, a.st, a.holder)
			}
		case s == nil:
			bad = fmt.Errorf("arc %v is Granted to %q, which has no session", r, a.holder)
		case a.expiry != 0:
			bad = fmt.Errorf("Granted arc %v has its own expiry", r)
		}
	})
	return bad
}
