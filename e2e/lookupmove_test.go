package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// newServingCluster is newCluster with every node wired as fuge-manager
// wires it: Lookup streams gated by CheckLookup, so that standbys in
// contact with the leader serve them, and standbys heartbeating their
// Lookups.
func newServingCluster(t *testing.T, n int, T time.Duration) *cluster {
	t.Helper()
	return buildCluster(t, n, T, nil, tryServing)
}

// startServing starts nd as cmd/fuge-manager starts a node.
func startServing(t *testing.T, c *cluster, nd *node) {
	t.Helper()
	if err := tryServing(c, nd); err != nil {
		t.Fatal(err)
	}
}

// tryServing is startServing returning its error.
func tryServing(c *cluster, nd *node) error {
	var srv *manager.Server
	nd.lt = xds.NewLeaseTable(xds.LeaseTableConfig{Gate: func(ctx context.Context) error { return srv.CheckLookup(ctx) }})
	cfg := nd.cfg
	cfg.Observer = nd.lt
	cfg.Heartbeat = nd.lt.Heartbeat
	cfg.LookupStreams = func() int { return nd.lt.Stats().Streams }
	cfg.RecheckLookups = nd.lt.RecheckLookups
	s, err := manager.NewServer(cfg)
	if err != nil {
		return err
	}
	srv = s
	if err := s.Start(nd.lt.Register); err != nil {
		return err
	}
	// It ends when the node is killed.
	go s.RunStandbyHeartbeats(context.Background(), nd.lt.Namespaces, nd.lt.Heartbeat, nd.lt.ChangedWithin)
	c.mu.Lock()
	nd.srv = s
	c.mu.Unlock()
	return nil
}

// tableWatch records every table a Lookup publishes and every loss upcall
// it makes, and checks them against each other: the generations at every
// point only grow, and the points notified are exactly those whose
// generation changed.
type tableWatch struct {
	mu      sync.Mutex
	tables  [][]lease.Entry // in order of publication (some may be skipped)
	loss    []ring.Range
	lossAll int
	stop    chan struct{}
	done    chan struct{}
}

func (w *tableWatch) onLoss(rs []ring.Range, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loss = append(w.loss, rs...)
	if all {
		w.lossAll++
	}
}

// follow records l's tables until stop is called. stop closes l first
// (see closeLookups): checking with the last change's upcall still queued
// failed as "changed with no loss upcall" (seed 13926449865499789173,
// under load).
func (w *tableWatch) follow(l *lb.Lookup) (stop func()) {
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		for {
			up := l.Updated()
			if es := l.Entries(); es != nil {
				w.mu.Lock()
				if n := len(w.tables); n == 0 || !slices.Equal(w.tables[n-1], es) {
					w.tables = append(w.tables, es)
				}
				w.mu.Unlock()
			}
			select {
			case <-up:
			case <-w.stop:
				return
			}
		}
	}()
	return func() { l.Close(); close(w.stop); <-w.done }
}

// genAt is the generation of the arc of es (in order of End, as a
// Lookup's Entries are) containing h.
func genAt(es []lease.Entry, h uint64) lease.Gen {
	i, _ := slices.BinarySearchFunc(es, h, func(e lease.Entry, h uint64) int { return cmp.Compare(e.Range.End, h) })
	if i == len(es) {
		i = 0 // past the last end: the arc that wraps
	}
	return es[i].Gen
}

// check returns the problems found: a generation that went back, a point
// whose generation changed without a loss upcall covering it, a point
// covered by one whose generation never changed, and loss on everything.
// It checks the points just inside every arc boundary of every table.
func (w *tableWatch) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var probs []string
	if w.lossAll > 0 {
		probs = append(probs, fmt.Sprintf("%d loss upcalls on everything", w.lossAll))
	}
	var points []uint64
	for _, es := range w.tables {
		for _, e := range es {
			points = append(points, e.Range.End, e.Range.Start+1)
		}
	}
	slices.Sort(points)
	points = slices.Compact(points)
	for _, h := range points {
		changed := false
		for i := 1; i < len(w.tables); i++ {
			a, b := genAt(w.tables[i-1], h), genAt(w.tables[i], h)
			if b < a {
				probs = append(probs, fmt.Sprintf("generation at %x went back from %d to %d (table %d)", h, a, b, i))
			}
			changed = changed || a != b
		}
		notified := slices.ContainsFunc(w.loss, func(r ring.Range) bool { return r.Contains(h) })
		switch {
		case changed && !notified:
			probs = append(probs, fmt.Sprintf("generation at %x changed with no loss upcall", h))
		case notified && !changed:
			probs = append(probs, fmt.Sprintf("loss upcall at %x, whose generation never changed", h))
		}
		if len(probs) > 10 {
			break
		}
	}
	return probs
}

// startMover starts a Lookup that tries managers in order, reporting its
// losses to w, with the timing of the tests of moves: a staleness bound of
// 10·T, wide so that a move on a loaded CI machine (race detector, two
// cores shared with other test packages) fits in it (one run in twelve
// under load gave up on everything with 3·T after streams went silent,
// Stalls 4; the tests are about what a move keeps, not how fast it is), a
// silent stream abandoned after 1.5·T, and a short backoff.
func startMover(t *testing.T, managers []string, name string, T time.Duration, w *tableWatch) *lb.Lookup {
	t.Helper()
	return runLookup(t, lb.LookupConfig{
		Managers: managers, InOrder: true, Namespace: testNS, Name: name,
		OnLoss: w.onLoss, StalenessBound: 10 * T, StreamTimeout: 3 * T / 2,
		Backoff: lb.BackoffConfig{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
}

// TestLookupMovesBetweenNodes runs a Lookup on a standby of a 3-node
// cluster while owners join and leave, then kills the node serving it,
// twice (a standby, then the other standby, to which the leader, the
// Lookup's next address, sends it). The
// Lookup must follow every change across each move: its generations
// never go back (a lagging node holds its first response until it has
// caught up with what the Lookup holds), every generation change it
// applies is notified and nothing else is, it never gives up on everything
// (its staleness bound holds through each move) and it ends with the
// leader's table.
func TestLookupMovesBetweenNodes(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	const T = time.Second
	c := newServingCluster(t, 3, T)
	lead := c.waitLeader()
	var standbys []*node
	for _, nd := range c.nodes {
		if nd != lead {
			standbys = append(standbys, nd)
		}
	}
	rec := newRecorder()
	var churnMu sync.Mutex // guards owners once the churn runs
	owners := map[string]*ownerguard.Owner{}
	for i := range 4 {
		name := fmt.Sprintf("o%d", i+1)
		owners[name] = startOwner(t, c, name, rec)
	}
	eventually(t, "owners to converge", func() bool { return converged(c, owners, nil) })

	// The Lookup tries its managers in order: the first standby, the
	// leader, the other standby.
	var w tableWatch
	order := []*node{standbys[0], lead, standbys[1]}
	var addrs []string
	for _, nd := range order {
		addrs = append(addrs, nd.cfg.GRPCAddr)
	}
	l := startMover(t, addrs, "mover", T, &w)
	t.Cleanup(func() {
		churnMu.Lock()
		defer churnMu.Unlock()
		for _, o := range owners {
			o.Close()
		}
	})
	stopWatch := w.follow(l)
	// state describes the lookup and the nodes when a wait times out.
	state := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "lookup stats %+v version %d entries %d;", l.Stats(), l.Version(), len(l.Entries()))
		c.mu.Lock()
		for _, nd := range c.nodes {
			if nd.srv == nil {
				fmt.Fprintf(&b, " %s down;", nd.cfg.NodeID)
			} else {
				fmt.Fprintf(&b, " %s leader %v lookup streams %d;", nd.cfg.NodeID, nd.srv.IsLeader(), nd.lt.Stats().Streams)
			}
		}
		c.mu.Unlock()
		if lead := c.leader(); lead != nil {
			if view, ok := leaderView(lead); ok {
				held := map[string]int{}
				for _, e := range view {
					held[e.Owner]++
				}
				fmt.Fprintf(&b, " leader's view: %d entries, arcs per owner %v;", len(view), held)
			}
		}
		return b.String()
	}
	lookups := []*lb.Lookup{l}
	eventually(t, "the lookup to converge", func() bool { return converged(c, owners, lookups) })
	if st := l.Stats(); st.Attempts != 1 || st.Redirects != 0 || order[0].lt.Stats().Streams != 1 {
		t.Fatalf("the lookup is not served by the standby it tried first: %+v, standby streams %d", st, order[0].lt.Stats().Streams)
	}

	// Owners join and leave while the nodes serving the lookup die.
	churnStop, churnDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(churnDone)
		next := len(owners) + 1
		for {
			select {
			case <-churnStop:
				return
			case <-time.After(time.Duration(100+rnd.IntN(200)) * time.Millisecond): // pacing the load, not waiting for an outcome
			}
			churnMu.Lock()
			if len(owners) > 3 && rnd.IntN(2) == 0 {
				names := make([]string, 0, len(owners))
				for name := range owners {
					names = append(names, name)
				}
				slices.Sort(names)
				name := names[rnd.IntN(len(names))]
				owners[name].Close() // a clean leave: its arcs move, under new generations
				delete(owners, name)
			} else {
				name := fmt.Sprintf("o%d", next)
				next++
				o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
					Managers: c.grpcAddrs(), Namespace: testNS, Name: name, Addr: name + ".local:80", LeaseDuration: c.T,
				})
				if err == nil {
					err = o.Start(context.Background())
				}
				if err != nil {
					t.Errorf("owner %s: %v", name, err)
				} else {
					owners[name] = o
				}
			}
			churnMu.Unlock()
		}
	}()

	// serving is the node whose LeaseTable serves the lookup's stream, or
	// nil between streams.
	serving := func() *node {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, nd := range c.nodes {
			if nd.srv != nil && nd.lt.Stats().Streams == 1 {
				return nd
			}
		}
		return nil
	}
	// Each victim is the node serving the lookup, twice: the standby it
	// started on, then the node it moved to. Its next address after the
	// first is the leader, which leaves Lookups to its standbys while one
	// is in contact: it names the other standby ("fuge-standby"), and the
	// lookup must be there, never on the leader.
	for move := range 2 {
		victim := serving()
		if victim == nil {
			t.Fatalf("move %d: no node serves the lookup; %s", move+1, state())
		}
		before := l.Stats()
		t.Logf("move %d: killing %s (leader %v), which serves the lookup at LSN %d", move+1, victim.cfg.NodeID, victim.srv.IsLeader(), before.ServedLSN)
		c.kill(victim)
		// The lookup has moved once another node serves it a later LSN.
		var now *node
		eventuallyState(t, "the lookup on another node", func() bool {
			st := l.Stats()
			if st.Attempts == before.Attempts || st.ServedLSN <= before.ServedLSN {
				return false
			}
			now = serving()
			return now != nil && now != victim
		}, state)
		if now.srv.IsLeader() {
			t.Errorf("move %d: the leader %s serves the lookup while a standby is in contact; %s", move+1, now.cfg.NodeID, state())
		}
		if move == 0 && l.Stats().Redirects == 0 {
			t.Errorf("move 1: the lookup reached the other standby without the leader naming it; %s", state())
		}
		// A few changes served by the new node, then the victim comes back
		// as a standby; the lookup stays where it is.
		v := l.Version()
		eventuallyState(t, "changes on the new node", func() bool { return l.Version() >= v+3 }, state)
		startServing(t, c, victim)
		c.waitVoters(3)
	}
	close(churnStop)
	<-churnDone
	churnMu.Lock()
	eventuallyState(t, "the lookup to converge after the churn", func() bool { return converged(c, owners, lookups) }, state)
	churnMu.Unlock()
	stopWatch()

	st := l.Stats()
	w.mu.Lock()
	t.Logf("lookup: %d tables recorded, %d ranges notified; stats %+v", len(w.tables), len(w.loss), st)
	w.mu.Unlock()
	if st.Reconnects < 2 {
		t.Errorf("the lookup reconnected %d times, want at least 2 (one per node killed)", st.Reconnects)
	}
	if st.LossNotifications == 0 {
		t.Error("no loss notification: the churn changed no generation the lookup saw, so the test proves nothing")
	}
	for _, p := range w.check() {
		t.Error(p)
	}
}

// TestNewLeaderHandsOffLookups runs a Lookup on each standby of a 3-node
// cluster, kills the leader, and checks that the standby elected in its
// place hands the Lookup it served to a standby (it asks its gate again,
// which names one), that both Lookups end on standbys with the leader's
// table, and that each followed every change across the move: no
// generation back, no change without a loss upcall, no loss on everything.
func TestNewLeaderHandsOffLookups(t *testing.T) {
	const T = time.Second
	c := newServingCluster(t, 3, T)
	lead := c.waitLeader()
	rec := newRecorder()
	owners := map[string]*ownerguard.Owner{}
	for i := range 3 {
		name := fmt.Sprintf("o%d", i+1)
		owners[name] = startOwner(t, c, name, rec)
	}
	eventually(t, "owners to converge", func() bool { return converged(c, owners, nil) })
	var lookups []*lb.Lookup
	watches := make([]tableWatch, 2)
	var stops []func()
	for _, nd := range c.nodes {
		if nd == lead {
			continue
		}
		w := &watches[len(lookups)]
		// Only this standby is listed: the Lookup reaches another node
		// only by a trailer naming it.
		l := startMover(t, []string{nd.cfg.GRPCAddr}, "on-"+nd.cfg.NodeID, T, w)
		lookups = append(lookups, l)
		stops = append(stops, w.follow(l))
	}
	state := func() string {
		var b strings.Builder
		for _, l := range lookups {
			fmt.Fprintf(&b, "lookup stats %+v; ", l.Stats())
		}
		c.mu.Lock()
		for _, nd := range c.nodes {
			if nd.srv == nil {
				fmt.Fprintf(&b, " %s down;", nd.cfg.NodeID)
			} else {
				fmt.Fprintf(&b, " %s leader %v lookup streams %d, xds %+v;", nd.cfg.NodeID, nd.srv.IsLeader(), nd.lt.Stats().Streams, nd.lt.Stats())
			}
		}
		c.mu.Unlock()
		return b.String()
	}
	eventuallyState(t, "the lookups to converge on the standbys", func() bool { return converged(c, owners, lookups) }, state)

	c.kill(lead)
	next := c.waitLeader()
	t.Logf("killed the leader %s; %s leads and served a Lookup as a standby", lead.cfg.NodeID, next.cfg.NodeID)
	startServing(t, c, lead)
	c.waitVoters(3)
	// A change under the new leader, so that the move carries one.
	owners["o4"] = startOwner(t, c, "o4", rec)
	eventuallyState(t, "the new leader to hand its Lookup off, and the lookups to converge", func() bool {
		return next.lt.Stats().Streams == 0 && converged(c, owners, lookups)
	}, state)
	if st := next.lt.Stats(); st.Rechecked == 0 {
		t.Errorf("the new leader's Lookup stream was not ended at a recheck: %+v", st)
	}
	redirects := uint64(0)
	for _, l := range lookups {
		redirects += l.Stats().Redirects
	}
	if redirects == 0 {
		t.Errorf("no Lookup followed a trailer; %s", state())
	}
	for i, stop := range stops {
		stop()
		if watches[i].lossAll > 0 || len(watches[i].tables) < 2 {
			t.Errorf("lookup %d: %d tables recorded, %d losses of everything", i, len(watches[i].tables), watches[i].lossAll)
		}
		for _, p := range watches[i].check() {
			t.Errorf("lookup %d: %s", i, p)
		}
	}
}

// TestTableWatchCatchesMissedAndFalseLoss is the negative control of
// tableWatch.check: a generation change without a loss upcall, an upcall
// where nothing changed, a generation going back and loss on everything
// are each reported.
func TestTableWatchCatchesMissedAndFalseLoss(t *testing.T) {
	const q = 1 << 62
	t1 := []lease.Entry{ // in order of End
		{Range: ring.Range{Start: 2 * q, End: 0}, Owner: "b", Addr: "b:1", Gen: 2},
		{Range: ring.Range{Start: 0, End: 2 * q}, Owner: "a", Addr: "a:1", Gen: 1},
	}
	t2 := slices.Clone(t1)
	t2[1].Gen = 3 // a's arc changed hands
	for name, tt := range map[string]struct {
		tables  [][]lease.Entry
		loss    []ring.Range
		lossAll int
		want    bool // a problem reported
	}{
		"notified change":      {[][]lease.Entry{t1, t2}, []ring.Range{t1[1].Range}, 0, false},
		"missed change":        {[][]lease.Entry{t1, t2}, nil, 0, true},
		"false loss":           {[][]lease.Entry{t1, t2}, []ring.Range{t1[0].Range, t1[1].Range}, 0, true},
		"generation went back": {[][]lease.Entry{t2, t1}, []ring.Range{t1[1].Range}, 0, true},
		"loss on everything":   {[][]lease.Entry{t1, t2}, []ring.Range{t1[1].Range}, 1, true},
		"nothing changed":      {[][]lease.Entry{t1, t1}, nil, 0, false},
	} {
		w := tableWatch{tables: tt.tables, loss: tt.loss, lossAll: tt.lossAll}
		if got := w.check(); (len(got) > 0) != tt.want {
			t.Errorf("%s: check() = %q, want problems: %v", name, got, tt.want)
		}
	}
}
