package xds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Type URLs of the lease table's resources.
const (
	ArcTypeURL       = "type.googleapis.com/fuge.v1.Arc"
	HeartbeatTypeURL = "type.googleapis.com/fuge.v1.Heartbeat"
)

// NamespaceMetadataKey is the node metadata field (a string) in which a
// lookup names its namespace; node.cluster is the fallback.
const NamespaceMetadataKey = "fuge.namespace"

// HeartbeatName is the resource name of a namespace's heartbeat.
func HeartbeatName(ns string) string { return ns + "/heartbeat" }

// Errors of the lease table. Streams are refused with a gRPC status whose
// message starts with one of them.
var (
	ErrUnknownNamespace = errors.New("xds: unknown namespace")
	ErrNoNamespace      = errors.New("xds: node names no namespace")
	ErrUnknownType      = errors.New("xds: resource type not served")
	ErrInvalidView      = errors.New("xds: invalid namespace view")
)

// LeaseTableConfig configures a LeaseTable. The zero value is valid.
type LeaseTableConfig struct {
	// Logger hears NACKs, refused views and namespaces coming and going.
	// Default: discard.
	Logger *slog.Logger
	// Gate, when set, is called with the stream's context as each xDS
	// stream opens. An error refuses the stream and is what the client
	// receives, so it should be a gRPC status error (the manager's
	// CheckLeader also sets the "fuge-leader" trailer). Nil admits every
	// stream. Streams already open are not gated again.
	Gate func(ctx context.Context) error
}

// Stats counts what the lease table has served.
type Stats struct {
	Namespaces int    // namespaces with a view
	Streams    int    // xDS streams open and admitted by the gate
	Refused    uint64 // streams the gate refused
	Pushes     uint64 // responses sent, SotW and delta
	NACKs      uint64 // requests carrying an error_detail
	BadViews   uint64 // views refused by validation
}

// LeaseTable serves each namespace's lookup view over xDS: one
// fuge.v1.Arc resource per arc and one fuge.v1.Heartbeat. It satisfies the
// manager's Observer interface. See the package documentation.
type LeaseTable struct {
	log   *slog.Logger
	gate  func(context.Context) error
	sotw  sotw.Server
	delta delta.Server

	mu     sync.RWMutex
	spaces map[string]*space

	smu     sync.Mutex
	streams map[streamKey]struct{}

	refused, pushes, nacks, badViews atomic.Uint64
}

type streamKey struct {
	delta bool
	id    int64
}

// space is one namespace: its arcs as last published and a cache per
// resource type, which the mux routes requests to. A deleted namespace
// stays as an empty tombstone, so that a client whose acknowledgement
// crossed the deletion still receives the removals (see mux.route).
type space struct {
	arcs    map[string]arc // by resource name
	seq     uint64         // heartbeat sequence number
	caches  map[string]*typeCache
	deleted bool
}

// arc is a published arc and its resource version: the generation, or, if
// a view ever changed an arc without changing its generation (the manager
// promises it never does), the generation and a count of such changes, so
// that clients still hear of it.
type arc struct {
	e       lease.Entry
	bumps   uint64
	version string
}

// NewLeaseTable returns an empty lease table.
func NewLeaseTable(cfg LeaseTableConfig) *LeaseTable {
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	t := &LeaseTable{
		log:     lg,
		gate:    cfg.Gate,
		spaces:  map[string]*space{},
		streams: map[streamKey]struct{}{},
	}
	cb := callbacks{t}
	gl := cpLogger(lg)
	t.sotw = sotw.NewServer(context.Background(), mux{t}, cb, sotw.WithLogger(gl))
	t.delta = delta.NewServer(context.Background(), mux{t}, cb, delta.WithLogger(gl))
	return t
}

// NamespaceView publishes a namespace's view: entries is the whole view
// after a change, ranges partitioning the circle, Owner "" for a free
// range; version is the change's LSN and becomes the SotW version_info.
// Arcs that are new or changed are updated, arcs that are gone are
// deleted. A view that fails validation is logged and skipped. It
// satisfies manager.Observer.
func (t *LeaseTable) NamespaceView(ns string, entries []lease.Entry, version uint64) {
	if err := ValidateView(ns, entries); err != nil {
		t.badViews.Add(1)
		t.log.Error("refusing namespace view", "ns", ns, "version", version, "err", err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaces[ns]
	var old map[string]arc
	if sp != nil && !sp.deleted {
		old = sp.arcs
	}
	next := make(map[string]arc, len(entries))
	set := map[string]*resource{}
	for _, e := range entries {
		name := wire.ArcName(ns, e.Range)
		a := arc{e: e}
		if o, ok := old[name]; ok {
			if o.e == e {
				next[name] = o
				continue
			}
			if o.e.Gen == e.Gen {
				a.bumps = o.bumps + 1
				t.log.Warn("view changes an arc without changing its generation", "ns", ns, "arc", name, "gen", e.Gen)
			}
		}
		a.version = strconv.FormatUint(uint64(e.Gen), 10)
		if a.bumps > 0 {
			a.version += "." + strconv.FormatUint(a.bumps, 10)
		}
		r, err := newResource(name, a.version, wire.Arc(ns, e))
		if err != nil {
			t.badViews.Add(1)
			t.log.Error("refusing namespace view", "ns", ns, "version", version, "err", err)
			return
		}
		next[name] = a
		set[name] = r
	}
	var del []string
	for name := range old {
		if _, ok := next[name]; !ok {
			del = append(del, name)
		}
	}
	if sp == nil {
		sp = &space{caches: map[string]*typeCache{
			ArcTypeURL:       newTypeCache(ArcTypeURL),
			HeartbeatTypeURL: newTypeCache(HeartbeatTypeURL),
		}}
		t.spaces[ns] = sp
	}
	if old == nil {
		sp.deleted = false
		t.log.Info("serving namespace", "ns", ns, "arcs", len(entries), "version", version)
	}
	sp.arcs = next
	if len(set) > 0 || len(del) > 0 {
		sp.caches[ArcTypeURL].update(strconv.FormatUint(version, 10), set, del)
	}
}

// NamespaceDeleted deletes every resource of a namespace, so subscribed
// clients see the removals; once a client holds none, its next request,
// and any new stream for the namespace, is refused with NOT_FOUND. It
// satisfies manager.Observer.
func (t *LeaseTable) NamespaceDeleted(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaces[ns]
	if sp == nil || sp.deleted {
		return
	}
	sp.deleted = true
	sp.arcs = nil
	sp.seq = 0
	for _, c := range sp.caches {
		c.clear("deleted")
	}
	t.log.Info("namespace deleted", "ns", ns)
}

// Heartbeat rewrites a namespace's heartbeat resource, named
// HeartbeatName(ns), with the next sequence number, which is also its
// version; every client subscribed to it receives a push. Sequence numbers
// start at 1 in each process. A namespace without a view is ignored: a
// heartbeat must not bring back a namespace that was just deleted.
func (t *LeaseTable) Heartbeat(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaces[ns]
	if sp == nil || sp.deleted {
		t.log.Debug("heartbeat for a namespace without a view", "ns", ns)
		return
	}
	sp.seq++
	v := strconv.FormatUint(sp.seq, 10)
	name := HeartbeatName(ns)
	r, err := newResource(name, v, &fugev1.Heartbeat{Namespace: ns, Seq: sp.seq})
	if err != nil {
		t.log.Error("heartbeat", "ns", ns, "err", err)
		return
	}
	sp.caches[HeartbeatTypeURL].update(v, map[string]*resource{name: r}, nil)
}

// Stats returns the table's counters.
func (t *LeaseTable) Stats() Stats {
	n := 0
	t.mu.RLock()
	for _, sp := range t.spaces {
		if !sp.deleted {
			n++
		}
	}
	t.mu.RUnlock()
	t.smu.Lock()
	s := len(t.streams)
	t.smu.Unlock()
	return Stats{
		Namespaces: n,
		Streams:    s,
		Refused:    t.refused.Load(),
		Pushes:     t.pushes.Load(),
		NACKs:      t.nacks.Load(),
		BadViews:   t.badViews.Load(),
	}
}

// ValidateView checks a namespace's view before it is published: a
// namespace name, at most ring.MaxRingSize entries whose ranges partition
// the circle, and entries that are valid arcs (a nonzero generation, an
// address for an owned range).
func ValidateView(ns string, entries []lease.Entry) error {
	if ns == "" {
		return fmt.Errorf("%w: no namespace name", ErrInvalidView)
	}
	n := len(entries)
	if n == 0 || n > ring.MaxRingSize {
		return fmt.Errorf("%w: %d entries", ErrInvalidView, n)
	}
	for _, e := range entries {
		if e.Gen == 0 {
			return fmt.Errorf("%w: %v has generation 0", ErrInvalidView, e.Range)
		}
		if _, err := wire.EntryFrom(wire.Arc(ns, e)); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidView, err)
		}
	}
	if n == 1 {
		if !entries[0].Range.IsFull() {
			return fmt.Errorf("%w: a single range %v that is not the circle", ErrInvalidView, entries[0].Range)
		}
		return nil
	}
	s := slices.SortedFunc(slices.Values(entries), func(a, b lease.Entry) int { return cmp.Compare(a.Range.End, b.Range.End) })
	for i, e := range s {
		prev := s[(i+n-1)%n].Range
		switch {
		case e.Range.IsFull():
			return fmt.Errorf("%w: the whole circle among %d ranges", ErrInvalidView, n)
		case i > 0 && e.Range.End == prev.End:
			return fmt.Errorf("%w: two ranges end at %016x", ErrInvalidView, e.Range.End)
		case e.Range.Start != prev.End:
			return fmt.Errorf("%w: %v does not follow %v", ErrInvalidView, e.Range, prev)
		}
	}
	return nil
}
