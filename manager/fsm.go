package manager

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// NodeInfo is where a manager node serves clients; replicated so that any
// node can send a client to the leader.
type NodeInfo struct {
	ID       string `json:"id"`
	GRPCAddr string `json:"grpc_addr"`
	HTTPAddr string `json:"http_addr"`
}

// command is one raft log entry.
type command struct {
	Op        string           `json:"op"` // create, delete, commit, node, balance
	Namespace *NamespaceConfig `json:"namespace,omitempty"`
	Name      string           `json:"name,omitempty"`
	Commits   []Commit         `json:"commits,omitempty"`
	Node      *NodeInfo        `json:"node,omitempty"`
	// Proxy registrations and rate limits (proxysvc_limits.go).
	RateLimits *RateLimitSet `json:"rate_limits,omitempty"`
	ProxyView  *ProxyView    `json:"proxy_view,omitempty"`
}

// fsmState is the replicated state.
type fsmState struct {
	Namespaces map[string]*NamespaceState `json:"namespaces"`
	Nodes      map[string]NodeInfo        `json:"nodes"`
	// Index is the raft index of the last entry applied, kept so that a
	// restored snapshot can version what it tells the RingObserver.
	Index uint64 `json:"index,omitempty"`
	// The namespaces' rate limits and proxy views (proxysvc_limits.go).
	RateLimits map[string]RateLimitSet `json:"rate_limits,omitempty"`
	ProxyViews map[string]ProxyView    `json:"proxy_views,omitempty"`
}

// fsm is the raft state machine. Apply is deterministic: it reads no clock
// (commits carry the leader's time) and its result depends only on the log.
type fsm struct {
	mu        sync.RWMutex
	st        fsmState
	retention time.Duration
	lease     time.Duration // default T for namespaces created without one
	observer  Observer
	// onApply, if set, hears each applied index (metrics).
	onApply func(index uint64)
	// events, if set, hears what each entry changed (the event log);
	// pending holds them until the lock is released.
	events  *eventHub
	pending []*hubItem
	// applying is the raft index of the entry being applied.
	applying uint64
}

func newFSM(retention, lease time.Duration, obs Observer) *fsm {
	return &fsm{
		st:        fsmState{Namespaces: map[string]*NamespaceState{}, Nodes: map[string]NodeInfo{}},
		retention: retention,
		lease:     lease,
		observer:  obs,
	}
}

var _ raft.FSM = (*fsm)(nil)

// Apply applies one log entry. Its result is nil or an error value, which
// raft hands back to the leader's ApplyFuture.Response.
func (f *fsm) Apply(l *raft.Log) any {
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return fmt.Errorf("manager: undecodable log entry %d: %w", l.Index, err)
	}
	f.mu.Lock()
	f.applying = l.Index
	res, views, deleted := f.apply(c)
	f.st.Index = l.Index
	rings := f.ringNotes(c, res)
	evs := f.pending
	f.pending = nil
	f.mu.Unlock()
	f.events.publish(evs)
	if f.observer != nil {
		// Rings first: a created namespace's ring tells the lease table
		// its ring size, which sizes the blocks its first view is served
		// in (RingObserver).
		if ro, ok := f.observer.(RingObserver); ok {
			for _, r := range rings {
				ro.NamespaceRing(r.ns, r.view, l.Index)
			}
		}
		for _, v := range views {
			f.notifyView(v)
		}
		if deleted != "" {
			f.observer.NamespaceDeleted(deleted)
		}
	}
	if f.onApply != nil {
		f.onApply(l.Index)
	}
	return res
}

// viewNote is a namespace's view after an applied change; changed lists
// the ranges the change set, nil when the whole view may have changed.
type viewNote struct {
	ns      string
	view    lease.View
	changed []ring.Range
	lsn     uint64
}

// notifyView tells the observer of a view: with the ranges that changed
// when it takes them (ViewObserver), else as the whole list of entries.
func (f *fsm) notifyView(v viewNote) {
	if vo, ok := f.observer.(ViewObserver); ok {
		vo.NamespaceViewChanged(v.ns, v.view, v.changed, v.lsn)
		return
	}
	f.observer.NamespaceView(v.ns, v.view.Entries(), v.lsn)
}

type ringNote struct {
	ns   string
	view lease.RingView
}

// ringNotes lists the rings an applied command changed: a created
// namespace's, and those of the namespaces whose owner records a commit
// set. A commit that failed part way still applied its earlier parts. The
// caller holds f.mu.
func (f *fsm) ringNotes(c command, res any) []ringNote {
	if f.observer == nil {
		return nil
	}
	if _, ok := f.observer.(RingObserver); !ok {
		return nil
	}
	var names []string
	switch c.Op {
	case "create":
		if res == nil && c.Namespace != nil {
			names = append(names, c.Namespace.Name)
		}
	case "commit":
		for _, cm := range c.Commits {
			if cm.ownersChanged() && !slices.Contains(names, cm.Namespace) {
				names = append(names, cm.Namespace)
			}
		}
	}
	var out []ringNote
	for _, name := range names {
		if st, ok := f.st.Namespaces[name]; ok {
			if v, err := st.RingView(); err == nil {
				out = append(out, ringNote{name, v})
			}
		}
	}
	return out
}

// RingView is the namespace's desired ring as Envoy and gRPC clients route
// by it: the owners that are not draining with their committed counts
// V_h (OwnerRecord.VNodes; ring.Apportion's even split for state without
// them), so every node derives the same view from the same state, and it
// is the ring the leader's lease core moves the table toward.
func (s NamespaceState) RingView() (lease.RingView, error) {
	v := lease.RingView{RingSize: s.Config.RingSize, Header: s.Config.Header}
	var names []string
	addr := map[string]string{}
	vn := map[string]int{}
	for _, o := range s.Owners {
		if !o.Draining {
			names = append(names, o.Name)
			addr[o.Name] = o.Addr
			vn[o.Name] = o.VNodes
		}
	}
	if !ring.ValidRingSize(s.Config.RingSize) {
		return lease.RingView{}, fmt.Errorf("manager: namespace %q: %w: %d", s.Config.Name, ring.ErrRingSize, s.Config.RingSize)
	}
	owners := vnodeCounts(names, vn, s.Config.RingSize)
	for _, o := range owners { // sorted by name
		v.Owners = append(v.Owners, lease.RingOwner{Name: o.Name, Addr: addr[o.Name], VNodes: o.VNodes})
	}
	return v, nil
}

func (f *fsm) apply(c command) (res any, views []viewNote, deleted string) {
	switch c.Op {
	case "create":
		if c.Namespace == nil {
			return fmt.Errorf("%w: create without a namespace", ErrBadRequest), nil, ""
		}
		if _, ok := f.st.Namespaces[c.Namespace.Name]; ok {
			return fmt.Errorf("%w: %q", ErrNamespaceExists, c.Namespace.Name), nil, ""
		}
		st, err := NewNamespaceState(*c.Namespace, Config{LeaseDuration: f.lease})
		if err != nil {
			return err, nil, ""
		}
		f.st.Namespaces[st.Config.Name] = &st
		f.noteNamespace(EventCreate, st.Config.Name)
		return nil, []viewNote{{st.Config.Name, st.Entries, nil, st.LSN}}, ""
	case "delete":
		if _, ok := f.st.Namespaces[c.Name]; !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNamespace, c.Name), nil, ""
		}
		delete(f.st.Namespaces, c.Name)
		delete(f.st.RateLimits, c.Name)
		delete(f.st.ProxyViews, c.Name)
		f.noteNamespace(EventDelete, c.Name)
		return nil, nil, c.Name
	case "commit":
		for _, cm := range c.Commits {
			st, ok := f.st.Namespaces[cm.Namespace]
			if !ok {
				return fmt.Errorf("%w: %q", ErrUnknownNamespace, cm.Namespace), views, ""
			}
			evs := f.commitEvents(st, cm) // before Apply: they name the previous holders
			if err := st.Apply(cm, f.retention); err != nil {
				return err, views, ""
			}
			f.pending = append(f.pending, evs...)
			if len(cm.Changes) > 0 {
				// st.Entries is immutable (lease.View): the observer shares
				// it (a copy was 3.7 MB a commit at R = 65536).
				changed := make([]ring.Range, len(cm.Changes))
				for i, ch := range cm.Changes {
					changed[i] = ch.Entry.Range
				}
				views = append(views, viewNote{cm.Namespace, st.Entries, changed, st.LSN})
			}
		}
		return nil, views, ""
	case opBalance:
		if c.Namespace == nil {
			return fmt.Errorf("%w: balance without a namespace", ErrBadRequest), nil, ""
		}
		st, ok := f.st.Namespaces[c.Namespace.Name]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNamespace, c.Namespace.Name), nil, ""
		}
		cfg, err := withBalance(st.Config, *c.Namespace)
		if err != nil {
			return err, nil, ""
		}
		st.Config = cfg
		return nil, nil, ""
	case "node":
		if c.Node == nil || c.Node.ID == "" {
			return fmt.Errorf("%w: node without an ID", ErrBadRequest), nil, ""
		}
		f.st.Nodes[c.Node.ID] = *c.Node
		return nil, nil, ""
	case opRateLimits, opProxyView:
		return f.applyProxy(c, f.applying), nil, ""
	}
	return fmt.Errorf("%w: unknown op %q", ErrBadRequest, c.Op), nil, ""
}

// states returns deep copies of every namespace state, sorted by name.
func (f *fsm) states() []NamespaceState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]NamespaceState, 0, len(f.st.Namespaces))
	for _, name := range slices.Sorted(maps.Keys(f.st.Namespaces)) {
		st := *f.st.Namespaces[name]
		st.Owners = slices.Clone(st.Owners)
		st.Log = slices.Clone(st.Log)
		out = append(out, st)
	}
	return out
}

func (f *fsm) namespaceConfig(ns string) (NamespaceConfig, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st, ok := f.st.Namespaces[ns]
	if !ok {
		return NamespaceConfig{}, false
	}
	return st.Config, true
}

func (f *fsm) hasNamespace(ns string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.st.Namespaces[ns]
	return ok
}

func (f *fsm) node(id string) (NodeInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.st.Nodes[id]
	return n, ok
}

// Snapshot captures the state as JSON; Persist writes it out.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.st)
	if err != nil {
		return nil, err
	}
	return fsmSnapshot(b), nil
}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st fsmState
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("manager: snapshot: %w", err)
	}
	if st.Namespaces == nil {
		st.Namespaces = map[string]*NamespaceState{}
	}
	if st.Nodes == nil {
		st.Nodes = map[string]NodeInfo{}
	}
	f.mu.Lock()
	old := f.st
	f.st = st
	f.mu.Unlock()
	if f.observer != nil {
		for name := range old.Namespaces {
			if _, ok := st.Namespaces[name]; !ok {
				f.observer.NamespaceDeleted(name)
			}
		}
		states := f.states()
		if ro, ok := f.observer.(RingObserver); ok {
			for _, s := range states {
				if v, err := s.RingView(); err == nil {
					ro.NamespaceRing(s.Config.Name, v, st.Index)
				}
			}
		}
		for _, s := range states {
			f.notifyView(viewNote{s.Config.Name, s.Entries, nil, s.LSN})
		}
	}
	return nil
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}
