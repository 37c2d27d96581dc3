package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
)

const namespace = "sim"

// timer arms at most one pending tick per node: a newer arm supersedes.
type timer struct{ gen uint64 }

func (t *timer) arm(s *scheduler, at time.Duration, fn func()) {
	t.gen++
	g := t.gen
	s.at(at, func() {
		if t.gen == g {
			fn()
		}
	})
}

// managerNode is the single manager, with its lease core.
type managerNode struct {
	w     *world
	core  *manager.Manager
	cfg   manager.Config
	clk   clock
	timer timer
	// state is the replicated state, built only from the commits: what a
	// new leader restores from.
	state     manager.NamespaceState
	failovers int
}

// failover replaces the leader: a new lease core restored from the
// replicated state under a new nonce, as a new raft leader would.
func (m *managerNode) failover() {
	m.w.addLeaderStats()
	m.cfg.Nonce = m.w.s.rnd.Uint64() | 1
	core, err := manager.Restore(m.cfg, []manager.NamespaceState{m.state}, m.now())
	if err != nil {
		m.w.violate("restore: %v", err)
		return
	}
	m.core = core
	m.failovers++
	before := len(m.w.check.found)
	out := m.core.Tick(m.now())
	for _, c := range out.Commits {
		if len(c.Changes) > 0 {
			m.w.violate("failover changed the lease table at once: %+v", c.Changes)
		}
	}
	_ = before
	m.handle(out)
}

func (m *managerNode) now() time.Time { return m.clk.local(m.w.s.now) }

func (m *managerNode) onRequest(req lease.LeaseRequest) {
	out, err := m.core.Request(req, m.now())
	if errors.Is(err, manager.ErrIncarnationReplaced) {
		return // a late message from an ended incarnation, or a twin's
	}
	if err != nil {
		m.w.violate("manager refused a well-formed request: %v", err)
		return
	}
	m.handle(out)
}

func (m *managerNode) onLookup(req lease.LookupRequest, from *lookupNode) {
	resp, err := m.core.Lookup(req, m.now())
	if err != nil {
		m.w.violate("manager refused a lookup: %v", err)
		return
	}
	m.w.net.send(from.name, func() { from.onResponse(resp) })
	m.arm()
}

func (m *managerNode) tick() { m.handle(m.core.Tick(m.now())) }

// handle commits changes (instantly: one node, no log), pushes them to every
// lookup, then sends the owner messages: the order the core demands.
func (m *managerNode) handle(out manager.Output) {
	for _, nc := range out.Commits {
		if err := m.state.Apply(nc, m.cfg.LogRetention); err != nil {
			m.w.violate("replicated state: %v", err)
		}
		if len(nc.Changes) == 0 {
			continue
		}
		m.w.check.onChanges(nc.Changes)
		push := nc.Push(m.core.Nonce())
		for _, l := range m.w.lookups {
			l := l
			m.w.net.send(l.name, func() { l.onResponse(push) })
		}
	}
	for _, msg := range out.Send {
		o := m.w.owners[msg.Owner]
		msg := msg
		m.w.net.send(msg.Owner, func() { o.deliver(msg) })
	}
	m.arm()
}

func (m *managerNode) arm() {
	if d := m.core.NextDeadline(); !d.IsZero() {
		m.timer.arm(m.w.s, m.clk.trueAt(d), m.tick)
	}
}

// ownerNode is one owner name: a sequence of incarnations of the Owner core.
type ownerNode struct {
	w           *world
	name        string
	clk         clock
	core        *ownerguard.Core // nil while crashed or after a leave
	incarnation uint64
	// ghost is what an owner that left still believes it holds: always nil,
	// except under the LeaveKeepsBelief negative control.
	ghost       *ownerguard.View
	pausedUntil time.Duration // true time; deliveries and ticks wait
	gone        bool          // left for good
	draining    bool          // drained: it leaves soon
	timer       timer
	mig         ownerMig // the running process's migration state (migrate.go)
	// twin is an earlier incarnation that is still running, cut off from
	// the manager, while a newer one under the same name has started (a
	// restarted pod whose old process is only partitioned). It goes on
	// renewing into the void and believing what it held until its own
	// leases run out; the manager must not grant those ranges to anyone,
	// its own successor included, before its hold has passed.
	twin *twinNode
}

// twinNode is the still-running earlier incarnation of an owner name.
type twinNode struct {
	core        *ownerguard.Core
	incarnation uint64 // the ownerNode incarnation it was
	net         string // its network name, partitioned from the manager
	timer       timer
}

func (o *ownerNode) now() time.Time { return o.clk.local(o.w.s.now) }

func (o *ownerNode) start() {
	o.incarnation++
	cfg := ownerguard.DefaultCoreConfig()
	cfg.Namespace, cfg.Name, cfg.Addr = namespace, o.name, o.name+":80"
	cfg.Incarnation = o.w.s.rnd.Uint64() | 1
	cfg.LeaseDuration = o.w.p.T
	cfg.RenewInterval = o.w.p.T / 4
	cfg.RaceBackoffMin, cfg.RaceBackoffMax = o.w.p.T/600, o.w.p.T/60
	cfg.Rand = rand.New(rand.NewPCG(o.w.s.rnd.Uint64(), 0))
	cfg.DisableRaceFilter = o.w.p.DisableRaceFilter
	if o.w.p.Migration {
		cfg.MigrationAddr = o.name + ":90"
	}
	core, err := ownerguard.NewCore(cfg)
	if err != nil {
		panic(fmt.Sprintf("owner config: %v", err))
	}
	o.core = core
	o.resetMig()
	o.handle(core.Start(o.now()))
}

func (o *ownerNode) crash() {
	o.core = nil
	o.resetMig()
	o.timer.gen++ // cancel the pending tick
}

// split starts a second incarnation under o's name while the running one
// goes on, cut off from the manager for d (then its messages reach the
// manager again, which must treat them as an ended incarnation's). The old
// core keeps its own clock, timers and beliefs.
func (o *ownerNode) split(d time.Duration) {
	if o.core == nil || o.twin != nil {
		return
	}
	tw := &twinNode{core: o.core, incarnation: o.incarnation, net: fmt.Sprintf("%s/%d", o.name, o.incarnation)}
	o.twin = tw
	o.timer.gen++ // the old core's timer moves to the twin
	o.w.net.partitioned[tw.net] = true
	o.w.s.after(d, func() { delete(o.w.net.partitioned, tw.net) })
	o.core = nil
	o.twinHandle(tw, ownerguard.Output{})
	o.start()
}

// twinTick runs the twin's timers: it expires its leases and keeps sending
// requests, which the partition drops, or, once healed, the manager refuses.
func (o *ownerNode) twinTick(tw *twinNode) {
	if o.twin != tw {
		return
	}
	o.twinHandle(tw, tw.core.Tick(o.now()))
}

func (o *ownerNode) twinHandle(tw *twinNode, out ownerguard.Output) {
	if len(out.Granted) > 0 {
		o.w.check.onGrant(o)
	}
	if out.Send != nil {
		req := *out.Send
		m := o.w.mgr
		o.w.net.send(tw.net, func() { m.onRequest(req) })
	}
	if d := tw.core.NextDeadline(); !d.IsZero() {
		tw.timer.arm(o.w.s, o.clk.trueAt(d), func() { o.twinTick(tw) })
	}
}

// leave closes the running incarnation cleanly, as Owner.Close does: the
// core stops believing (Core.Leave), then its last request, holding nothing
// and leaving, goes to the manager over the same faulty network. A paused
// process closes when it runs again; if by then faults have stopped and the
// owner was to restart, it just goes on running (endFaults has already
// restarted the owners that were down).
func (o *ownerNode) leave() {
	if o.core == nil {
		return
	}
	if o.w.s.now < o.pausedUntil {
		core := o.core
		o.w.s.at(o.pausedUntil, func() {
			if o.core == core && (o.w.faults || o.gone) {
				o.leave()
			}
		})
		return
	}
	var belief *ownerguard.View
	if o.w.p.LeaveKeepsBelief {
		belief = o.core.View() // the planted bug: tell the manager, keep believing
	}
	o.handle(o.core.Leave(o.now()))
	o.core, o.ghost = nil, belief
	o.timer.gen++ // nothing is due: a core that left has no deadline
}

// deliver hands a manager message to whatever incarnation runs now, or to
// a twin it is addressed to (a twin whose session the manager took up again
// after every other incarnation of the name had expired).
func (o *ownerNode) deliver(msg lease.LeaseResponse) {
	if tw := o.twin; tw != nil && msg.PeerNonce == tw.core.Config().Incarnation {
		o.twinHandle(tw, tw.core.Step(msg, o.now()))
		return
	}
	if o.core == nil {
		return
	}
	if o.w.s.now < o.pausedUntil {
		o.w.s.at(o.pausedUntil, func() { o.deliver(msg) })
		return
	}
	o.handle(o.core.Step(msg, o.now()))
}

func (o *ownerNode) tick() {
	if o.core == nil {
		return
	}
	if o.w.s.now < o.pausedUntil {
		o.w.s.at(o.pausedUntil, o.tick)
		return
	}
	o.handle(o.core.Tick(o.now()))
}

func (o *ownerNode) handle(out ownerguard.Output) {
	if len(out.Granted) > 0 {
		o.w.check.onGrant(o)
		o.w.check.checkServes(o, out.Granted)
	}
	o.migrate(out)
	if out.Send != nil {
		req := *out.Send
		if o.w.faults && !req.Leaving && o.core != nil {
			// The owner reports the load of what it holds, as ownerguard's
			// Owner does on every request; only during the fault phase, so
			// that balancing stops once faults do.
			req.Load = o.w.load.report(o.core.View().Held(o.now()))
		}
		m := o.w.mgr
		o.w.net.send(o.name, func() { m.onRequest(req) })
	}
	if o.core == nil {
		return
	}
	if d := o.core.NextDeadline(); !d.IsZero() {
		o.timer.arm(o.w.s, o.clk.trueAt(d), o.tick)
	}
}

// belief is what one process believes it holds, labelled by incarnation:
// single copy is about processes, not names.
type belief struct {
	who    string
	leases []lease.Lease
}

// beliefs is what this owner's processes believe they hold at the current
// true instant: the running incarnation, a still-running earlier one (twin)
// and, under a negative control, the belief a left incarnation kept. A
// paused owner still believes: were it to serve a request now, it would
// check its leases against its clock.
func (o *ownerNode) beliefs() []belief {
	var bs []belief
	now := o.now()
	if o.ghost != nil {
		bs = append(bs, belief{fmt.Sprintf("%s#%d(left)", o.name, o.incarnation), o.ghost.Held(now)})
	}
	if o.twin != nil {
		bs = append(bs, belief{fmt.Sprintf("%s#%d", o.name, o.twin.incarnation), o.twin.core.Held(now)})
	}
	if o.core != nil {
		bs = append(bs, belief{fmt.Sprintf("%s#%d", o.name, o.incarnation), o.core.Held(now)})
	}
	return bs
}

// lookupNode is a front end with the Lookup core.
type lookupNode struct {
	w     *world
	name  string
	clk   clock
	core  *lb.Core
	timer timer
}

func (l *lookupNode) now() time.Time { return l.clk.local(l.w.s.now) }

func (l *lookupNode) start() {
	cfg := lb.DefaultCoreConfig()
	cfg.Namespace, cfg.Name = namespace, l.name
	cfg.SyncInterval = l.w.p.SyncInterval
	cfg.StalenessBound = l.w.p.Staleness
	core, err := lb.NewCore(cfg)
	if err != nil {
		panic(fmt.Sprintf("lookup config: %v", err))
	}
	l.core = core
	l.handle(core.Start(l.now()))
}

func (l *lookupNode) onResponse(resp lease.LookupResponse) {
	applied := l.core.Stats().Applied
	out := l.core.Step(resp, l.now())
	if l.core.Stats().Applied != applied {
		l.w.check.onSynced(l)
	}
	l.handle(out)
}

func (l *lookupNode) tick() { l.handle(l.core.Tick(l.now())) }

func (l *lookupNode) handle(out lb.Output) {
	if out.LossAll || len(out.Loss) > 0 {
		if l.w.p.TruncateLoss && len(out.Loss) > 1 {
			out.Loss = out.Loss[:1]
		}
		l.w.check.onLoss(l, out)
	}
	if out.Send != nil {
		req := *out.Send
		m := l.w.mgr
		l.w.net.send(l.name, func() { m.onLookup(req, l) })
	}
	if d := l.core.NextDeadline(); !d.IsZero() {
		l.timer.arm(l.w.s, l.clk.trueAt(d), l.tick)
	}
}
