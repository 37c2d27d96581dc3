package ratelimit

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// View is a membership view as the manager commits it.
type View struct {
	// ID grows with every view the manager commits (its raft index).
	ID uint64
	// Members are the names of the view's members, sorted; messages
	// address a member by its index here.
	Members []string
	// Registered is the number of proxies registered with the manager
	// when it committed the view (at least len(Members)): the view owns
	// len(Members)/Registered of every limit.
	Registered int
}

// Message is one gossip message: a push-sum push (cumulative sums on the
// link From→To in the robust variant, one epoch's parts in the plain one)
// or an acknowledgement of the highest Seq applied.
type Message struct {
	View     uint64
	From, To uint32
	Seq      uint64
	Ack      bool
	W        float64
	Keys     []string // "limit\x00value"
	S        []float64
}

// Stats are a Node's counters and state, for metrics.
type Stats struct {
	View       uint64
	InView     bool // a member of a current view
	Members    int
	Registered int
	Epochs     uint64
	Sent       uint64 // pushes sent, resends included
	Resent     uint64
	Received   uint64 // pushes applied
	Duplicates uint64 // pushes already applied (duplicated or reordered)
	Foreign    uint64 // messages of another view, or misaddressed, dropped
	GossipKeys int
}

// link is push-sum's state on one directed pair of members: what this node
// has sent to the peer in total (sig), and what it has applied from the
// peer in total (rho). Cumulative sums make a message idempotent: applying
// the newest one delivers everything the lost ones carried.
type link struct {
	seq, acked uint64 // last pushed to the peer, and the last it acked
	// unackedSince is the epoch of the oldest push the peer has not
	// acknowledged, 0 if it has acknowledged them all.
	unackedSince uint64
	sigW         float64
	sig          map[int32]float64
	inSeq        uint64 // last applied from the peer
	rhoW         float64
	rho          map[int32]float64
}

// Node is one proxy's limiters and its push-sum state: a pure core. The
// shell calls Tick every epoch and sends what it returns, hands every
// received message to Receive and sends its answer, and SetView/ClearView
// as the manager's views come and go. None of its methods may run
// concurrently with each other; Limiter.Allow may run alongside them all.
type Node struct {
	cfg      NodeConfig
	name     string
	limiters []*Limiter

	view       View
	hasView    bool
	self       int // index in view.Members, -1 if not a member
	registered int
	lastTick   int64

	keys  []string // push-sum keys: limit index "\x00" value
	gidx  map[string]int32
	local []*keyState // the local state behind keys[i], or nil
	s, x  []float64   // push-sum values; x is what this node injected
	w     float64
	links map[uint32]*link
	peers []uint32 // scratch
	perm  []int
	stats Stats
}

// NewNode returns a node named name (its name in views) with no limits and
// no view.
func NewNode(name string, cfg NodeConfig) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	n := &Node{cfg: cfg, name: name, self: -1, registered: 1}
	n.reset()
	return n, nil
}

// Config returns the node's configuration, with defaults.
func (n *Node) Config() NodeConfig { return n.cfg }

// SetLimits replaces the limiters. A limiter whose Limit is unchanged
// keeps its state.
func (n *Node) SetLimits(ls []*Limiter) {
	n.limiters = slices.Clone(ls)
	slices.SortFunc(n.limiters, func(a, b *Limiter) int { return cmp.Compare(a.cfg.Name, b.cfg.Name) })
	n.reset() // push-sum keys name limits by index
}

// Limiters returns the limiters, sorted by name.
func (n *Node) Limiters() []*Limiter { return n.limiters }

// SetView installs v if it is newer than the current view (or there is
// none), restarting push-sum. A view that does not list this node puts it
// in no view, with v.Registered as the panic divisor.
func (n *Node) SetView(v View) {
	if n.hasView && v.ID <= n.view.ID {
		return
	}
	n.view = View{ID: v.ID, Members: slices.Clone(v.Members), Registered: max(v.Registered, len(v.Members), 1)}
	n.registered = n.view.Registered
	n.hasView = true
	n.self = slices.Index(n.view.Members, n.name)
	n.reset()
}

// ClearView leaves the current view (the registration was lost): the
// limits fall to their OnNoView policy at the next Tick.
func (n *Node) ClearView() {
	n.hasView = false
	n.self = -1
	n.reset()
}

// SetRegistered sets the panic divisor used outside any view.
func (n *Node) SetRegistered(r int) { n.registered = max(r, 1) }

// inView reports whether the node gossips: a member of a current view.
func (n *Node) inView() bool { return n.hasView && n.self >= 0 }

func (n *Node) reset() {
	n.keys, n.local, n.s, n.x = n.keys[:0], n.local[:0], n.s[:0], n.x[:0]
	n.gidx = map[string]int32{}
	n.w = 1
	n.links = map[uint32]*link{}
	for _, l := range n.limiters {
		l.each(func(k *keyState) { k.gossipID = -1 })
	}
}

func (n *Node) maxGossipKeys() int {
	if n.cfg.MaxGossipKeys > 0 {
		return n.cfg.MaxGossipKeys
	}
	t := 0
	for _, l := range n.limiters {
		t += l.cfg.MaxKeys
	}
	return max(t, 1024)
}

// gossipKey returns the index of push-sum key g, adding it if there is
// room; -1 if there is not.
func (n *Node) gossipKey(g string) int32 {
	if i, ok := n.gidx[g]; ok {
		return i
	}
	if len(n.keys) >= n.maxGossipKeys() {
		return -1
	}
	i := int32(len(n.keys))
	n.gidx[g] = i
	n.keys = append(n.keys, g)
	n.local = append(n.local, nil)
	n.s = append(n.s, 0)
	n.x = append(n.x, 0)
	return i
}

// Tick runs one epoch at now (ns): it measures each key's demand since the
// last Tick, sets every bucket's share, and returns the pushes to send.
func (n *Node) Tick(now int64) []Message {
	dt := n.cfg.Epoch.Seconds()
	if n.lastTick != 0 && now > n.lastTick {
		dt = float64(now-n.lastTick) / 1e9
	}
	n.lastTick = now
	n.stats.Epochs++
	in := n.inView()
	members := 1
	if in {
		members = len(n.view.Members)
	}
	reg := float64(n.registered)
	viewFrac := float64(members) / reg // the view's fraction of each limit
	ds, ss := n.cfg.DemandSmoothing, n.cfg.ShareSmoothing
	for _, l := range n.limiters {
		fresh := 1 / reg
		switch {
		case !in && l.cfg.OnNoView == FailOpen:
			fresh = math.Inf(1)
		case !in && l.cfg.OnNoView == FailClosed:
			fresh = 0
		}
		l.fresh.Store(math.Float64bits(fresh))
		l.each(func(k *keyState) {
			a := k.arrivals.Load()
			if a == k.seen {
				k.idle++
			} else {
				k.idle = 0
			}
			rate := float64(a-k.seen) / dt
			k.seen = a
			k.demand = ds*k.demand + (1-ds)*rate
			if !in || k == l.overflow {
				k.share = fresh
				l.apply(k, fresh)
				return
			}
			if k.gossipID < 0 {
				k.gossipID = n.gossipKey(l.cfg.Name + "\x00" + k.key)
				if k.gossipID < 0 {
					k.share = fresh
					l.apply(k, fresh)
					return
				}
				n.local[k.gossipID] = k
			}
			// A small floor keeps an idle limiter's share above zero, so
			// that its first requests are not all refused.
			g := k.gossipID
			eps := 0.01 * k.base / l.cfg.Period.Seconds() / float64(members)
			xi := k.demand + eps
			n.s[g] += xi - n.x[g]
			n.x[g] = xi
			est := float64(members) * n.s[g] / n.w
			f := fresh
			if est > 0 {
				f = min(viewFrac, viewFrac*xi/est)
			}
			k.share = ss*k.share + (1-ss)*f
			l.apply(k, k.share)
		})
		for _, k := range l.evict(8) {
			if k.gossipID >= 0 {
				n.local[k.gossipID] = nil
			}
		}
	}
	if !in || members < 2 {
		return nil
	}
	return n.push()
}

// push splits the node's mass among itself and Fanout peers and
// returns the messages: to the chosen peers, and, in the robust variant,
// to every peer that has not acknowledged the latest sums sent to it.
func (n *Node) push() []Message {
	members := len(n.view.Members)
	b := min(n.cfg.Fanout, members-1)
	// Every member derives the same overlay from the view, the epoch's
	// number on the shared clock and the fleet's seed.
	epoch := uint64(n.lastTick / int64(n.cfg.Epoch))
	n.peers = cycleAppend(n.peers[:0], n.cfg.Seed^n.view.ID*0x9e3779b97f4a7c15^epoch*0xbf58476d1ce4e5b9, members, b, n.self, &n.perm)
	part := 1 / float64(b+1)
	var out []Message
	if n.cfg.UnsafePlainPushSum {
		for _, j := range n.peers {
			m := n.msg(j)
			m.W = n.w * part
			for g, v := range n.s {
				if v != 0 {
					m.Keys = append(m.Keys, n.keys[g])
					m.S = append(m.S, v*part)
				}
			}
			out = append(out, m)
		}
	} else {
		for _, j := range n.peers {
			l := n.link(j)
			l.sigW += n.w * part
			for g, v := range n.s {
				if v != 0 {
					l.sig[int32(g)] += v * part
				}
			}
		}
	}
	n.w *= part
	for g := range n.s {
		n.s[g] *= part
	}
	if n.cfg.UnsafePlainPushSum {
		n.stats.Sent += uint64(len(out))
		return out
	}
	for _, j := range sortedLinks(n.links) {
		l := n.links[j]
		fresh := slices.Contains(n.peers, j)
		if !fresh && l.acked >= l.seq {
			continue
		}
		if !fresh {
			n.stats.Resent++
		}
		if l.acked >= l.seq {
			l.unackedSince = n.stats.Epochs
		}
		l.seq++
		m := n.msg(j)
		m.Seq, m.W = l.seq, l.sigW
		for _, g := range sortedIDs(l.sig) {
			m.Keys = append(m.Keys, n.keys[g])
			m.S = append(m.S, l.sig[g])
		}
		out = append(out, m)
	}
	n.stats.Sent += uint64(len(out))
	return out
}

func (n *Node) msg(to uint32) Message {
	return Message{View: n.view.ID, From: uint32(n.self), To: to}
}

func (n *Node) link(j uint32) *link {
	l := n.links[j]
	if l == nil {
		l = &link{sig: map[int32]float64{}, rho: map[int32]float64{}}
		n.links[j] = l
	}
	return l
}

// Receive applies a message and returns the answer to send, if any: an
// acknowledgement of a push. Messages of another view, misaddressed or
// malformed ones are dropped.
func (n *Node) Receive(m Message) (Message, bool) {
	if !n.inView() || m.View != n.view.ID || int(m.To) != n.self || int(m.From) == n.self ||
		int(m.From) >= len(n.view.Members) || len(m.Keys) != len(m.S) || !finite(m.W) || m.W < 0 {
		n.stats.Foreign++
		return Message{}, false
	}
	for _, v := range m.S {
		if !finite(v) {
			n.stats.Foreign++
			return Message{}, false
		}
	}
	if n.cfg.UnsafePlainPushSum {
		if m.Ack {
			return Message{}, false
		}
		n.w += m.W
		for i, k := range m.Keys {
			if g := n.gossipKey(k); g >= 0 {
				n.s[g] += m.S[i]
			}
		}
		n.stats.Received++
		return Message{}, false
	}
	l := n.link(m.From)
	if m.Ack {
		if m.Seq <= l.seq {
			l.acked = max(l.acked, m.Seq)
			if l.acked >= l.seq {
				l.unackedSince = 0
			}
		}
		return Message{}, false
	}
	if m.Seq > l.inSeq {
		n.w += m.W - l.rhoW
		l.rhoW = m.W
		for i, k := range m.Keys {
			g := n.gossipKey(k)
			if g < 0 {
				continue
			}
			n.s[g] += m.S[i] - l.rho[g]
			l.rho[g] = m.S[i]
		}
		l.inSeq = m.Seq
		n.stats.Received++
	} else {
		n.stats.Duplicates++
	}
	ack := n.msg(m.From)
	ack.Ack, ack.Seq = true, l.inSeq
	return ack, true
}

// BrokenLinks lists the members this node has pushed to without an
// acknowledgement for at least epochs epochs (resending every epoch): the
// links to report to the manager and to relay through it.
func (n *Node) BrokenLinks(epochs uint64) []string {
	if !n.inView() || n.cfg.UnsafePlainPushSum {
		return nil
	}
	var out []string
	for _, j := range sortedLinks(n.links) {
		l := n.links[j]
		if l.unackedSince != 0 && n.stats.Epochs-l.unackedSince >= epochs {
			out = append(out, n.view.Members[j])
		}
	}
	return out
}

// Member returns the name of member i of the current view.
func (n *Node) Member(i uint32) (string, bool) {
	if !n.hasView || int(i) >= len(n.view.Members) {
		return "", false
	}
	return n.view.Members[i], true
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	s := n.stats
	s.View, s.InView, s.Registered = n.view.ID, n.inView(), n.registered
	if n.inView() {
		s.Members = len(n.view.Members)
	}
	s.GossipKeys = len(n.keys)
	return s
}

// KeyStat is one key's state at a node.
type KeyStat struct {
	Limit, Key string
	Demand     float64 // smoothed local arrivals per second
	Share      float64 // fraction of the key's limit admitted here
	Estimate   float64 // the node's estimate of the fleet's (view's) total demand
	Limited    uint64  // requests over the share so far
}

// KeyStats lists the tracked keys of every limit.
func (n *Node) KeyStats() []KeyStat {
	var out []KeyStat
	for _, l := range n.limiters {
		l.each(func(k *keyState) {
			ks := KeyStat{Limit: l.cfg.Name, Key: k.key, Demand: k.demand, Share: k.share, Limited: k.limited.Load()}
			if k.gossipID >= 0 && n.inView() {
				ks.Estimate = float64(len(n.view.Members)) * n.s[k.gossipID] / n.w
			}
			out = append(out, ks)
		})
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func sortedLinks(m map[uint32]*link) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sortedIDs(m map[int32]float64) []int32 {
	ks := make([]int32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// cycleAppend appends member self's out-neighbours in the epoch's overlay:
// the fanout members after it in a random cyclic order of the members
// seeded by seed, so that every member pushes to fanout others and hears
// from fanout others. A fixed fan-in keeps every member's weight near 1,
// which keeps the noise of its own demand measurements from swinging its
// estimate (random peers leave a member unvisited in 13% of epochs at
// fan-out 2, and its weight falls by a factor 3 each such epoch).
func cycleAppend(out []uint32, seed uint64, members, fanout, self int, scratch *[]int) []uint32 {
	fanout = min(fanout, members-1)
	rng := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908))
	pm := *scratch
	if cap(pm) < members {
		pm = make([]int, members)
	}
	pm = pm[:members]
	*scratch = pm
	for i := range pm {
		pm[i] = i
	}
	rng.Shuffle(members, func(i, j int) { pm[i], pm[j] = pm[j], pm[i] })
	pos := slices.Index(pm, self)
	for k := 1; k <= fanout; k++ {
		out = append(out, uint32(pm[(pos+k)%members]))
	}
	return out
}
