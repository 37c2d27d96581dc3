package manager

import (
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// State migration on clean handoffs (Centrifuge §2.1, PRS §4.5).
//
// A recall caused by a change of the desired ring while the old owner is
// alive (a drain, a handover before a clean leave, a rebalancing move, a
// new owner joining) is a clean handoff. When both owners serve
// MigrationService (lease.LeaseRequest.MigrationAddr), the recall names the
// new owner (arc.to; LeaseResponse.MigrateOut). The old owner stops serving
// the range, as on any recall, and releases it listing it as Migrated:
// only a range both recalled as a migration and released as migrated is
// freed clean, remembering its exporter (arc.src) and the generation whose
// state it carries (arc.from). Granted in the same step to the named new
// owner, it goes out as an import (LeaseResponse.MigrateIn): the new owner
// fetches the state from the old one and serves only once it has it. The
// lookups' view marks the new generation MigratedFrom the old one, so
// lookups raise no loss notification for it.
//
// Everything else stays a plain handoff with a loss notification: a
// release not listed as migrated, a recall that expires (a crash), an arc
// that is granted to someone other than the named owner or under a newer
// generation (it sat free for a step), an owner without a MigrationAddr.
// A new owner whose import fails or times out releases the range plainly,
// and the manager regrants it under a new generation that is not
// MigratedFrom anything, which lookups notify. None of this changes who
// may hold what when: the grant still follows the release, so there are
// never two owners.

// migrationRequest records what a request says about migration: where
// the owner serves MigrationService, and a handover (a drain it asks for).
func (n *namespace) migrationRequest(s *session, req lease.LeaseRequest) {
	if s.migAddr != req.MigrationAddr {
		s.migAddr = req.MigrationAddr
		s.version++ // orders naming it are rebuilt
		n.touchMigrationPeers()
	}
	if req.Handover && !s.draining && !req.Leaving {
		s.draining = true
		n.membersChanged = true
		n.ownerChanged(s.name)
	}
}

// touchMigrationPeers makes every session's next message rebuild its
// migration orders, since a peer's MigrationService address changed. It
// runs only when an address changes, which is once per session.
func (n *namespace) touchMigrationPeers() {
	for _, o := range n.sessions {
		if len(o.out)+len(o.in) > 0 {
			o.version++
		}
	}
}

// migrationTarget is the owner to name in a recall from holder when the
// desired owner is want, or "" for a plain recall: both must be live
// sessions that serve MigrationService, and want must be grantable.
func (n *namespace) migrationTarget(holder, want string) string {
	if n.m.cfg.DisableMigration || want == "" {
		return ""
	}
	h, w := n.sessions[holder], n.sessions[want]
	if h == nil || w == nil || h.migAddr == "" || w.migAddr == "" || w.waiting {
		return ""
	}
	return want
}

// released is the free arc that a release of a makes: clean, carrying its
// state's origin, when a was recalled as a migration and the owner listed
// it as migrated; plain otherwise.
func (n *namespace) released(a arc, migrated bool) arc {
	f := n.free(false)
	if migrated && a.st == Recalling && a.to != "" && !a.orphan {
		f.clean, f.to, f.src, f.from = true, a.to, a.holder, a.gen
		n.m.stats.MigrationsReleased++
	}
	return f
}

// keepImport reports whether an arc that s's request omits stays granted
// to s rather than being released: an import s has not confirmed yet. A
// request that omits a grant it never listed comes from an owner that
// dropped the response carrying it as racing (the request acknowledges
// that response all the same); freeing the arc would regrant it under a
// new generation that continues nothing, a loss notification for a
// migration that has not even started. Keeping it is safe: s never held
// it, nobody else may, and the grant is sent again. An owner that took an
// import lists it (confirming it) before it can fail it, so a failed
// import is still released; a draining owner releases everything.
func (n *namespace) keepImport(s *session, a arc) bool {
	return a.st == Granted && !a.confirmed && a.clean && a.src != "" && !s.draining
}

// grantArc is the arc granted to want under g, from the free arc a: an
// import when a was released clean for want in this very step (g is the
// generation it was freed under), a plain grant otherwise.
func (n *namespace) grantArc(a arc, want string, g lease.Gen) arc {
	if a.clean && a.to == want && g == a.gen && a.src != "" {
		if src := n.sessions[a.src]; src != nil && src.migAddr != "" {
			n.m.stats.MigrationsGranted++
			return arc{holder: want, gen: g, st: Granted, clean: true, from: a.from, src: a.src, srcAddr: src.migAddr}
		}
	}
	if a.clean {
		n.m.stats.MigrationsFallenBack++
	}
	return arc{holder: want, gen: g, st: Granted}
}

// migrationOrder adds arc i of s to s's migration orders out and in, if it
// is one: a Recalling arc recalled as a migration (export to the new
// owner) or a granted, not yet confirmed import (fetch from the old
// owner). Called for s's arcs in ring order (arcsOf), adjacent ranges with
// the same peer and generation merge; closeMigrations finishes the lists.
// message walks s's arcs for it only when s's index marks one that may
// be named (mineArc.mig); its leases come from the index.
func (n *namespace) migrationOrder(i int, out, in []lease.Migration) ([]lease.Migration, []lease.Migration) {
	a := n.table.Value(i)
	switch {
	case a.st == Recalling && a.to != "" && !a.orphan:
		if p := n.sessions[a.to]; p != nil && p.migAddr != "" {
			r, _ := n.table.At(i)
			out = appendMigration(out, lease.Migration{Range: r, Gen: a.gen, Peer: a.to, PeerAddr: p.migAddr})
		}
	case a.st == Granted && !a.confirmed && a.clean && a.src != "":
		// Always an order, even once src's session is gone: without one
		// the holder would serve, at once and without the state, a
		// range lookups see as migrated.
		addr := a.srcAddr
		if p := n.sessions[a.src]; p != nil && p.migAddr != "" {
			addr = p.migAddr
		}
		r, _ := n.table.At(i)
		in = appendMigration(in, lease.Migration{Range: r, Gen: a.gen, Peer: a.src, PeerAddr: addr})
	}
	return out, in
}

func appendMigration(ms []lease.Migration, m lease.Migration) []lease.Migration {
	if k := len(ms) - 1; k >= 0 {
		if p := ms[k]; p.Peer == m.Peer && p.PeerAddr == m.PeerAddr && p.Gen == m.Gen && p.Range.End == m.Range.Start {
			ms[k].Range.End = m.Range.End
			return ms
		}
	}
	return append(ms, m)
}

// closeMigrations merges the last order into the first where they meet
// across zero, as canonLeases does.
func closeMigrations(ms []lease.Migration) []lease.Migration {
	if k := len(ms) - 1; k > 0 {
		if p, f := ms[k], ms[0]; p.Peer == f.Peer && p.PeerAddr == f.PeerAddr && p.Gen == f.Gen && p.Range.End == f.Range.Start {
			ms[0].Range.Start = p.Range.Start
			ms = ms[:k]
		}
	}
	if len(ms) == 1 && ms[0].Range.Start == ms[0].Range.End {
		ms[0].Range = ring.Full()
	}
	return ms
}
