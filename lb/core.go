package lb

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Defaults for CoreConfig.
const (
	DefaultSyncInterval   = 10 * time.Second
	DefaultStalenessBound = 3 * DefaultSyncInterval
)

// Errors returned by CoreConfig.Validate, wrapped with detail.
var (
	ErrNoNamespace    = errors.New("lb: namespace is empty")
	ErrSyncInterval   = errors.New("lb: sync interval must be positive")
	ErrStalenessBound = errors.New("lb: staleness bound must exceed the sync interval")
)

// errMalformed marks a response that breaks the protocol; it is counted in
// CoreStats.DroppedMalformed and dropped.
var errMalformed = errors.New("lb: malformed lookup response")

// CoreConfig configures a Core.
type CoreConfig struct {
	// Namespace is the namespace whose lease table the lookup follows.
	// Required; responses for other namespaces are ignored.
	Namespace string
	// Name identifies the lookup in the manager's records. Optional.
	Name string
	// SyncInterval is how often the lookup asks the manager for changes even
	// without pushes. Zero means DefaultSyncInterval (10 s).
	SyncInterval time.Duration
	// StalenessBound: when no up-to-date response was applied for this long,
	// by the lookup's clock, the core signals loss on every range. Zero means
	// three sync intervals (30 s by default). It must exceed SyncInterval.
	StalenessBound time.Duration
}

// DefaultCoreConfig returns the defaults. Set Namespace before use.
func DefaultCoreConfig() CoreConfig {
	return CoreConfig{SyncInterval: DefaultSyncInterval, StalenessBound: DefaultStalenessBound}
}

func (c CoreConfig) withDefaults() CoreConfig {
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.StalenessBound == 0 {
		c.StalenessBound = 3 * c.SyncInterval
	}
	return c
}

// Validate checks the configuration, zero durations taken as their defaults.
func (c CoreConfig) Validate() error {
	c = c.withDefaults()
	if c.Namespace == "" {
		return ErrNoNamespace
	}
	if c.SyncInterval <= 0 {
		return fmt.Errorf("%w: %v", ErrSyncInterval, c.SyncInterval)
	}
	if c.StalenessBound <= c.SyncInterval {
		return fmt.Errorf("%w: %v <= %v", ErrStalenessBound, c.StalenessBound, c.SyncInterval)
	}
	return nil
}

// Output is the work a Core call hands back to the caller.
type Output struct {
	// Send is a request to send now, or nil.
	Send *lease.LookupRequest
	// Loss is the loss-notification upcall: exactly the ranges whose
	// generation changed (not for Clean changes), merged, in ring order
	// (ascending End). Empty when nothing was lost.
	Loss []ring.Range
	// LossAll is set when the staleness bound passed; then Loss is
	// [ring.Full()].
	LossAll bool
}

// CoreStats counts what a Core did.
type CoreStats struct {
	Applied           uint64 // responses applied (snapshots and changes)
	Snapshots         uint64 // snapshots applied
	Changes           uint64 // changes applied from non-snapshot responses
	DroppedGap        uint64 // changes not continuing from our LSN but newer: a request was sent
	DroppedOld        uint64 // old or duplicated responses, dropped silently
	DroppedNonce      uint64 // changes from another manager incarnation: a request was sent
	DroppedMalformed  uint64 // snapshots not partitioning the circle, changes with bad LSNs
	Foreign           uint64 // responses for another namespace, ignored
	Requests          uint64 // requests returned in Output.Send
	LossNotifications uint64 // outputs with Loss from applied responses (LossAll not included)
	LossAll           uint64 // staleness-bound notifications on every range
}

// value is what the lookup knows about one arc. Owner is empty while free.
type value struct {
	owner, addr string
	gen         lease.Gen
	from        lease.Gen // lease.Entry.MigratedFrom
}

// lostState reports whether moving an arc from old to v loses state: its
// generation changed, and not by a clean migration from exactly the
// generation this lookup knew (lease.Entry.MigratedFrom). A lookup that
// missed a generation in between cannot know that no loss happened there,
// so it notifies.
func lostState(old, v value) bool {
	return old.gen != v.gen && (v.from == 0 || v.from != old.gen)
}

// Core is the Lookup library's pure state machine: it holds a copy of the
// lease table, follows the manager's change log and signals loss. See the
// package documentation for the protocol. It is not safe for concurrent use.
type Core struct {
	cfg          CoreConfig
	table        *ring.Table[value] // always compacted between calls
	nonce        uint64             // manager incarnation, 0 = none yet
	lsn          uint64
	haveTable    bool
	started      bool
	lastSync     time.Time // when an up-to-date response was last applied (or Start)
	nextPoll     time.Time
	lossAllFired bool
	stats        CoreStats
}

// NewCore returns a Core with one free arc of generation 0 and no table yet.
func NewCore(cfg CoreConfig) (*Core, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, table: ring.NewTable(value{})}, nil
}

// Start starts the staleness and poll clocks and returns the first request
// (ManagerNonce 0, LSN 0 on a fresh Core). Call it once.
func (c *Core) Start(now time.Time) Output {
	c.started = true
	c.lastSync = now
	c.nextPoll = now.Add(c.cfg.SyncInterval)
	return Output{Send: c.request()}
}

// Step applies a response from the manager, answered or pushed.
func (c *Core) Step(resp lease.LookupResponse, now time.Time) Output {
	if resp.Namespace != c.cfg.Namespace {
		c.stats.Foreign++
		return Output{}
	}
	if resp.Snapshot {
		return c.stepSnapshot(resp, now)
	}
	if !c.haveTable || resp.ManagerNonce != c.nonce {
		// Another incarnation's log means nothing to us; asking with our
		// nonce makes the manager answer with a snapshot.
		c.stats.DroppedNonce++
		return Output{Send: c.request()}
	}
	switch {
	case resp.FromLSN == c.lsn:
		return c.stepChanges(resp, now)
	case resp.LSN <= c.lsn:
		c.stats.DroppedOld++
		return Output{}
	default:
		// A gap (FromLSN > LSN: a push was lost) or an overlap with news:
		// ask for the changes after our LSN.
		c.stats.DroppedGap++
		return Output{Send: c.request()}
	}
}

func (c *Core) stepSnapshot(resp lease.LookupResponse, now time.Time) Output {
	if c.haveTable && resp.ManagerNonce == c.nonce && resp.LSN < c.lsn {
		c.stats.DroppedOld++
		return Output{}
	}
	t, err := buildTable(resp.Entries)
	if err != nil {
		c.stats.DroppedMalformed++
		return Output{}
	}
	var loss []ring.Range
	if c.haveTable {
		loss = diffGens(c.table, t)
	}
	c.table = t
	c.stats.Snapshots++
	return c.synced(resp, now, loss)
}

func (c *Core) stepChanges(resp lease.LookupResponse, now time.Time) Output {
	if err := checkChanges(resp); err != nil {
		c.stats.DroppedMalformed++
		return Output{}
	}
	// One step's changes follow each other clockwise without overlapping,
	// so UpdateAll applies them in one merge pass per step.
	rs := make([]ring.Range, len(resp.Changes))
	for i, ch := range resp.Changes {
		rs[i] = ch.Entry.Range
	}
	var lost []ring.Assignment[bool]
	one := c.table.Len() == 1
	c.table.UpdateAll(rs, func(i int, r ring.Range, old value) value {
		ch := resp.Changes[i]
		v := value{owner: ch.Entry.Owner, addr: ch.Entry.Addr, gen: ch.Entry.Gen, from: ch.Entry.MigratedFrom}
		if lostState(old, v) && !ch.Clean {
			lost = append(lost, ring.Assignment[bool]{Range: r, Value: true})
		}
		return v
	})
	// The table was compact: only around the changed ranges can arcs have
	// become equal. Comparing every pair of neighbours was a third of
	// applying a push at R = 65536 (BenchmarkApplyPush). A table of one
	// arc has an arbitrary end, which the split left between equal arcs.
	if one {
		c.table.Compact()
	} else {
		c.table.CompactNear(rs, nil)
	}
	c.stats.Changes += uint64(len(resp.Changes))
	return c.synced(resp, now, trueArcs(lostTable(lost)))
}

// lostTable marks the ranges of lost true, or is nil when there are none.
func lostTable(lost []ring.Assignment[bool]) *ring.Table[bool] {
	if len(lost) == 0 {
		return nil
	}
	t := ring.NewTable(false)
	t.SetAll(lost)
	return t
}

// synced records an applied response.
func (c *Core) synced(resp lease.LookupResponse, now time.Time, loss []ring.Range) Output {
	c.nonce = resp.ManagerNonce
	c.lsn = resp.LSN
	c.haveTable = true
	c.lastSync = now
	c.nextPoll = now.Add(c.cfg.SyncInterval)
	c.lossAllFired = false
	c.stats.Applied++
	if len(loss) > 0 {
		c.stats.LossNotifications++
	}
	return Output{Loss: loss}
}

// Tick signals loss on every range once when the staleness bound passed, and
// returns the periodic request when it is due.
func (c *Core) Tick(now time.Time) Output {
	var out Output
	if !c.started && !c.haveTable {
		return out
	}
	if !c.lossAllFired && now.Sub(c.lastSync) >= c.cfg.StalenessBound {
		c.lossAllFired = true
		c.stats.LossAll++
		out.LossAll = true
		out.Loss = []ring.Range{ring.Full()}
	}
	if !now.Before(c.nextPoll) {
		out.Send = c.request()
		c.nextPoll = now.Add(c.cfg.SyncInterval)
	}
	return out
}

// NextDeadline is when Tick next has work: the next poll, or the staleness
// bound if it has not fired yet, whichever is earlier. It is the zero time
// before Start and before any table.
func (c *Core) NextDeadline() time.Time {
	if !c.started && !c.haveTable {
		return time.Time{}
	}
	d := c.nextPoll
	if !c.lossAllFired {
		if s := c.lastSync.Add(c.cfg.StalenessBound); s.Before(d) {
			d = s
		}
	}
	return d
}

func (c *Core) request() *lease.LookupRequest {
	c.stats.Requests++
	return &lease.LookupRequest{
		Namespace:    c.cfg.Namespace,
		Lookup:       c.cfg.Name,
		ManagerNonce: c.nonce,
		LSN:          c.lsn,
	}
}

// Lookup returns the address of the owner at keyHash, the maximal arc around
// it with the same owner, address and generation, and that generation. ok is
// false before the first table (all results zero) and when the arc is free
// (addr empty; r and gen are still those of the free arc). It does not
// allocate.
func (c *Core) Lookup(keyHash uint64) (addr string, r ring.Range, gen lease.Gen, ok bool) {
	if !c.haveTable {
		return "", ring.Range{}, 0, false
	}
	r, v := c.table.At(c.table.Find(keyHash))
	if r.IsFull() {
		r = ring.Full()
	}
	return v.addr, r, v.gen, v.owner != ""
}

// Owner returns the owner's name at keyHash, empty when free or before the
// first table.
func (c *Core) Owner(keyHash uint64) string {
	if !c.haveTable {
		return ""
	}
	return c.table.Get(keyHash).owner
}

// Entries returns the whole table, compacted (adjacent arcs with equal owner,
// address and generation merged), in order of End. A table of one arc is
// returned as ring.Full(). Before the first table it is one free arc of
// generation 0.
func (c *Core) Entries() []lease.Entry {
	out := make([]lease.Entry, 0, c.table.Len())
	c.table.Each(func(r ring.Range, v value) {
		if r.IsFull() {
			r = ring.Full()
		}
		out = append(out, lease.Entry{Range: r, Owner: v.owner, Addr: v.addr, Gen: v.gen, MigratedFrom: v.from})
	})
	return out
}

// Len is the number of arcs of the table Entries returns.
func (c *Core) Len() int {
	if c.table == nil {
		return 0
	}
	return c.table.Len()
}

// HaveTable reports whether a table was applied.
func (c *Core) HaveTable() bool { return c.haveTable }

// LSN is the last LSN applied, 0 if none.
func (c *Core) LSN() uint64 { return c.lsn }

// ManagerNonce is the manager incarnation of the table, 0 if none.
func (c *Core) ManagerNonce() uint64 { return c.nonce }

// Stats returns the counters.
func (c *Core) Stats() CoreStats { return c.stats }

// checkChanges checks that a non-snapshot response is internally consistent:
// LSN >= FromLSN and the changes' LSNs lie in (FromLSN, LSN], in order.
func checkChanges(resp lease.LookupResponse) error {
	if resp.LSN < resp.FromLSN {
		return fmt.Errorf("%w: LSN %d < FromLSN %d", errMalformed, resp.LSN, resp.FromLSN)
	}
	prev := resp.FromLSN
	for _, ch := range resp.Changes {
		if ch.LSN <= resp.FromLSN || ch.LSN > resp.LSN || ch.LSN < prev {
			return fmt.Errorf("%w: change LSN %d out of (%d, %d] or out of order",
				errMalformed, ch.LSN, resp.FromLSN, resp.LSN)
		}
		prev = ch.LSN
	}
	return nil
}

// buildTable builds a compacted table from snapshot entries, which must cover
// the circle exactly once (in any order).
func buildTable(es []lease.Entry) (*ring.Table[value], error) {
	switch len(es) {
	case 0:
		return nil, fmt.Errorf("%w: empty snapshot", errMalformed)
	case 1:
		if !es[0].Range.IsFull() {
			return nil, fmt.Errorf("%w: one entry %v does not cover the circle", errMalformed, es[0].Range)
		}
	}
	byEnd := func(a, b lease.Entry) int { return cmp.Compare(a.Range.End, b.Range.End) }
	sorted := es // read only; a Lookup's tables arrive sorted
	if !slices.IsSortedFunc(sorted, byEnd) {
		sorted = slices.Clone(es)
		slices.SortStableFunc(sorted, byEnd)
	}
	if n := len(sorted); n > 1 {
		for i, e := range sorted {
			if i > 0 && e.Range.End == sorted[i-1].Range.End {
				return nil, fmt.Errorf("%w: two entries end at %x", errMalformed, e.Range.End)
			}
			if prev := sorted[(i+n-1)%n].Range.End; e.Range.Start != prev {
				return nil, fmt.Errorf("%w: entry %v does not start where %x ends", errMalformed, e.Range, prev)
			}
		}
	}
	// Sorted by End, the entries' ends are the table's boundaries (with the
	// fresh table's boundary at 0), and each arc's value is that of the
	// first entry ending at or after it: one merge pass, no search. This
	// is what SetAll of the entries leaves, without the assignments and
	// their boundaries sorted again; a lookup builds a whole table (4,096
	// arcs at the default ring size) each time it connects.
	xs := make([]uint64, len(sorted))
	for i, e := range sorted {
		xs[i] = e.Range.End
	}
	t := ring.NewTable(value{})
	t.SplitSorted(xs)
	j := 0
	for i := range t.Len() {
		r, _ := t.At(i)
		for j < len(sorted) && sorted[j].Range.End < r.End {
			j++
		}
		e := sorted[0] // past the last end: the entry that wraps
		if j < len(sorted) {
			e = sorted[j]
		}
		t.SetValue(i, value{owner: e.Owner, addr: e.Addr, gen: e.Gen, from: e.MigratedFrom})
	}
	t.Compact()
	return t, nil
}

// diffGens returns the merged ranges where the generations of a and b differ.
func diffGens(a, b *ring.Table[value]) []ring.Range {
	ends := make([]uint64, 0, a.Len()+b.Len())
	for _, t := range []*ring.Table[value]{a, b} {
		for i := range t.Len() {
			r, _ := t.At(i)
			ends = append(ends, r.End)
		}
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	// Each (previous end, e] lies inside one arc of a and one of b.
	var lost []ring.Assignment[bool]
	for k, e := range ends {
		if !lostState(a.Get(e), b.Get(e)) {
			continue
		}
		r := ring.Range{Start: ends[(k+len(ends)-1)%len(ends)], End: e}
		lost = append(lost, ring.Assignment[bool]{Range: r, Value: true})
	}
	return trueArcs(lostTable(lost))
}

// trueArcs returns the merged arcs of t marked true, in order of End.
func trueArcs(t *ring.Table[bool]) []ring.Range {
	if t == nil {
		return nil
	}
	t.Compact()
	var out []ring.Range
	t.Each(func(r ring.Range, lost bool) {
		if !lost {
			return
		}
		if r.IsFull() {
			r = ring.Full()
		}
		out = append(out, r)
	})
	return out
}
