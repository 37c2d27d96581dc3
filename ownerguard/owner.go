package ownerguard

import (
	"time"

	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Owner is the network client of the lease protocol: it keeps a session with
// the manager's leader over OwnerService.Lease, drives a Core, and answers
// ownership checks from the Core's latest View. Its checks are safe for
// concurrent use, lock-free and allocation-free. An Owner runs one
// incarnation: after Close, a restart is a new Owner.
type Owner struct {
	cfg   OwnerConfig
	clock Clock
	// mono is the clock when it is a clientshell.MonoClock (the default),
	// which the checks read directly: see nowNano.
	mono   clientshell.MonoClock
	isMono bool
	log    *slog.Logger

	load        loadMeter // load.go
	view        atomic.Pointer[View]
	incarnation atomic.Uint64
	abandon     atomic.Bool // Abandon: end without a clean leave

	ready     chan struct{}
	readyOnce sync.Once

	// Counters written by the session and stream goroutines.
	attempts, reconnects, redirects, stalls atomic.Uint64
	sessions                                atomic.Uint64
	requests, responses, malformed, unsent  atomic.Uint64
	// waiting is when the oldest request not yet answered was written (0:
	// none); lastWait is how long the last answer took from it.
	waiting, lastWait atomic.Int64

	mu        sync.Mutex
	started   bool
	closed    bool
	cancel    context.CancelFunc
	done      chan struct{} // closed when the session goroutine has ended
	updated   chan struct{}
	err       error
	coreStats CoreStats
	upcalls   clientshell.Upcalls[upcall]
	header    string         // the namespace's routing header, "" until heard
	onHeader  []func(string) // watchRoutingHeader's callbacks
	mig       *migShell      // OwnerConfig.Migration; nil when off
}

type upcall struct{ granted, revoked []ring.Range }

// NewOwner validates cfg and returns an Owner holding nothing. Start opens
// the session.
func NewOwner(cfg OwnerConfig) (*Owner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Managers = append([]string(nil), cfg.Managers...)
	o := &Owner{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		ready:   make(chan struct{}),
		updated: make(chan struct{}),
	}
	o.mono, o.isMono = cfg.Clock.(clientshell.MonoClock)
	o.load.disabled = cfg.LoadWindow < 0
	o.view.Store(emptyView())
	return o, nil
}

// Start starts the session goroutine under a fresh random incarnation and
// returns at once. The session ends when ctx is done or Close is called,
// whichever comes first; either way the incarnation is over.
func (o *Owner) Start(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.closed:
		return ErrClosed
	case o.started:
		return ErrStarted
	}
	inc := rand.Uint64()
	for inc == 0 {
		inc = rand.Uint64()
	}
	core, err := NewCore(o.cfg.coreConfig(inc))
	if err != nil {
		return err
	}
	o.incarnation.Store(inc)
	o.log = o.cfg.Logger.With("namespace", o.cfg.Namespace, "owner", o.cfg.Name,
		"incarnation", fmt.Sprintf("%016x", inc))
	o.started = true
	ctx, o.cancel = context.WithCancel(ctx)
	o.done = make(chan struct{})
	if onOwnership := o.cfg.OnOwnership; onOwnership != nil {
		o.upcalls.Start(func(u upcall) { onOwnership(u.granted, u.revoked) })
	}
	if o.cfg.Migration != nil {
		o.mig = newMigShell(o, *o.cfg.Migration)
	}
	s := newSession(o, core)
	go func() {
		defer close(o.done)
		s.run(ctx)
		o.upcalls.Stop()
	}()
	return nil
}

// Incarnation is the nonce of the running incarnation; zero before Start.
func (o *Owner) Incarnation() uint64 { return o.incarnation.Load() }

// Ready is closed when a manager has first accepted the session (a response
// was accepted). It is never closed if that never happens.
func (o *Owner) Ready() <-chan struct{} { return o.ready }

// View returns the latest published snapshot of the held set.
func (o *Owner) View() *View { return o.view.Load() }

// GetOwnershipHandle reports whether the key with hash keyHash is held now,
// by the Owner's clock, and if so returns a handle on it. It takes no lock
// and does not allocate.
func (o *Owner) GetOwnershipHandle(keyHash uint64) (Handle, bool) {
	return o.view.Load().handleAt(keyHash, o.nowNano())
}

// GetOwnershipHandleKey is GetOwnershipHandle for a routing-header value,
// hashed with ring.HashString as every router hashes it.
func (o *Owner) GetOwnershipHandleKey(key string) (Handle, bool) {
	return o.GetOwnershipHandle(ring.HashString(key))
}

// CheckContinuousOwnership reports whether h's key has been held without
// interruption since h was made. It takes no lock and does not allocate.
func (o *Owner) CheckContinuousOwnership(h Handle) bool {
	return o.view.Load().continuousAt(h, o.nowNano())
}

// nowNano reads the Owner's clock, in unix nanoseconds, on every call: the
// checks never reuse a reading. The default clock is read without an
// interface call or a time.Time (one monotonic read, as its Now makes);
// any other Clock through its Now.
func (o *Owner) nowNano() int64 {
	if o.isMono {
		return o.mono.UnixNano()
	}
	return o.clock.Now().UnixNano()
}

// RoutingHeader is the namespace's routing header as the manager named it,
// or "" before the first response. A Guard built on this Owner without a
// header of its own reads the key from it.
func (o *Owner) RoutingHeader() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.header
}

// watchRoutingHeader calls fn with the routing header now if it is known,
// and again whenever the manager names another one. Calls come from the
// session goroutine, in order; fn must be quick.
func (o *Owner) watchRoutingHeader(fn func(string)) {
	o.mu.Lock()
	o.onHeader = append(o.onHeader, fn)
	h := o.header
	o.mu.Unlock()
	if h != "" {
		fn(h)
	}
}

// setRoutingHeader records the header a manager named, if it is a valid
// header name and a new one.
func (o *Owner) setRoutingHeader(h string) {
	if h == "" || !validHeaderName(h) || strings.HasSuffix(strings.ToLower(h), "-bin") {
		return
	}
	o.mu.Lock()
	if h == o.header {
		o.mu.Unlock()
		return
	}
	o.header = h
	fns := slices.Clone(o.onHeader)
	o.mu.Unlock()
	o.log.Info("ownerguard: the namespace's routing header", "header", h)
	for _, fn := range fns {
		fn(h)
	}
}

// Held returns the leases held now, in ring order.
func (o *Owner) Held() []lease.Lease { return o.view.Load().Held(o.clock.Now()) }

// Updated returns a channel that is closed at the next change of the held
// set, of Err, or when a manager accepts the session; each change replaces
// the channel. Take the channel before reading the state it guards.
func (o *Owner) Updated() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.updated
}

// Stats returns the counters.
func (o *Owner) Stats() OwnerStats {
	o.mu.Lock()
	cs := o.coreStats
	o.mu.Unlock()
	return OwnerStats{
		Attempts:   o.attempts.Load(),
		Reconnects: o.reconnects.Load(),
		Redirects:  o.redirects.Load(),
		Sessions:   o.sessions.Load(),
		Stalls:     o.stalls.Load(),
		Requests:   o.requests.Load(),
		Responses:  o.responses.Load(),
		Malformed:  o.malformed.Load(),
		Unsent:     o.unsent.Load(),
		LastWait:   time.Duration(o.lastWait.Load()),
		Core:       cs,
		Migration:  o.migCounters(),
	}
}

// Err returns the last permanent refusal from a manager (it wraps
// ErrUnknownNamespace, ErrOwnerInUse or ErrRejected, and the gRPC status),
// or nil. The Owner keeps retrying after one; Err returns nil again once a
// manager accepts the session.
func (o *Owner) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Close ends the session and the incarnation with a clean leave: checks
// fail from then on, the ownership upcall hears every held range revoked,
// and only then a last request tells the manager that this owner holds
// nothing and is leaving (lease.LeaseRequest.Leaving), so that the manager
// regrants its arcs to the other owners at once rather than when they
// expire, T·65/60 later. If a request is awaiting its answer, Close waits
// for that answer first (without taking anything it grants), since the
// manager takes a leaving request that does not acknowledge its latest
// message as a leave and nothing more (ranges it lists as migrated count as
// plain releases); then the leaving request goes out and the stream is half-closed so the
// manager learns the session is over. With OwnerConfig.Migration, Close
// first asks the manager to move every range elsewhere with its state and
// serves what is not yet recalled meanwhile, for up to HandoverTimeout
// (see Migrator). Close then waits up to CloseTimeout in all
// (a negative CloseTimeout may cancel the stream before the leaving request
// is written; a leaving request that is lost or dropped leaves the arcs to
// expire as after a crash).
// Every goroutine the Owner started has ended when Close returns,
// including pending upcalls. Close is idempotent. Canceling Start's context
// ends the session the same way.
// Abandon ends the incarnation as a crash would: checks fail from then on
// and the ownership upcall hears every held range revoked, as with Close,
// but the manager is not told; it regrants the arcs only when they expire,
// T·65/60 after their last renewal. It is for tests and benchmarks that
// model crashed or restarted processes (PRS §7.1); a server that stops
// should call Close. Abandon after Close (or Close after Abandon) does
// nothing more.
func (o *Owner) Abandon() error {
	o.abandon.Store(true)
	return o.Close()
}

func (o *Owner) Close() error {
	o.mu.Lock()
	o.closed = true
	cancel, done := o.cancel, o.done
	o.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// signalLocked wakes the Updated waiters.
func (o *Owner) signalLocked() {
	close(o.updated)
	o.updated = make(chan struct{})
}

// publish installs v for the checks, records the core's counters, queues the
// ownership upcall and wakes Updated waiters if the held set changed.
func (o *Owner) publish(v *View, granted, revoked []ring.Range, cs CoreStats) {
	o.view.Store(v)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.coreStats = cs
	if len(granted) == 0 && len(revoked) == 0 {
		return
	}
	o.signalLocked()
	if o.cfg.OnOwnership != nil {
		o.upcalls.Push(upcall{granted, revoked})
	}
}

// accepted records that a manager accepted the session.
func (o *Owner) accepted() {
	o.sessions.Add(1)
	o.mu.Lock()
	o.err = nil
	o.signalLocked()
	o.mu.Unlock()
	// Ready after Err is cleared: a caller woken by Ready must not see
	// the refusal of an attempt before this session.
	o.readyOnce.Do(func() { close(o.ready) })
}

// setErr records a permanent refusal.
func (o *Owner) setErr(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err = err
	o.signalLocked()
}
