package lb

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Lookup is the network Lookup library: it follows a namespace's lease table
// over delta xDS from the manager's leader, drives a Core with it, and
// answers Lookup from the latest published table. Lookup, LookupKey,
// Entries, Version and Stats are safe for concurrent use; Lookup and
// LookupKey take no lock and do not allocate.
type Lookup struct {
	cfg LookupConfig
	log *slog.Logger

	table   atomic.Pointer[chunked]
	version atomic.Uint64

	ready     chan struct{}
	readyOnce sync.Once

	// Counters written by the session goroutine.
	attempts, reconnects, redirects, stalls atomic.Uint64
	updates, rejected, nacks, heartbeats    atomic.Uint64
	lossNotifications, lossAll              atomic.Uint64
	servedLSN                               atomic.Uint64

	mu        sync.Mutex
	started   bool
	closed    bool
	cancel    context.CancelFunc
	done      chan struct{} // closed when the session goroutine has ended
	updated   chan struct{}
	coreStats CoreStats
	upcalls   clientshell.Upcalls[upcall]
}

type upcall struct {
	ranges []ring.Range
	all    bool
}

// NewLookup validates cfg and returns a Lookup with no table. Start
// connects.
func NewLookup(cfg LookupConfig) (*Lookup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Managers = slices.Clone(cfg.Managers)
	cfg.DialOptions = slices.Clone(cfg.DialOptions)
	return &Lookup{
		cfg:     cfg,
		log:     cfg.Logger.With("namespace", cfg.Namespace, "lookup", cfg.Name),
		ready:   make(chan struct{}),
		updated: make(chan struct{}),
	}, nil
}

// Start starts the stream goroutine and returns at once. The Lookup runs
// until ctx is done or Close is called.
func (l *Lookup) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return ErrClosed
	case l.started:
		return ErrStarted
	}
	core, err := NewCore(l.cfg.coreConfig())
	if err != nil {
		return err
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	if onLoss := l.cfg.OnLoss; onLoss != nil {
		l.upcalls.Start(func(u upcall) { onLoss(u.ranges, u.all) })
	}
	s := newSession(l, core)
	go func() {
		defer close(l.done)
		s.run(ctx)
		l.upcalls.Stop()
	}()
	return nil
}

// Ready is closed once the first full table has been applied.
func (l *Lookup) Ready() <-chan struct{} { return l.ready }

// Lookup returns the address of the owner of keyHash, the maximal arc around
// it with the same owner, address and generation, and that generation. ok is
// false before the first table (all results zero) and when the arc is free
// (addr empty; r and gen are those of the free arc). It reads an immutable
// snapshot, takes no lock and does not allocate.
func (l *Lookup) Lookup(keyHash uint64) (addr string, r ring.Range, gen lease.Gen, ok bool) {
	t := l.table.Load()
	if t == nil {
		return "", ring.Range{}, 0, false
	}
	e := t.find(keyHash)
	return e.Addr, e.Range, e.Gen, e.Owner != ""
}

// LookupKey is Lookup for a routing-header value, hashed with
// ring.HashString as every router hashes it.
func (l *Lookup) LookupKey(key string) (addr string, r ring.Range, gen lease.Gen, ok bool) {
	return l.Lookup(ring.HashString(key))
}

// Entries returns the latest table, compacted, in order of End (see
// Core.Entries); nil before the first table.
func (l *Lookup) Entries() []lease.Entry {
	if t := l.table.Load(); t != nil {
		return t.flat()
	}
	return nil
}

// Len is the number of arcs in the latest table (len(Entries()) without
// the copy); 0 before the first table.
func (l *Lookup) Len() int {
	if t := l.table.Load(); t != nil {
		return t.n
	}
	return 0
}

// Version counts the updates applied to the table.
func (l *Lookup) Version() uint64 { return l.version.Load() }

// Updated returns a channel that is closed at the next applied update; each
// update replaces the channel. Take the channel before reading the state it
// guards, then wait on it for the next change.
func (l *Lookup) Updated() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.updated
}

// Stats returns the counters.
func (l *Lookup) Stats() LookupStats {
	l.mu.Lock()
	cs := l.coreStats
	l.mu.Unlock()
	return LookupStats{
		Attempts:          l.attempts.Load(),
		Reconnects:        l.reconnects.Load(),
		Redirects:         l.redirects.Load(),
		Stalls:            l.stalls.Load(),
		Updates:           l.updates.Load(),
		Rejected:          l.rejected.Load(),
		NACKs:             l.nacks.Load(),
		Heartbeats:        l.heartbeats.Load(),
		LossNotifications: l.lossNotifications.Load(),
		LossAll:           l.lossAll.Load(),
		ServedLSN:         l.servedLSN.Load(),
		Core:              cs,
	}
}

// Close stops the Lookup: when it returns, the stream is gone and every
// goroutine the Lookup started has ended, pending upcalls delivered. The
// last table stays readable. Close is idempotent.
func (l *Lookup) Close() error {
	l.mu.Lock()
	l.closed = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// publish installs a new table, counts the update and wakes Updated
// waiters; the first table closes Ready.
func (l *Lookup) publish(t *chunked, cs CoreStats) {
	l.table.Store(t)
	l.version.Add(1)
	l.updates.Add(1)
	l.readyOnce.Do(func() { close(l.ready) })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.coreStats = cs
	close(l.updated)
	l.updated = make(chan struct{})
}

// setCoreStats records the core's counters.
func (l *Lookup) setCoreStats(cs CoreStats) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.coreStats = cs
}

// notify queues the loss upcall.
func (l *Lookup) notify(ranges []ring.Range, all bool) {
	l.lossNotifications.Add(1)
	if all {
		l.lossAll.Add(1)
	}
	if l.cfg.OnLoss == nil {
		return
	}
	l.upcalls.Push(upcall{ranges, all})
}
