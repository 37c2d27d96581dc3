package manager

import (
	"cmp"
	"slices"
	"time"
)

// Proxy registrations and views (fleet-wide rate limits, package
// ratelimit). A proxy registers in a namespace and renews every lease/4;
// the leader's viewCore decides when the namespace's proxies need a new
// view, and the leader commits it through raft before anyone hears of it.

// Defaults of the proxy registrations.
const (
	// DefaultProxyLease is a proxy's registration T: it renews every T/4,
	// considers itself registered for T from the renewal it sent, and the
	// manager holds the registration for T·65/60 from the renewal it
	// received.
	DefaultProxyLease = 4 * time.Second
	// DefaultViewInterval damps view changes: at most one per interval.
	DefaultViewInterval = 3 * time.Second
	// maxProxiesPerNamespace bounds the registrations of one namespace.
	maxProxiesPerNamespace = 10_000
	// ghostLeases is how many lease times an expired registration is still
	// counted in N_registered: a proxy cut off from the managers admits its
	// panic share L/N_registered with the N it last heard, so the manager
	// must not shrink N the moment it stops hearing from it (after a pause
	// of the managers every registration expires at once, and a view with
	// N = 1 would give its first member all of L while the others admit
	// theirs).
	ghostLeases = 8
)

// ViewMember is one member of a proxy view.
type ViewMember struct {
	Name       string `json:"name"`
	GossipAddr string `json:"gossip_addr"`
}

// ProxyView is a committed view of a namespace's proxies. ID is the raft
// index of the entry that committed it.
type ProxyView struct {
	Namespace  string       `json:"namespace"`
	ID         uint64       `json:"id"`
	Members    []ViewMember `json:"members"`
	Registered int          `json:"registered"`
}

// proxyReg is one registration as the leader holds it.
type proxyReg struct {
	name, addr  string
	incarnation uint64
	renewed     time.Time // last renewal received
}

// viewCore is one namespace's registrations and its view logic: a pure
// state machine of (registrations, reports, now), as the lease core is.
type viewCore struct {
	lease, interval time.Duration
	regs            map[string]*proxyReg
	ghosts          map[string]time.Time // expired registrations, by when they expired
	current         ProxyView            // the last view committed
	lastChange      time.Time            // when the last view was proposed
	lastTick        time.Time
	pending         bool // a proposal is being committed
}

func newViewCore(lease, interval time.Duration) *viewCore {
	return &viewCore{lease: lease, interval: interval, regs: map[string]*proxyReg{}, ghosts: map[string]time.Time{}}
}

// hold is how long the manager keeps a registration after a renewal.
func (c *viewCore) hold() time.Duration { return HoldDuration(c.lease) }

// suspect is how long without a renewal before a member is left out of the
// next view: two and a half renewal intervals.
func (c *viewCore) suspect() time.Duration { return c.lease * 5 / 8 }

// restore seeds the core from the committed view after a failover: every
// member counts as renewed now, as leases do (DESIGN.md), so a failover
// changes no view if the members come back within the suspect time.
func (c *viewCore) restore(v ProxyView, now time.Time) {
	c.current = v
	c.lastChange = now
	for _, m := range v.Members {
		c.regs[m.Name] = &proxyReg{name: m.Name, addr: m.GossipAddr, renewed: now}
	}
}

// register opens or refreshes name's registration; false when the
// namespace is full.
func (c *viewCore) register(name, addr string, incarnation uint64, now time.Time) bool {
	r := c.regs[name]
	if r == nil {
		if len(c.regs) >= maxProxiesPerNamespace {
			return false
		}
		r = &proxyReg{name: name}
		c.regs[name] = r
		delete(c.ghosts, name)
	}
	r.addr, r.incarnation, r.renewed = addr, incarnation, now
	return true
}

// renew refreshes name's registration; false if it has none (expired).
func (c *viewCore) renew(name string, now time.Time) bool {
	r := c.regs[name]
	if r == nil {
		return false
	}
	r.renewed = now
	return true
}

// report hears that from cannot reach the members broken in view id: a
// member that has missed a renewal is suspected at once (a stopped proxy
// is left out a little sooner than its renewals would show); one that
// renews on time stays, and the members reach it through the manager.
func (c *viewCore) report(id uint64, broken []string, now time.Time) {
	if id != c.current.ID {
		return
	}
	for _, b := range broken {
		if r := c.regs[b]; r != nil && now.Sub(r.renewed) > c.lease/4+c.lease/16 {
			r.renewed = now.Add(-c.suspect() - 1)
		}
	}
}

// registered counts the registrations held, and the expired ones still
// counted (ghostLeases).
func (c *viewCore) registered() int { return len(c.regs) + len(c.ghosts) }

// leave drops a registration whose proxy closed its session: it has
// stopped admitting, so it is not counted on.
func (c *viewCore) leave(name string) { delete(c.regs, name) }

// desired is the view the registrations call for: the members renewing on
// time, and every registration held or recently expired.
func (c *viewCore) desired(now time.Time) ProxyView {
	v := ProxyView{Namespace: c.current.Namespace, Registered: c.registered()}
	for _, r := range c.regs {
		if now.Sub(r.renewed) <= c.suspect() {
			v.Members = append(v.Members, ViewMember{Name: r.name, GossipAddr: r.addr})
		}
	}
	slices.SortFunc(v.Members, func(a, b ViewMember) int { return cmp.Compare(a.Name, b.Name) })
	return v
}

// tick expires registrations past their hold and returns the view to
// commit, if the registrations call for a different one and the last
// change is at least interval old.
func (c *viewCore) tick(now time.Time) (ProxyView, bool) {
	if !c.lastTick.IsZero() && now.Sub(c.lastTick) > c.hold() {
		// This manager did not run for longer than a hold (paused, or its
		// machine was): it cannot tell who stopped renewing, so it counts
		// every registration as renewed now, as a new leader does.
		for _, r := range c.regs {
			r.renewed = now
		}
	}
	c.lastTick = now
	for name, r := range c.regs {
		if now.Sub(r.renewed) > c.hold() {
			delete(c.regs, name)
			c.ghosts[name] = now
		}
	}
	for name, at := range c.ghosts {
		if now.Sub(at) > ghostLeases*c.lease {
			delete(c.ghosts, name)
		}
	}
	if c.pending || (c.current.ID != 0 && now.Sub(c.lastChange) < c.interval) {
		return ProxyView{}, false
	}
	d := c.desired(now)
	if len(d.Members) == 0 && c.current.ID == 0 {
		return ProxyView{}, false
	}
	if d.Registered == c.current.Registered && slices.Equal(d.Members, c.current.Members) {
		return ProxyView{}, false
	}
	c.pending = true
	c.lastChange = now
	return d, true
}

// committed records the outcome of a proposal: the view as committed, or
// ok false if the commit failed (it is proposed again on a later tick).
func (c *viewCore) committed(v ProxyView, ok bool) {
	c.pending = false
	if ok {
		c.current = v
	}
}
