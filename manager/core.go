package manager

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/fuge-project/fuge/lease"
)

// Output is the work a call hands back to the shell, in the order it must be
// done (like etcd-io/raft's Ready): first make Changes durable (commit them),
// then deliver them to lookups, then send the Send messages. An ownership
// change is never told to an owner before it is committed.
type Output struct {
	Commits []Commit
	Send    []lease.LeaseResponse
	// Events are the step's recalls, cancelled recalls and expiries, for
	// the event log (GET /v1/events): what only the core knows. They are
	// informational: nothing waits on them, and Empty ignores them.
	Events []CoreEvent
}

func (o *Output) merge(p Output) {
	o.Commits = append(o.Commits, p.Commits...)
	o.Send = append(o.Send, p.Send...)
	o.Events = append(o.Events, p.Events...)
}

// Empty reports whether there is nothing to do.
func (o Output) Empty() bool { return len(o.Commits) == 0 && len(o.Send) == 0 }

// Stats counts protocol events since start.
type Stats struct {
	Requests, Accepted, Opened              uint64
	DroppedStale, DroppedRacing, DroppedOld uint64
	Grants, Recalls, Releases, Expiries     uint64
	Refused, SessionExpiries, RaceResends   uint64
	Leaves                                  uint64 // clean leaves accepted (lease.LeaseRequest.Leaving)
	AcceptedRacingLeaves                    uint64 // leaving requests that raced a message to the owner, taken as leaves all the same
	FastConfirms                            uint64 // requests that confirmed the latest message's grants without a walk of the owner's arcs (confirmsMessage)
	FastReleases                            uint64 // requests that released what the latest message recalled without a walk of the owner's arcs (releasesMessage)
	RefusedAddr                             uint64 // sessions refused: their address was another live owner's
	RefusedOversize                         uint64 // requests listing more ranges than MaxRangesPerRing allows
	RefusedFull                             uint64 // new owner names refused: ErrNamespaceFull
	LookupSnapshots, LookupDeltas           uint64
	// Migrations (migrate.go): ranges released as migrated after a
	// migration recall, granted to their new owner as imports, and freed
	// clean but granted plainly (the named owner was gone or the arc sat
	// free), counted per arc.
	MigrationsReleased, MigrationsGranted, MigrationsFallenBack uint64
}

// Manager is the pure lease core: namespaces, owner sessions, the lease
// table, generations and the change log. It is not safe for concurrent use;
// its shell serializes calls. It never reads a clock: every call takes now.
type Manager struct {
	cfg   Config
	rnd   *rand.Rand
	ns    map[string]*namespace
	stats Stats
}

// New returns a manager with no namespaces.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(cfg.Nonce, 0x6675676521))
	}
	return &Manager{cfg: cfg, rnd: rnd, ns: map[string]*namespace{}}, nil
}

// Nonce is this manager incarnation's nonce.
func (m *Manager) Nonce() uint64 { return m.cfg.Nonce }

// Stats returns the counters.
func (m *Manager) Stats() Stats { return m.stats }

// CreateNamespace adds a namespace with a free lease table.
func (m *Manager) CreateNamespace(nc NamespaceConfig, now time.Time) error {
	if err := nc.defaults(m.cfg); err != nil {
		return err
	}
	if _, ok := m.ns[nc.Name]; ok {
		return fmt.Errorf("%w: %q", ErrNamespaceExists, nc.Name)
	}
	m.ns[nc.Name] = newNamespace(m, nc, now)
	return nil
}

// DeleteNamespace removes a namespace. Owners and lookups of it get
// ErrUnknownNamespace from then on.
func (m *Manager) DeleteNamespace(name string) error {
	if _, ok := m.ns[name]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNamespace, name)
	}
	delete(m.ns, name)
	return nil
}

// Namespaces lists the namespaces sorted by name.
func (m *Manager) Namespaces() []NamespaceConfig {
	out := make([]NamespaceConfig, 0, len(m.ns))
	for _, n := range m.ns {
		out = append(out, n.cfg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (m *Manager) namespace(name string) (*namespace, error) {
	n, ok := m.ns[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, name)
	}
	return n, nil
}

// Request handles a LeaseRequest from an owner received at now. A leaving
// request (Leaving set, Held empty) takes the owner out of the ring and
// regrants its arcs in the same step; see lease.LeaseRequest.Leaving. A
// request from an incarnation that a newer one under the same name has
// replaced is refused with ErrIncarnationReplaced and changes nothing.
func (m *Manager) Request(req lease.LeaseRequest, now time.Time) (Output, error) {
	n, err := m.namespace(req.Namespace)
	if err != nil {
		return Output{}, err
	}
	if req.Owner == "" || req.Nonce == 0 || req.Seq == 0 {
		return Output{}, fmt.Errorf("%w: owner name, nonce and seq are required", ErrBadRequest)
	}
	if req.Leaving && len(req.Held) > 0 {
		return Output{}, fmt.Errorf("%w: a leaving owner holds nothing", ErrBadRequest)
	}
	if err := checkLeases(req.Held); err != nil {
		return Output{}, err
	}
	if req.Load != nil {
		if err := req.Load.Validate(); err != nil {
			return Output{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	return n.request(req, now)
}

// checkLeases rejects held sets that overlap: a well-behaved owner's never do.
// Sorted by end (an owner sends them so; others are sorted, in a copy), the
// leases are disjoint when each starts at or after the previous one's end,
// and, when the first one wraps past zero, the last ends at or before the
// first one's start. O(n) for sorted input, O(n log n) otherwise; it
// allocates only to sort.
func checkLeases(ls []lease.Lease) error {
	if len(ls) <= 1 {
		return nil
	}
	ls = byEnd(ls)
	for i, l := range ls {
		wraps := l.Range.Start >= l.Range.End // the whole circle, or across zero
		switch {
		case wraps && i > 0:
			return fmt.Errorf("%w: held leases overlap at %v", ErrBadRequest, l.Range)
		case i > 0 && l.Range.Start < ls[i-1].Range.End:
			return fmt.Errorf("%w: held leases overlap at %v", ErrBadRequest, l.Range)
		}
	}
	first, last := ls[0].Range, ls[len(ls)-1].Range
	if first.Start >= first.End && last.End > first.Start {
		return fmt.Errorf("%w: held leases overlap at %v", ErrBadRequest, first)
	}
	return nil
}

// Drain takes an owner out of the desired ring: its arcs are recalled and
// granted to the others; its session stays open.
func (m *Manager) Drain(ns, owner string, now time.Time) (Output, error) {
	n, err := m.namespace(ns)
	if err != nil {
		return Output{}, err
	}
	s, ok := n.sessions[owner]
	if !ok {
		return Output{}, fmt.Errorf("%w: %q in %q", ErrUnknownOwner, owner, ns)
	}
	s.draining = true
	n.membersChanged = true
	n.ownerChanged(owner)
	return n.step(now), nil
}

// Tick runs timers: lease and session expiry, race re-sends, log truncation.
func (m *Manager) Tick(now time.Time) Output {
	var out Output
	for _, name := range m.sortedNames() {
		out.merge(m.ns[name].step(now))
	}
	return out
}

// NextDeadline is the earliest time at which Tick has work; zero if none.
func (m *Manager) NextDeadline() time.Time {
	var d time.Time
	for _, n := range m.ns {
		if t := n.nextDeadline(); !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

func (m *Manager) sortedNames() []string {
	names := make([]string, 0, len(m.ns))
	for k := range m.ns {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) backoff() time.Duration {
	lo, hi := m.cfg.RaceBackoffMin, m.cfg.RaceBackoffMax
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(m.rnd.Int64N(int64(hi-lo)+1))
}
