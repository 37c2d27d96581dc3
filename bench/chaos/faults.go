package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// A scenario injects one fault and heals it before it returns (or when ctx
// ends). rng, seeded from the run's seed, picks its targets and timings.
type scenario func(ctx context.Context, h *Harness, rng *rand.Rand)

// Scenarios lists every named fault, in the order of the issue.
var Scenarios = []struct {
	Name string
	Run  scenario
}{
	{"owner-crash", ownerCrash},
	{"owner-pause-past-lease", ownerPause(func(l Layout) time.Duration { return 2 * l.T })},
	{"owner-pause-under-hold", ownerPause(func(l Layout) time.Duration { return l.hold() * 9 / 10 })},
	{"owner-pause-over-hold", ownerPause(func(l Layout) time.Duration { return l.hold() * 11 / 10 })},
	{"leader-crash-during-grants", leaderCrash},
	{"leader-pause", leaderPause},
	{"leader-restart-during-recalls", leaderRestartDuringRecalls},
	{"raft-minority-partition", raftMinority},
	{"no-quorum-then-heal", noQuorum},
	{"owner-manager-partition", ownerPartition(true, true)},
	{"owner-manager-partition-up", ownerPartition(true, false)},
	{"owner-manager-partition-down", ownerPartition(false, true)},
	{"proxy-cut-off-while-moving", proxyCutOff},
	{"second-incarnation", secondIncarnation},
	{"owner-restart-same-address", sameAddressRestart},
	{"join-leave-churn", churn},
	{"clock-owner-fast", ownerClock(1.08)},
	{"clock-owner-slow", ownerClock(0.93)},
	{"clock-manager-fast", managerClock(1.08)},
	{"clock-manager-frozen", managerClock(0)},
}

// ScenarioNames lists the names.
func ScenarioNames() []string {
	var n []string
	for _, s := range Scenarios {
		n = append(n, s.Name)
	}
	return n
}

func lookupScenario(name string) (scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s.Run, true
		}
	}
	return nil, false
}

// sleep waits d or until ctx ends. The harness schedules faults in real
// time; it never waits for an outcome this way.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (h *Harness) note(format string, args ...any) {
	h.Log.Info(fmt.Sprintf(format, args...))
}

func (h *Harness) ownerNames() []string {
	var n []string
	for i := range h.L.Owners {
		n = append(n, "p"+strconv.Itoa(i+1))
	}
	return n
}

// pickOwner chooses an owner that is running and not paused.
func (h *Harness) pickOwner(rng *rand.Rand) string {
	names := h.ownerNames()
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for _, n := range names {
		if p := h.get(n); p != nil && !exited(p) && !p.pause {
			return n
		}
	}
	return names[0]
}

// ensureOwner restarts name if its process is gone.
func (h *Harness) ensureOwner(name string, rate float64) {
	if p := h.get(name); p == nil || exited(p) {
		if err := h.startOwner(name, "", rate); err != nil {
			h.note("restart %s: %v", name, err)
		}
	}
}

func ownerCrash(ctx context.Context, h *Harness, rng *rand.Rand) {
	n := h.pickOwner(rng)
	h.note("kill -9 %s", n)
	h.kill(h.get(n))
	sleep(ctx, 2*h.L.hold())
	h.ensureOwner(n, 1)
}

func ownerPause(d func(Layout) time.Duration) scenario {
	return func(ctx context.Context, h *Harness, rng *rand.Rand) {
		n := h.pickOwner(rng)
		p := h.get(n)
		h.note("SIGSTOP %s for %v", n, d(h.L))
		h.signal(p, syscall.SIGSTOP)
		sleep(ctx, d(h.L))
		h.signal(p, syscall.SIGCONT)
	}
}

func (h *Harness) leaderProc() (*managerPorts, *proc) {
	m := h.leader()
	if m == nil {
		return nil, nil
	}
	return m, h.get(m.name)
}

func (h *Harness) restartManager(m *managerPorts) {
	if p := h.get(m.name); p != nil && !exited(p) {
		return
	}
	if err := h.startManager(m); err != nil {
		h.note("restart %s: %v", m.name, err)
	}
}

func leaderCrash(ctx context.Context, h *Harness, rng *rand.Rand) {
	m, p := h.leaderProc()
	if m == nil {
		return
	}
	// Grants in flight: an owner comes back while the leader dies.
	n := h.pickOwner(rng)
	h.note("kill -9 %s and leader %s", n, m.name)
	h.kill(h.get(n))
	h.ensureOwner(n, 1)
	sleep(ctx, time.Duration(rng.Int64N(int64(h.L.T/2))))
	h.kill(p)
	sleep(ctx, 2*h.L.T)
	h.restartManager(m)
}

func leaderPause(ctx context.Context, h *Harness, rng *rand.Rand) {
	m, p := h.leaderProc()
	if m == nil {
		return
	}
	h.note("SIGSTOP leader %s", m.name)
	h.signal(p, syscall.SIGSTOP)
	sleep(ctx, 2*h.L.T)
	h.signal(p, syscall.SIGCONT)
}

func leaderRestartDuringRecalls(ctx context.Context, h *Harness, rng *rand.Rand) {
	m, p := h.leaderProc()
	if m == nil {
		return
	}
	// A new owner joins: the leader recalls ranges from the others.
	q := "q" + strconv.Itoa(rng.IntN(1000))
	h.note("join %s, then restart leader %s", q, m.name)
	if err := h.startOwner(q, "", 1); err != nil {
		h.note("start %s: %v", q, err)
		return
	}
	sleep(ctx, h.L.T/4)
	h.stop(p, 5*time.Second)
	h.restartManager(m)
	sleep(ctx, 2*h.L.T)
	h.stop(h.get(q), 5*time.Second)
}

// cut blocks every link between the managers in a and those in b, both
// ways, and returns the heal.
func (h *Harness) cutManagers(a, b []*managerPorts) func() {
	for _, x := range a {
		for _, y := range b {
			h.links.Set(x.name, y.name, true, true)
			h.links.Set(y.name, x.name, true, true)
		}
	}
	return func() {
		for _, x := range a {
			for _, y := range b {
				h.links.Set(x.name, y.name, false, false)
				h.links.Set(y.name, x.name, false, false)
			}
		}
	}
}

func raftMinority(ctx context.Context, h *Harness, rng *rand.Rand) {
	i := rng.IntN(len(h.managers))
	rest := slices.Delete(slices.Clone(h.managers), i, i+1)
	h.note("partition %s from the other managers", h.managers[i].name)
	heal := h.cutManagers(h.managers[i:i+1], rest)
	sleep(ctx, 3*h.L.T)
	heal()
}

func noQuorum(ctx context.Context, h *Harness, rng *rand.Rand) {
	h.note("partition every manager from every other")
	var heals []func()
	for i := range h.managers {
		for j := i + 1; j < len(h.managers); j++ {
			heals = append(heals, h.cutManagers(h.managers[i:i+1], h.managers[j:j+1]))
		}
	}
	sleep(ctx, 2*h.L.T)
	for _, f := range heals {
		f()
	}
}

// cutFromManagers blocks src from every manager (up and/or down) after
// resetting its connections, and returns the heal.
func (h *Harness) cutFromManagers(src string, up, down bool) func() {
	for _, m := range h.managers {
		h.links.Set(src, m.name, up, down)
		m.rGRPC.Reset(src)
	}
	return func() {
		for _, m := range h.managers {
			h.links.Set(src, m.name, false, false)
		}
	}
}

func ownerPartition(up, down bool) scenario {
	return func(ctx context.Context, h *Harness, rng *rand.Rand) {
		n := h.pickOwner(rng)
		h.note("cut %s from the managers (up %v, down %v)", n, up, down)
		heal := h.cutFromManagers(h.get(n).id(), up, down)
		sleep(ctx, 3*h.L.T)
		heal()
	}
}

func proxyCutOff(ctx context.Context, h *Harness, rng *rand.Rand) {
	x := "x" + strconv.Itoa(1+rng.IntN(len(h.proxies)))
	n := h.pickOwner(rng)
	h.note("cut proxy %s from the managers while %s restarts", x, n)
	heal := h.cutFromManagers(h.get(x).id(), true, true)
	h.kill(h.get(n))
	sleep(ctx, h.L.hold())
	h.ensureOwner(n, 1)
	sleep(ctx, 2*h.L.T)
	heal()
}

// secondIncarnation is issue 10's finding: p loses its stream and stalls,
// keeps serving, and a new process starts under its name elsewhere.
func secondIncarnation(ctx context.Context, h *Harness, rng *rand.Rand) {
	n := h.pickOwner(rng)
	old := h.get(n)
	h.note("cut %s from the managers and start a second %s", n, n)
	heal := h.cutFromManagers(old.id(), true, true)
	// A router with a stale table keeps sending to the old process.
	staleAddr := h.ownerAddr(n)
	h.mu.Lock()
	h.stale = staleAddr
	h.mu.Unlock()
	if err := h.startOwner(n, "", 1); err != nil {
		h.note("start second %s: %v", n, err)
	}
	sleep(ctx, 3*h.L.T)
	h.mu.Lock()
	h.stale = ""
	h.mu.Unlock()
	heal()
	sleep(ctx, h.L.T)
	h.kill(old)
}

func sameAddressRestart(ctx context.Context, h *Harness, rng *rand.Rand) {
	n := h.pickOwner(rng)
	addr := h.ownerAddr(n)
	h.note("kill -9 %s and restart it on %s at once", n, addr)
	h.kill(h.get(n))
	if err := h.startOwner(n, addr, 1); err != nil {
		h.note("restart %s: %v", n, err)
	}
	sleep(ctx, 2*h.L.T)
}

func churn(ctx context.Context, h *Harness, rng *rand.Rand) {
	h.note("join and leave churn")
	for range 3 {
		q := "q" + strconv.Itoa(rng.IntN(1000))
		if err := h.startOwner(q, "", 1); err != nil {
			continue
		}
		sleep(ctx, time.Duration(rng.Int64N(int64(h.L.T))))
		if rng.IntN(2) == 0 {
			h.stop(h.get(q), 5*time.Second)
		} else {
			h.kill(h.get(q))
		}
	}
	sleep(ctx, h.L.T)
}

func ownerClock(rate float64) scenario {
	return func(ctx context.Context, h *Harness, rng *rand.Rand) {
		n := h.pickOwner(rng)
		h.note("restart %s with its clock at x%v", n, rate)
		h.stop(h.get(n), 5*time.Second)
		h.ensureOwner(n, rate)
		sleep(ctx, 4*h.L.T)
		h.stop(h.get(n), 5*time.Second)
		h.ensureOwner(n, 1)
	}
}

func managerClock(rate float64) scenario {
	return func(ctx context.Context, h *Harness, rng *rand.Rand) {
		m := h.leader()
		if rate == 0 || m == nil { // a frozen clock on a follower, which may lead later
			m = h.managers[rng.IntN(len(h.managers))]
		}
		h.note("restart %s with its clock at x%v", m.name, rate)
		h.stop(h.get(m.name), 5*time.Second)
		m.clockRate = rate
		h.restartManager(m)
		sleep(ctx, 4*h.L.T)
		h.stop(h.get(m.name), 5*time.Second)
		m.clockRate = 1
		h.restartManager(m)
	}
}
