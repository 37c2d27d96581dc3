package manager

import (
	"cmp"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// The event log: what happened to a node's namespaces, as the dashboard's
// log and GET /v1/events show it.
//
// Every node reports what it applies from the raft log: namespaces created
// and deleted, owners joining, restarting, draining and ending, arcs
// granted, and the loss notifications lookups raise (a generation that
// changed without a clean migration). The leader also reports what only
// its lease core knows, handed back in Output.Events: recalls, cancelled
// recalls and expiries. Nothing here is on the renewal path: a renewal
// that changes nothing produces no event.
//
// The hub keeps the last events in a ring buffer for pages that connect
// later, and sends each to every subscriber through a bounded channel. A
// subscriber whose channel is full is dropped (its stream ends, and the
// page reconnects and reloads), so a slow browser never holds up the raft
// FSM or the leader's loop.

// EventKind names what an Event reports.
type EventKind string

// Event kinds.
const (
	EventCreate  EventKind = "create"  // a namespace was created
	EventDelete  EventKind = "delete"  // a namespace was deleted
	EventJoin    EventKind = "join"    // an owner name opened its first session
	EventRestart EventKind = "restart" // a new incarnation replaced Owner's last
	EventDrain   EventKind = "drain"   // Owner left the desired ring: drained, or left cleanly
	EventEnd     EventKind = "end"     // Owner's session ended (expired unrenewed)
	EventGrant   EventKind = "grant"   // arcs granted to Owner; From held them before ("" if free)
	EventLoss    EventKind = "loss"    // Owner's arcs changed generation without a clean migration: lookups notify loss
	EventRecall  EventKind = "recall"  // arcs recalled from Owner (leader only)
	EventKeep    EventKind = "keep"    // recalls from Owner cancelled: it is wanted there again (leader only)
	EventExpiry  EventKind = "expiry"  // Owner's arcs expired unrenewed (leader only)
)

// Event is one entry of the event log. Arcs and Share sum the ranges the
// event covers: how many, and what fraction of the key space.
type Event struct {
	Seq       uint64    `json:"seq"` // this node's, from 1; see eventHub
	At        time.Time `json:"at"`  // the leader's clock
	Kind      EventKind `json:"kind"`
	Namespace string    `json:"namespace"`
	Owner     string    `json:"owner,omitempty"`
	From      string    `json:"from,omitempty"` // grant: the previous holder
	Arcs      int       `json:"arcs,omitempty"`
	Share     float64   `json:"share,omitempty"`
	Gen       uint64    `json:"generation,omitempty"` // the highest generation involved
	LSN       uint64    `json:"lsn,omitempty"`        // the namespace's LSN after the change
	Detail    string    `json:"detail,omitempty"`
}

// CoreEvent is one step's recalls, cancelled recalls or expiries of one
// owner's arcs, in ring order with adjacent ranges merged.
type CoreEvent struct {
	Namespace string
	Kind      EventKind // EventRecall, EventKeep or EventExpiry
	Owner     string
	Ranges    []ring.Range
}

type coreEventKey struct {
	kind  EventKind
	owner string
}

// note records that arc i of the table, held by owner, is recalled, kept
// or expires in this step. It costs an append, and a map entry for each
// new (kind, owner) in the step; step hands the events out.
func (n *namespace) note(kind EventKind, owner string, i int) {
	r, _ := n.table.At(i)
	k := coreEventKey{kind, owner}
	if j, ok := n.eventIdx[k]; ok {
		e := &n.events[j]
		if last := len(e.Ranges) - 1; e.Ranges[last].End == r.Start {
			e.Ranges[last].End = r.End
		} else {
			e.Ranges = append(e.Ranges, r)
		}
		return
	}
	if n.eventIdx == nil {
		n.eventIdx = map[coreEventKey]int{}
	}
	n.eventIdx[k] = len(n.events)
	n.events = append(n.events, CoreEvent{Namespace: n.cfg.Name, Kind: kind, Owner: owner, Ranges: []ring.Range{r}})
}

// share is the fraction of the key space that rs cover.
func share(rs []ring.Range) float64 {
	var x float64
	for _, r := range rs {
		x += r.Share()
	}
	return x
}

// ArcJSON is one arc as the dashboard shows it. Positions are 16 hex
// digits: JavaScript numbers hold 53 bits.
type ArcJSON struct {
	Start      string `json:"start"`
	End        string `json:"end"`
	Owner      string `json:"owner"`
	Generation uint64 `json:"generation"`
	State      string `json:"state"`
}

// delta is a live-only table update for open pages: the view changes of a
// commit (owner and generation per range; state granted, or free), or the
// ranges of a core event (state recalling for a recall, granted for a
// kept recall). Its JSON is made once, by the first subscriber that sends
// it, off the FSM's and the leader's goroutines.
type delta struct {
	Namespace string
	LSN       uint64
	Changes   []lease.Change // a commit's
	Ranges    []ring.Range   // a core event's
	State     State          // for Ranges
}

func (d *delta) MarshalJSON() ([]byte, error) {
	out := struct {
		Namespace string    `json:"namespace"`
		LSN       uint64    `json:"lsn,omitempty"`
		Arcs      []ArcJSON `json:"arcs,omitempty"`   // set owner, generation and state
		States    []ArcJSON `json:"states,omitempty"` // set the state only
	}{Namespace: d.Namespace, LSN: d.LSN}
	for _, c := range d.Changes {
		st := Granted
		if c.Entry.Owner == "" {
			st = Free
		}
		out.Arcs = append(out.Arcs, ArcJSON{Start: hex16(c.Entry.Range.Start), End: hex16(c.Entry.Range.End),
			Owner: c.Entry.Owner, Generation: uint64(c.Entry.Gen), State: st.String()})
	}
	for _, r := range d.Ranges {
		out.States = append(out.States, ArcJSON{Start: hex16(r.Start), End: hex16(r.End), State: d.State.String()})
	}
	return json.Marshal(out)
}

// hubItem is one published message: a log event, or a delta.
type hubItem struct {
	seq   uint64
	event *Event
	delta *delta

	once sync.Once
	data []byte // the SSE frame, made once
}

// frame is the item as a server-sent event: "log" or "delta", with its
// sequence number as the id.
func (it *hubItem) frame(epoch string) []byte {
	it.once.Do(func() {
		kind, v := "log", any(it.event)
		if it.delta != nil {
			kind, v = "delta", it.delta
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(`{}`)
		}
		it.data = sseFrame(kind, epoch, it.seq, b)
	})
	return it.data
}

// Defaults of the hub.
const (
	defaultEventBacklog   = 512 // log events kept for pages that connect later
	defaultMaxSubscribers = 64  // open event streams per node
	subscriberBuffer      = 256 // items queued per subscriber before it is dropped
)

// eventHub numbers events, keeps the latest, and fans them out.
type eventHub struct {
	clock Clock
	epoch string // names this hub's numbering: ids from another process's are not compared

	mu      sync.Mutex
	seq     uint64
	backlog []*hubItem // ring buffer of log events
	next    int        // where the next one goes
	subs    map[*subscriber]struct{}
	maxSubs int

	nsubs   atomic.Int32  // len(subs), read without the lock
	dropped atomic.Uint64 // subscribers dropped for falling behind
}

type subscriber struct {
	ch chan *hubItem // closed when the hub drops it
}

func newEventHub(c Clock, backlog, maxSubs int) *eventHub {
	return &eventHub{
		clock:   c,
		epoch:   hex16(uint64(c.Now().UnixNano())),
		backlog: make([]*hubItem, 0, backlog),
		subs:    map[*subscriber]struct{}{},
		maxSubs: maxSubs,
	}
}

// live reports whether anyone listens (deltas are made only then).
func (h *eventHub) live() bool { return h != nil && h.nsubs.Load() > 0 }

// publish numbers items, keeps the log events, and sends every item to
// every subscriber, dropping those that are full. It never blocks. A nil
// hub does nothing.
func (h *eventHub) publish(items []*hubItem) {
	if h == nil || len(items) == 0 {
		return
	}
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range items {
		it := items[i]
		h.seq++
		it.seq = h.seq
		if it.event != nil {
			it.event.Seq = it.seq
			if it.event.At.IsZero() {
				it.event.At = now
			}
			if len(h.backlog) < cap(h.backlog) {
				h.backlog = append(h.backlog, it)
			} else if cap(h.backlog) > 0 {
				h.backlog[h.next] = it
				h.next = (h.next + 1) % cap(h.backlog)
			}
		}
		for sub := range h.subs {
			select {
			case sub.ch <- it:
			default:
				h.drop(sub)
				h.dropped.Add(1)
			}
		}
	}
}

// drop removes sub and closes its channel. The caller holds h.mu.
func (h *eventHub) drop(sub *subscriber) {
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		close(sub.ch)
		h.nsubs.Store(int32(len(h.subs)))
	}
}

// subscribe registers a subscriber and returns the kept log events after
// since, oldest first, and the last sequence number; false when the node
// has as many subscribers as it allows.
func (h *eventHub) subscribe(since uint64) (*subscriber, []*hubItem, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= h.maxSubs {
		return nil, nil, false
	}
	var past []*hubItem
	n := len(h.backlog)
	for i := range n {
		it := h.backlog[(h.next+i)%n]
		if it.seq > since {
			past = append(past, it)
		}
	}
	sub := &subscriber{ch: make(chan *hubItem, subscriberBuffer)}
	h.subs[sub] = struct{}{}
	h.nsubs.Store(int32(len(h.subs)))
	return sub, past, true
}

func (h *eventHub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	h.drop(sub)
	h.mu.Unlock()
}

// lastSeq is the sequence number of the last item published.
func (h *eventHub) lastSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// coreEvents publishes a leader step's expiries (expiries true) or its
// recalls and kept recalls (false), with the recalls' ranges as deltas
// for open pages.
func (h *eventHub) coreEvents(evs []CoreEvent, now time.Time, expiries bool) {
	if h == nil || len(evs) == 0 {
		return
	}
	live := h.live()
	var items []*hubItem
	for _, ce := range evs {
		if (ce.Kind == EventExpiry) != expiries {
			continue
		}
		e := &Event{At: now, Kind: ce.Kind, Namespace: ce.Namespace, Owner: ce.Owner, Arcs: len(ce.Ranges), Share: share(ce.Ranges)}
		items = append(items, &hubItem{event: e})
		if live && ce.Kind != EventExpiry { // an expiry's ranges reach pages as the commit that frees them
			st := Recalling
			if ce.Kind == EventKeep {
				st = Granted
			}
			items = append(items, &hubItem{delta: &delta{Namespace: ce.Namespace, Ranges: ce.Ranges, State: st}})
		}
	}
	h.publish(items)
}

// noteNamespace records a namespace created or deleted. The caller holds
// f.mu.
func (f *fsm) noteNamespace(kind EventKind, ns string) {
	if f.events != nil {
		f.pending = append(f.pending, &hubItem{event: &Event{Kind: kind, Namespace: ns}})
	}
}

// commitEvents lists what a commit is about to change in st: owners that
// joined, restarted, drained or ended, the arcs granted per new and
// previous holder, and the loss notifications per previous holder; and,
// when a page listens, the commit's changes as a delta. It reads st
// before the commit applies; it costs O(owners) when the owner list
// changed and O(changes · log entries) for the arcs.
func (f *fsm) commitEvents(st *NamespaceState, cm Commit) []*hubItem {
	if f.events == nil || (len(cm.Changes) == 0 && !cm.ownersChanged()) {
		return nil
	}
	lsn := st.LSN
	if k := len(cm.Changes); k > 0 {
		lsn = cm.Changes[k-1].LSN
	}
	ev := func(kind EventKind, owner string) *Event {
		return &Event{At: cm.At, Kind: kind, Namespace: cm.Namespace, Owner: owner, LSN: lsn}
	}
	var items []*hubItem
	owner := func(o OwnerRecord, p OwnerRecord, ok bool) {
		switch {
		case !ok:
			e := ev(EventJoin, o.Name)
			e.Detail = o.Addr
			items = append(items, &hubItem{event: e})
		case p.Nonce != o.Nonce:
			e := ev(EventRestart, o.Name)
			e.Detail = o.Addr
			if o.Waiting {
				e.Detail += "; waits until its predecessor's leases expire"
			}
			items = append(items, &hubItem{event: e})
		case o.Draining && !p.Draining:
			items = append(items, &hubItem{event: ev(EventDrain, o.Name)})
		}
	}
	if cm.Owners != nil { // a log entry of before owner deltas: the whole list
		old := make(map[string]OwnerRecord, len(st.Owners))
		for _, o := range st.Owners {
			old[o.Name] = o
		}
		for _, o := range cm.Owners { // sorted by name
			p, ok := old[o.Name]
			delete(old, o.Name)
			owner(o, p, ok)
		}
		for _, name := range sortedKeys(old) {
			items = append(items, &hubItem{event: ev(EventEnd, name)})
		}
	}
	for _, o := range cm.OwnerUpserts { // sorted by name
		p, ok := findOwner(st.Owners, o.Name)
		owner(o, p, ok)
	}
	for _, name := range cm.OwnerRemovals {
		if _, ok := findOwner(st.Owners, name); ok {
			items = append(items, &hubItem{event: ev(EventEnd, name)})
		}
	}
	items = append(items, changeEvents(st.Entries, cm, ev)...)
	if len(cm.Changes) > 0 && f.events.live() {
		items = append(items, &hubItem{delta: &delta{Namespace: cm.Namespace, LSN: lsn, Changes: cm.Changes}})
	}
	return items
}

// findOwner returns the record of name in os, sorted by name.
func findOwner(os []OwnerRecord, name string) (OwnerRecord, bool) {
	i, ok := slices.BinarySearchFunc(os, name, func(o OwnerRecord, name string) int { return cmp.Compare(o.Name, name) })
	if !ok {
		return OwnerRecord{}, false
	}
	return os[i], true
}

// changeEvents sums a commit's view changes against the entries before it:
// per new holder and previous holder, the arcs granted (a new generation
// under an owner); per previous holder, the arcs whose generation changed
// without a clean migration (lookups notify loss of them). A free arc
// granted again also makes lookups notify loss; the log names only losses
// of what an owner held.
func changeEvents(old lease.View, cm Commit, ev func(EventKind, string) *Event) []*hubItem {
	if len(cm.Changes) == 0 || old.Len() == 0 {
		return nil
	}
	type key struct {
		kind        EventKind
		owner, from string
	}
	sum := map[key]*Event{}
	add := func(k key, sh float64, gen lease.Gen) {
		e := sum[k]
		if e == nil {
			e = ev(k.kind, k.owner)
			e.From = k.from
			sum[k] = e
		}
		e.Arcs++
		e.Share += sh
		e.Gen = max(e.Gen, uint64(gen))
	}
	for _, c := range cm.Changes {
		eachOverlap(old, c.Entry.Range, func(o lease.Entry, sh float64) {
			nw := c.Entry
			if nw.Gen == o.Gen {
				return // an address changed, or nothing lookups see
			}
			if nw.Owner != "" {
				add(key{EventGrant, nw.Owner, o.Owner}, sh, nw.Gen)
			}
			if !c.Clean && o.Owner != "" {
				add(key{EventLoss, o.Owner, ""}, sh, nw.Gen)
			}
		})
	}
	es := make([]*Event, 0, len(sum))
	for _, e := range sum {
		es = append(es, e)
	}
	// Losses first (the state is gone before anyone is granted it), then
	// grants; by owner within each.
	slices.SortFunc(es, func(a, b *Event) int {
		if a.Kind != b.Kind {
			if a.Kind == EventLoss {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Owner, b.Owner), cmp.Compare(a.From, b.From))
	})
	items := make([]*hubItem, len(es))
	for i, e := range es {
		items[i] = &hubItem{event: e}
	}
	return items
}

// eachOverlap calls fn with every entry of v that meets r, and the share
// of the key space they have in common: O(log n + entries met).
func eachOverlap(v lease.View, r ring.Range, fn func(e lease.Entry, share float64)) {
	if r.IsFull() {
		v.Each(func(e lease.Entry) { fn(e, e.Range.Share()) })
		return
	}
	// In offsets from r.Start, r is (0, size] and each piece (lo, hi]; the
	// entries' ends grow as the walk goes, but for the first one's, which
	// r may reach again after going round.
	size, k, done := r.End-r.Start, 0, false
	var first lease.Entry
	visit := func(e lease.Entry, again bool) bool {
		lo, hi := uint64(0), e.Range.End-r.Start
		if k > 0 {
			lo = e.Range.Start - r.Start
		}
		k++
		last := e.Range.IsFull() || again || hi >= size
		if last {
			hi = size
		}
		fn(e, float64(hi-lo)/18446744073709551616.0)
		done = last
		return !last
	}
	v.Walk(r.Start+1, func(e lease.Entry) bool {
		if k == 0 {
			first = e
		}
		return visit(e, false)
	})
	if !done && k > 0 {
		visit(first, true)
	}
}
