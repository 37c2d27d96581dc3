package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/fuge-project/fuge/manager"
)

// Params is one simulated run. Every field is drawn from the seed by
// paramsFor, so a seed replays exactly.
type Params struct {
	Seed        uint64
	Owners      int // initial owners
	MaxOwners   int // joins stop here
	Lookups     int
	RingSize    int
	T           time.Duration // owner lease; the manager holds T·65/60
	FaultPhase  time.Duration // faults happen in [0, FaultPhase)
	Settle      time.Duration // liveness bound once faults stop
	Link        linkFaults
	OwnerRates  [2]float64 // owner clock rates drawn from this interval
	LookupRates [2]float64
	// SyncInterval and Staleness configure the lookups.
	SyncInterval, Staleness time.Duration
	FaultEvery              time.Duration // mean time between faults
	DisableRaceFilter       bool          // negative control
	// TruncateLoss plants a bug in the lookups (negative control): each
	// loss notification reports only its first range.
	TruncateLoss bool
	// LeaveKeepsBelief plants a bug in the owners (negative control): an
	// owner that leaves cleanly tells the manager it holds nothing but goes
	// on believing what it held until those leases expire.
	LeaveKeepsBelief bool
	// UnsafeReplace plants the bug issue 10 found (negative control): the
	// manager hands a new incarnation its predecessor's arcs at once,
	// although the predecessor may still run, cut off, and believe them.
	UnsafeReplace bool
	// Migration gives every owner a MigrationAddr: clean handoffs move
	// state, over transfers that are delayed, dropped or fail (migrate.go).
	Migration bool
	// UnsafeServeImports plants a bug in the owners (negative control):
	// an owner serves a range granted as an import at once, before its
	// state arrived.
	UnsafeServeImports bool
	// Balance is the namespace's balancing policy; owners report the load
	// model's load of what they hold on every request during the fault
	// phase, which swings from time to time.
	Balance string
	// UnsafeBalanceNoRecall plants a bug in the manager (negative
	// control): a balancing move hands arcs over without recalling them.
	UnsafeBalanceNoRecall bool
	// Scripted, when set, replaces the random fault schedule.
	Scripted func(w *world)
}

// paramsFor draws a run's parameters from its seed.
func paramsFor(seed uint64) Params {
	r := rand.New(rand.NewPCG(seed, 0x73696d))
	T := 10 * time.Second
	p := Params{
		Seed:         seed,
		Owners:       2 + r.IntN(4),
		Lookups:      1 + r.IntN(3),
		RingSize:     []int{8, 16, 64, 256}[r.IntN(4)],
		T:            T,
		FaultPhase:   3 * time.Minute,
		Link:         linkFaults{minDelay: time.Millisecond, maxDelay: time.Duration(1+r.IntN(200)) * time.Millisecond},
		OwnerRates:   [2]float64{0.97, 1.03},
		LookupRates:  [2]float64{0.97, 1.03},
		SyncInterval: T / 5,
		Staleness:    3 * T / 5,
		FaultEvery:   time.Duration(2+r.IntN(10)) * time.Second,
	}
	p.MaxOwners = p.Owners + 3
	p.Balance = []string{manager.BalanceSeeds, manager.BalanceFit}[r.IntN(2)]
	p.Link.drop = []float64{0, 0.01, 0.05, 0.2}[r.IntN(4)]
	p.Link.dup = []float64{0, 0.01, 0.1}[r.IntN(3)]
	p.Migration = r.IntN(2) == 0
	// Once faults stop: dead sessions expire after the hold time, recalls
	// and grants take a few round trips (plus race backoffs), and lookups
	// sync within one interval.
	p.Settle = manager.HoldDuration(T) + T + 2*p.SyncInterval
	return p
}

// Bound is B, the recovery-notification bound the checker enforces: a loss
// committed at true time t must reach every lookup by t + B. Either a
// response sent after t arrives (within the longest delay) or the lookup's
// staleness bound fires loss on every range, measured on its clock, which
// may run as slow as the lowest lookup rate.
func (p Params) Bound() time.Duration {
	return time.Duration(float64(p.Staleness)/p.LookupRates[0]) + p.Link.maxDelay + time.Millisecond
}

// world is one simulated cluster.
type world struct {
	p       Params
	s       *scheduler
	net     *network
	mgr     *managerNode
	owners  map[string]*ownerNode
	order   []*ownerNode // in creation order, for deterministic iteration
	lookups []*lookupNode
	check   *checker
	load    *loadModel
	// vnodesMoved and movingRounds: balancing of earlier leaders.
	vnodesMoved, movingRounds uint64
	// leaves and racingLeaves: clean leaves earlier leaders accepted, and
	// how many of those raced a message to the owner.
	leaves, racingLeaves uint64
	log                  io.Writer
	faults               bool // the fault phase is on
}

func newWorld(p Params, log io.Writer) *world {
	s := &scheduler{rnd: rand.New(rand.NewPCG(p.Seed, 0x6675676573696d))}
	w := &world{p: p, s: s, owners: map[string]*ownerNode{}, log: log}
	w.net = &network{s: s, faults: p.Link, partitioned: map[string]bool{}}
	w.check = newChecker(w)
	w.load = newLoadModel(p.Seed)
	mcfg := manager.DefaultConfig()
	mcfg.Nonce = s.rnd.Uint64() | 1
	mcfg.LeaseDuration = p.T
	mcfg.RaceBackoffMin, mcfg.RaceBackoffMax = p.T/600, p.T/60
	mcfg.Rand = rand.New(rand.NewPCG(s.rnd.Uint64(), 1))
	mcfg.DisableRaceFilter = p.DisableRaceFilter
	mcfg.UnsafeReplace = p.UnsafeReplace
	mcfg.UnsafeBalanceNoRecall = p.UnsafeBalanceNoRecall
	core, err := manager.New(mcfg)
	if err != nil {
		panic(err)
	}
	nc := manager.NamespaceConfig{Name: namespace, RingSize: p.RingSize, Balance: p.Balance, BalanceInterval: p.T / 4, BalanceMinLoad: 1}
	if err := core.CreateNamespace(nc, epoch); err != nil {
		panic(err)
	}
	state, err := manager.NewNamespaceState(nc, mcfg)
	if err != nil {
		panic(err)
	}
	w.mgr = &managerNode{w: w, core: core, cfg: mcfg, clk: clock{rate: 1}, state: state}
	for i := 0; i < p.Lookups; i++ {
		l := &lookupNode{w: w, name: fmt.Sprintf("lookup%d", i), clk: w.drawClock(p.LookupRates)}
		w.lookups = append(w.lookups, l)
	}
	return w
}

func (w *world) drawClock(rates [2]float64) clock {
	return clock{
		offset: time.Duration(w.s.rnd.Int64N(int64(time.Hour))),
		rate:   rates[0] + w.s.rnd.Float64()*(rates[1]-rates[0]),
	}
}

func (w *world) addOwner() *ownerNode {
	o := &ownerNode{w: w, name: fmt.Sprintf("owner%d", len(w.order)), clk: w.drawClock(w.p.OwnerRates)}
	w.owners[o.name] = o
	w.order = append(w.order, o)
	o.start()
	return o
}

func (w *world) logf(format string, args ...any) {
	if w.log != nil {
		fmt.Fprintf(w.log, "%12v  %s\n", w.s.now, fmt.Sprintf(format, args...))
	}
}

func (w *world) violate(format string, args ...any) {
	w.check.violation(fmt.Sprintf(format, args...))
}

// Result is what one run found.
type Result struct {
	Seed       uint64
	Events     uint64
	Violations []string
	// VNodesMoved and MovingRounds count the balancing policy's moves,
	// over every leader of the run.
	VNodesMoved, MovingRounds uint64
	// Leaves counts the clean leaves accepted, RacingLeaves those of them
	// that did not acknowledge the manager's latest message.
	Leaves, RacingLeaves uint64
}

// addLeaderStats adds the current leader's balancing and leave counters
// to the run's (a failover starts the counters afresh).
func (w *world) addLeaderStats() {
	bs, _ := w.mgr.core.BalanceStats(namespace)
	w.vnodesMoved += bs.VNodesMoved
	w.movingRounds += bs.MovingRounds
	st := w.mgr.core.Stats()
	w.leaves += st.Leaves
	w.racingLeaves += st.AcceptedRacingLeaves
}

// run executes the whole schedule: faults, then quiet until the liveness
// deadline, then the liveness check.
func run(p Params, log io.Writer) Result { return runWorld(newWorld(p, log)) }

// runWorld runs w's schedule (run).
func runWorld(w *world) Result {
	p, log := w.p, w.log
	for _, l := range w.lookups {
		l.start()
	}
	for i := 0; i < p.Owners; i++ {
		w.addOwner()
	}
	w.faults = true
	if p.Scripted != nil {
		p.Scripted(w)
	} else {
		w.scheduleFaults()
		w.scheduleSwings()
	}
	each := func() {
		w.check.everyEvent()
		if err := w.mgr.core.Verify(); err != nil {
			w.violate("core invariant: %v", err)
		}
	}
	w.s.run(p.FaultPhase, each)
	w.endFaults()
	w.s.run(p.FaultPhase+p.Settle, each)
	w.check.liveness()
	if log != nil {
		w.summary()
	}
	w.addLeaderStats()
	return Result{Seed: p.Seed, Events: w.s.count, Violations: w.check.found, VNodesMoved: w.vnodesMoved, MovingRounds: w.movingRounds,
		Leaves: w.leaves, RacingLeaves: w.racingLeaves}
}

// summary prints what the protocol did in a verbose run.
func (w *world) summary() {
	st := w.mgr.core.Stats()
	w.logf("manager: %d requests, %d grants, %d recalls, %d releases, %d expiries, %d clean leaves, %d sessions expired, %d racing requests dropped, %d stale dropped",
		st.Requests, st.Grants, st.Recalls, st.Releases, st.Expiries, st.Leaves, st.SessionExpiries, st.DroppedRacing, st.DroppedStale)
	bs, _ := w.mgr.core.BalanceStats(namespace)
	w.logf("balance (%s, since the last failover): %d rounds, %d moving, %d vnodes and %d ranges moved, %d load swings",
		w.p.Balance, bs.Rounds, bs.MovingRounds, bs.VNodesMoved, bs.RangesMoved, w.load.swing)
	for _, l := range w.lookups {
		ls := l.core.Stats()
		w.logf("%s: %d responses applied (%d snapshots), %d loss notifications, %d loss-on-everything, %d gaps re-fetched",
			l.name, ls.Applied, ls.Snapshots, ls.LossNotifications, ls.LossAll, ls.DroppedGap)
	}
	arcs, _ := w.mgr.core.Leases(namespace)
	w.logf("final lease table: %d arcs; %d violations of I1, generations, I4 (B=%v) and liveness", len(arcs), len(w.check.found), w.p.Bound())
}
