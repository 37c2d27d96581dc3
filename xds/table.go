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
	"time"
	"unicode/utf8"

	"github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Type URLs of the lease table's resources.
const (
	ArcBlockTypeURL  = "type.googleapis.com/fuge.v1.ArcBlock"
	HeartbeatTypeURL = "type.googleapis.com/fuge.v1.Heartbeat"
)

// NamespaceMetadataKey is the node metadata field (a string) in which a
// lookup names its namespace; node.cluster is the fallback.
const NamespaceMetadataKey = "fuge.namespace"

// FlushInterval is the least time between two applications of a
// namespace's view to its caches: views that arrive faster are coalesced,
// and only the latest is published. See the package documentation.
const FlushInterval = 10 * time.Millisecond

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
	// EnvoyListener is the host:port of the Listener that Envoy nodes
	// receive for their namespace (EnvoyListenerName): where Envoy accepts
	// the requests it routes. Every namespace's Listener has this address,
	// since an Envoy node serves one namespace. Default
	// DefaultEnvoyListener (127.0.0.1:10000); give every manager node the
	// same value.
	EnvoyListener string
	// Logger hears NACKs, refused views and namespaces coming and going.
	// Default: discard.
	Logger *slog.Logger
	// Gate, when set, is called with the stream's context as each xDS
	// stream opens. An error refuses the stream and is what the client
	// receives, so it should be a gRPC status error (the manager's
	// CheckLookup, which admits the leader and standbys in contact with
	// it, sets the "fuge-leader" trailer when it refuses). Nil admits every
	// stream. Streams already open are not gated again.
	Gate func(ctx context.Context) error
}

// Stats counts what the lease table has served.
type Stats struct {
	Namespaces int    // namespaces with a view
	Streams    int    // xDS streams open and admitted by the gate
	Refused    uint64 // streams the gate refused
	Rechecked  uint64 // Lookup streams the gate ended when RecheckLookups asked it again
	Pushes     uint64 // responses sent, SotW and delta
	NACKs      uint64 // requests carrying an error_detail
	BadViews   uint64 // views refused by validation
	Views      uint64 // valid views received (NamespaceView calls)
	Flushes    uint64 // views applied to the caches; the others were coalesced
	BadRings   uint64 // ring views whose Envoy resources failed to build or validate
	Rings      uint64 // ring views received (NamespaceRing calls)
	RingPushes uint64 // ring views applied to the caches; the others were coalesced, or replaced while no Envoy or gRPC client had asked for the namespace
	// Lookup streams' whole tables that waited for one of the slots they
	// are sent in, and those sent without one after waiting too long.
	WholeWaits, WholeBypasses uint64
}

// LeaseTable serves each namespace's lookup view over xDS: 64
// fuge.v1.ArcBlock resources and one fuge.v1.Heartbeat. It satisfies the
// manager's Observer interface. See the package documentation.
type LeaseTable struct {
	log      *slog.Logger
	gate     func(context.Context) error
	clock    clock
	listener string // the Envoy Listener's address
	sotw     sotw.Server
	delta    delta.Server

	mu        sync.RWMutex
	spaces    map[string]*space
	frames    frameIndex // the delta frames of every published resource, for Codec
	lookupIDs lookupStreamIDs
	senders   sendPool // sends for Lookup streams that owe their client nothing
	whole     wholeGate

	smu     sync.Mutex
	streams map[streamKey]struct{}
	lookups map[*lookupStream]struct{} // the Lookup streams among streams

	rechecked atomic.Uint64 // Lookup streams ended by the gate at a recheck

	refused, pushes, nacks, badViews, views, flushes atomic.Uint64
	badRings, rings, ringPushes                      atomic.Uint64
}

type streamKey struct {
	delta bool
	id    int64
}

// clock is the time the coalescing of views is measured by; tests inject
// their own.
type clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d and returns a
	// function that stops the timer.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// space is one namespace: its blocks and Envoy resources as last
// published, the view and ring waiting to be published, and a cache per
// resource type, which the mux routes requests to. A deleted namespace
// stays as an empty tombstone, so that a client whose acknowledgement
// crossed the deletion still receives the removals (see mux.route).
type space struct {
	live bool // it has a view and is not deleted
	// bits is the block bit count of the published blocks (0 before the
	// first view); blocks holds each block's arcs as last published, in
	// ring order, 2^bits of them.
	bits   uint32
	blocks [][]lease.Entry
	// ringSize is R as the namespace's ring view tells it (0 until one
	// has): what bits follow (wire.BlockBits).
	ringSize int
	lsn      uint64    // the LSN of the last published view
	seq      uint64    // heartbeat sequence number
	viewAt   time.Time // when a view was last published
	caches   map[string]*typeCache
	// ringLive is set once a ring has been published since the namespace
	// was created or deleted; envoy holds each Envoy resource as last
	// published, by type URL and name, to tell which ones a ring changes.
	ringLive bool
	envoy    map[string]map[string]proto.Message
	// envoyWanted is set once an Envoy or gRPC client has asked for one
	// of the namespace's Envoy types (mux.want). Until then a ring view
	// is only checked and kept, as deferredRing: building and marshalling
	// the resources costs in proportion to the owners (21 ms and 7 MB at
	// 5,000), on every node, for every ring change, and a pool whose
	// routers are Lookups and fuge-proxies never reads them.
	envoyWanted  bool
	deferredRing *ringNote

	// Coalescing: when the view or ring was last published, the latest
	// view and ring not yet published, and the timer that will publish
	// them (stop is nil when none is armed; timer tells a stale timer's
	// call from the armed one's).
	flushed     time.Time
	pending     *view
	pendingRing *ringNote
	stop        func() bool
	timer       uint64
}

// ringNote is a namespace's ring view as NamespaceRing receives it.
type ringNote struct {
	view    lease.RingView
	version uint64
}

// view is a namespace's view as NamespaceView or NamespaceViewChanged
// receive it: entries, or lv with the spans where it may differ from the
// view last published (all: anywhere). Both are the manager's and are
// never modified.
type view struct {
	entries []lease.Entry
	lv      *lease.View
	spans   []span
	all     bool
	lsn     uint64
}

// NewLeaseTable returns an empty lease table.
func NewLeaseTable(cfg LeaseTableConfig) *LeaseTable {
	return newLeaseTable(cfg, realClock{})
}

func newLeaseTable(cfg LeaseTableConfig, clk clock) *LeaseTable {
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	lis := cfg.EnvoyListener
	if lis == "" {
		lis = DefaultEnvoyListener
	}
	t := &LeaseTable{
		log:      lg,
		gate:     cfg.Gate,
		clock:    clk,
		listener: lis,
		spaces:   map[string]*space{},
		streams:  map[streamKey]struct{}{},
		lookups:  map[*lookupStream]struct{}{},
		whole:    newWholeGate(),
	}
	cb := callbacks{t}
	gl := cpLogger(lg)
	t.sotw = sotw.NewServer(context.Background(), mux{t}, cb, sotw.WithLogger(gl))
	t.delta = delta.NewServer(context.Background(), mux{t}, cb, delta.WithLogger(gl))
	return t
}

// NamespaceView publishes a namespace's view: entries is the whole view
// after a change, ranges partitioning the circle, Owner "" for a free
// range; version is the change's LSN. The view is cut into its blocks
// (wire.BlockBits of the ring size that the namespace's ring view gave, or,
// before one has, of the first view's length rounded up to a power of
// two), and the blocks whose arcs changed are updated at that version, all
// in one update; the LSN becomes the SotW version_info.
//
// Views are coalesced: a namespace's caches are updated at most once per
// FlushInterval. A view that arrives at least FlushInterval after the last
// update is applied at once; one that arrives sooner is kept, replacing
// any view kept before, and applied when the interval has passed. The
// first view of a namespace is always applied at once. Entries must not be
// modified afterwards (the manager passes a copy). A view that fails
// validation is logged, counted and skipped; it replaces no kept view. It
// satisfies manager.Observer.
func (t *LeaseTable) NamespaceView(ns string, entries []lease.Entry, version uint64) {
	if err := ValidateView(ns, entries); err != nil {
		t.badViews.Add(1)
		t.log.Error("refusing namespace view", "ns", ns, "version", version, "err", err)
		return
	}
	t.views.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaceLocked(ns)
	sp.pending = &view{entries: entries, all: true, lsn: version}
	t.scheduleLocked(ns, sp, !sp.live)
}

// spaceLocked returns a namespace's space, made on first use. The caller
// holds t.mu.
func (t *LeaseTable) spaceLocked(ns string) *space {
	sp := t.spaces[ns]
	if sp == nil {
		sp = &space{caches: map[string]*typeCache{}, envoy: map[string]map[string]proto.Message{}}
		for _, typeURL := range []string{ArcBlockTypeURL, HeartbeatTypeURL, ListenerTypeURL, RouteTypeURL, ClusterTypeURL, EndpointTypeURL} {
			sp.caches[typeURL] = newTypeCache(typeURL, &t.frames, t.clock)
		}
		t.spaces[ns] = sp
	}
	return sp
}

// scheduleLocked publishes what a namespace has pending now, when first is
// set or FlushInterval has passed since the last publication, or else arms
// the timer that will. The caller holds t.mu.
func (t *LeaseTable) scheduleLocked(ns string, sp *space, first bool) {
	now := t.clock.Now()
	if first || sp.stop == nil && now.Sub(sp.flushed) >= FlushInterval {
		t.flushLocked(ns, sp)
		return
	}
	if sp.stop == nil {
		sp.timer++
		armed := sp.timer
		sp.stop = t.clock.AfterFunc(sp.flushed.Add(FlushInterval).Sub(now), func() { t.flushTimer(ns, sp, armed) })
	}
}

// flushTimer publishes a namespace's kept view and ring when its timer
// fires, unless the timer was stopped or superseded meanwhile.
func (t *LeaseTable) flushTimer(ns string, sp *space, armed uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sp.stop == nil || sp.timer != armed {
		return
	}
	sp.stop = nil
	t.flushLocked(ns, sp)
}

// cancelLocked forgets a namespace's kept view and ring and stops its
// timer.
func (sp *space) cancelLocked() {
	sp.pending = nil
	sp.pendingRing = nil
	if sp.stop != nil {
		sp.stop()
		sp.stop = nil
	}
}

// flushLocked publishes a namespace's kept view and ring, if any. The
// caller holds t.mu.
func (t *LeaseTable) flushLocked(ns string, sp *space) {
	v, r := sp.pending, sp.pendingRing
	sp.cancelLocked()
	if v == nil && r == nil {
		return
	}
	sp.flushed = t.clock.Now()
	if v != nil {
		sp.viewAt = sp.flushed
	}
	switch {
	case v != nil && v.lv != nil && !v.all && sp.live && v.lsn > sp.lsn && sp.bits == sp.bitsFor(v.lv.Len()) && !sp.whole():
		t.publishSpansLocked(ns, sp, v)
	case v != nil && v.lv != nil:
		es := v.lv.Entries()
		if err := ValidateView(ns, es); err != nil {
			t.badViews.Add(1)
			t.log.Error("refusing namespace view", "ns", ns, "version", v.lsn, "err", err)
			return
		}
		t.publishViewLocked(ns, sp, &view{entries: es, lsn: v.lsn})
	case v != nil:
		t.publishViewLocked(ns, sp, v)
	}
	if r != nil {
		if sp.envoyWanted {
			t.publishRingLocked(ns, sp, r)
		} else {
			t.deferRingLocked(ns, sp, r)
		}
	}
}

// publishViewLocked publishes a view: it cuts it into blocks, compares each
// with the block as last published and updates the changed ones in the
// cache, at the view's LSN. The caller holds t.mu.
func (t *LeaseTable) publishViewLocked(ns string, sp *space, v *view) {
	sorted := v.entries // read only: changed blocks are copied below
	byEnd := func(a, b lease.Entry) int { return cmp.Compare(a.Range.End, b.Range.End) }
	if !slices.IsSortedFunc(sorted, byEnd) {
		sorted = slices.Clone(sorted)
		slices.SortFunc(sorted, byEnd)
	}
	bits := sp.bitsFor(len(sorted))
	if sp.live && v.lsn <= sp.lsn {
		// Cut anew only under a new LSN: a client holding a block of the
		// old size at this version would take the new one for it.
		bits = sp.bits
	}
	// A new bit count (the ring size heard after the first view) sends
	// every block again, and removes those past the new count.
	resized := sp.live && bits != sp.bits
	version := strconv.FormatUint(v.lsn, 10)
	next := make([][]lease.Entry, 1<<bits)
	set := map[string]*resource{}
	var del []string
	if resized {
		for b := uint32(len(next)); b < uint32(len(sp.blocks)); b++ {
			del = append(del, wire.BlockName(ns, b))
		}
	}
	lo := 0
	for b := range uint32(len(next)) {
		hi := lo
		for hi < len(sorted) && wire.BlockOf(sorted[hi].Range.End, bits) == b {
			hi++
		}
		es := sorted[lo:hi]
		lo = hi
		if sp.live && !resized && slices.Equal(sp.blocks[b], es) {
			next[b] = sp.blocks[b]
			continue
		}
		name := wire.BlockName(ns, b)
		r, err := newResource(name, version, wire.ArcBlock(ns, bits, b, es))
		if err != nil {
			t.badViews.Add(1)
			t.log.Error("refusing namespace view", "ns", ns, "version", v.lsn, "err", err)
			return
		}
		// A copy, so that an unchanged block does not keep a whole view's
		// array alive.
		next[b] = slices.Clip(slices.Clone(es))
		set[name] = r
	}
	if !sp.live {
		sp.live = true
		t.log.Info("serving namespace", "ns", ns, "arcs", len(v.entries), "version", v.lsn)
	} else if len(set) > 0 && v.lsn <= sp.lsn && !resized {
		t.log.Warn("view changes blocks without advancing the LSN; clients holding them may not hear of it",
			"ns", ns, "version", v.lsn, "last", sp.lsn)
	}
	if resized {
		t.log.Info("serving namespace in blocks of another size", "ns", ns, "blocks", len(next), "were", len(sp.blocks), "version", v.lsn)
	}
	t.flushes.Add(1)
	sp.blocks = next
	sp.bits = bits
	sp.lsn = v.lsn
	// Even a view that changes no block advances the cache's version: a
	// Lookup that moved here from a node ahead waits for it (atLeast).
	sp.caches[ArcBlockTypeURL].update(version, set, del)
}

// whole reports whether the view last published was one range, the whole
// circle: the spans of a change are measured in the new view, and from one
// range they may not reach the block that range was published in.
func (sp *space) whole() bool {
	return len(sp.blocks) > 0 && len(sp.blocks[0]) == 1 && sp.blocks[0][0].Range.IsFull()
}

// bitsFor is the block bit count for a view of n arcs: the ring size's
// once heard, else the one in use, else n's rounded up to a power of two.
func (sp *space) bitsFor(n int) uint32 {
	switch {
	case sp.ringSize > 0:
		return wire.BlockBits(sp.ringSize)
	case sp.bits > 0:
		return sp.bits
	}
	return wire.BlockBits(n)
}

// NamespaceDeleted deletes every resource of a namespace, so subscribed
// clients see the removals, and forgets any view kept for later; once a
// client holds none, its next request, and any new stream for the
// namespace, is refused with NOT_FOUND. It satisfies manager.Observer.
func (t *LeaseTable) NamespaceDeleted(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaces[ns]
	if sp == nil || !sp.live {
		return
	}
	sp.cancelLocked()
	sp.live = false
	sp.blocks = nil
	sp.bits = 0
	sp.ringSize = 0
	sp.lsn = 0
	sp.seq = 0
	sp.ringLive = false
	sp.deferredRing = nil
	clear(sp.envoy)
	for _, c := range sp.caches {
		c.clear("deleted")
	}
	t.log.Info("namespace deleted", "ns", ns)
}

// Heartbeat rewrites a namespace's heartbeat resource, named
// HeartbeatName(ns), with the next sequence number, which is also its
// version; every client subscribed to it receives a push. A view kept for
// later is published first, so a client that hears the heartbeat has
// been sent the namespace's latest view. Sequence numbers start at 1 in
// each process. A namespace without a view is ignored: a heartbeat must
// not bring back a namespace that was just deleted.
func (t *LeaseTable) Heartbeat(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaces[ns]
	if sp == nil || !sp.live {
		t.log.Debug("heartbeat for a namespace without a view", "ns", ns)
		return
	}
	t.flushLocked(ns, sp)
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

// ChangedWithin reports whether a view of ns was published within d of
// now: a table change may still be going out to its Lookups.
func (t *LeaseTable) ChangedWithin(ns string, d time.Duration) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	sp := t.spaces[ns]
	return sp != nil && !sp.viewAt.IsZero() && t.clock.Now().Sub(sp.viewAt) < d
}

// Namespaces lists the namespaces with a view, sorted: what a standby
// heartbeats (manager.Server.RunStandbyHeartbeats).
func (t *LeaseTable) Namespaces() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []string
	for ns, sp := range t.spaces {
		if sp.live {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// RecheckLookups marks one in share of the open Lookup streams (rounded
// up; all of them for a share under 2), chosen at random, to ask the gate
// again at their next request (a Lookup acknowledges every response,
// heartbeats included, so within a heartbeat interval): a stream the gate
// now refuses ends with its error, the others go on. It returns how many
// it marked. A manager that became leader hands the Lookups it served as
// a standby to its standbys this way, a share at a time.
func (t *LeaseTable) RecheckLookups(share int) int {
	t.smu.Lock()
	defer t.smu.Unlock()
	n := len(t.lookups)
	if share > 1 {
		n = (n + share - 1) / share
	}
	marked := 0
	for st := range t.lookups {
		if marked >= n {
			break
		}
		if st.recheck.CompareAndSwap(false, true) {
			marked++
		}
	}
	return marked
}

// Stats returns the table's counters.
func (t *LeaseTable) Stats() Stats {
	n := 0
	t.mu.RLock()
	for _, sp := range t.spaces {
		if sp.live {
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
		Rechecked:  t.rechecked.Load(),
		Pushes:     t.pushes.Load(),
		NACKs:      t.nacks.Load(),
		BadViews:   t.badViews.Load(),
		Views:      t.views.Load(),
		Flushes:    t.flushes.Load(),
		BadRings:   t.badRings.Load(),
		Rings:      t.rings.Load(),
		RingPushes: t.ringPushes.Load(),

		WholeWaits:    t.whole.waits.Load(),
		WholeBypasses: t.whole.bypasses.Load(),
	}
}

// ValidateView checks a namespace's view before it is published: a
// namespace name, at most ring.MaxRingSize entries whose ranges partition
// the circle, and entries that are valid arcs (a nonzero generation, an
// address for an owned range) with names protobuf can carry (UTF-8).
func ValidateView(ns string, entries []lease.Entry) error {
	if ns == "" || !utf8.ValidString(ns) {
		return fmt.Errorf("%w: namespace name %q", ErrInvalidView, ns)
	}
	n := len(entries)
	if n == 0 || n > ring.MaxRingSize {
		return fmt.Errorf("%w: %d entries", ErrInvalidView, n)
	}
	if err := validEntries(entries); err != nil {
		return err
	}
	if n == 1 {
		if !entries[0].Range.IsFull() {
			return fmt.Errorf("%w: a single range %v that is not the circle", ErrInvalidView, entries[0].Range)
		}
		return nil
	}
	// The ranges alone, which hold no pointers, are cheaper to sort.
	s := make([]ring.Range, n)
	for i, e := range entries {
		s[i] = e.Range
	}
	byEnd := func(a, b ring.Range) int { return cmp.Compare(a.End, b.End) }
	if !slices.IsSortedFunc(s, byEnd) {
		slices.SortFunc(s, byEnd)
	}
	for i, r := range s {
		prev := s[(i+n-1)%n]
		switch {
		case r.IsFull():
			return fmt.Errorf("%w: the whole circle among %d ranges", ErrInvalidView, n)
		case i > 0 && r.End == prev.End:
			return fmt.Errorf("%w: two ranges end at %016x", ErrInvalidView, r.End)
		case r.Start != prev.End:
			return fmt.Errorf("%w: %v does not follow %v", ErrInvalidView, r, prev)
		}
	}
	return nil
}

// validEntries checks that entries are valid arcs: a nonzero generation,
// an address for an owned range, UTF-8 names.
func validEntries(entries []lease.Entry) error {
	for _, e := range entries {
		if e.Gen == 0 {
			return fmt.Errorf("%w: %v has generation 0", ErrInvalidView, e.Range)
		}
		if !utf8.ValidString(e.Owner) || !utf8.ValidString(e.Addr) {
			return fmt.Errorf("%w: %v has an owner or address that is not UTF-8", ErrInvalidView, e.Range)
		}
		// wire.EntryFrom's rule, checked here without building the
		// message: views of thousands of arcs come hundreds of times a
		// second during a join storm.
		if e.Owner != "" && e.Addr == "" {
			return fmt.Errorf("%w: %v held by %q without an address", ErrInvalidView, e.Range, e.Owner)
		}
	}
	return nil
}
