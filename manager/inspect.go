package manager

import (
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// ArcInfo is one arc of the lease table, for the admin API and tests.
type ArcInfo struct {
	Range     ring.Range
	Owner     string
	Gen       lease.Gen
	State     State
	Confirmed bool
	// Orphan: held by an incarnation that a newer one under the same name
	// replaced; it is granted again only once it expires.
	Orphan bool
	Expiry time.Time // manager-side hold end; zero when free
}

// Leases returns a namespace's lease table in ring order.
func (m *Manager) Leases(ns string) ([]ArcInfo, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	out := make([]ArcInfo, 0, n.table.Len())
	n.table.Each(func(r ring.Range, a arc) {
		ai := ArcInfo{Range: r, Owner: a.holder, Gen: a.gen, State: a.st, Confirmed: a.confirmed, Orphan: a.orphan}
		switch s := n.holderOf(a); {
		case a.st == Granted && s != nil:
			ai.Expiry = time.Unix(0, s.until)
		case a.st != Free:
			ai.Expiry = time.Unix(0, a.expiry)
		}
		out = append(out, ai)
	})
	return out, nil
}

// DesiredRing returns a copy of the ring the namespace is moving toward:
// the namespace changes its own in place. O(R).
func (m *Manager) DesiredRing(ns string) (*ring.Ring, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	return n.desired.Clone(), nil
}

// OwnerInfo describes an owner session.
type OwnerInfo struct {
	Name, Addr string
	Nonce      uint64
	LastHeard  time.Time
	Draining   bool
	Waiting    bool // replaced a live incarnation; granted nothing until its leases expire
	VNodes     int
}

// Owners lists a namespace's live sessions sorted by name.
func (m *Manager) Owners(ns string) ([]OwnerInfo, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return nil, err
	}
	v := map[string]int{}
	for _, o := range n.desired.Owners() {
		v[o.Name] = o.VNodes
	}
	out := make([]OwnerInfo, 0, len(n.sessions))
	for _, name := range sortedKeys(n.sessions) {
		s := n.sessions[name]
		out = append(out, OwnerInfo{Name: name, Addr: s.addr, Nonce: s.nonce, LastHeard: s.lastRecv, Draining: s.draining, Waiting: s.waiting, VNodes: v[name]})
	}
	return out, nil
}

// LSN is the namespace's last log sequence number.
func (m *Manager) LSN(ns string) (uint64, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return 0, err
	}
	return n.log.lsn, nil
}
