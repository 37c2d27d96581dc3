package ownerguard_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// leaveT is long so that a lease expiring cannot pass for a clean leave: the
// manager would hold a closed owner's arcs for T·65/60 ≈ 21.7 s.
const leaveT = 20 * time.Second

// beliefWatch stands in front of the manager's xDS lease table and, at every
// committed view that names "a" as the owner of the watched key, asks the
// watched Owner whether it still believes it holds that key: with a clean
// leave it must have stopped believing before the manager could regrant.
type beliefWatch struct {
	*xds.LeaseTable
	key     atomic.Uint64
	watched atomic.Pointer[ownerguard.Owner]

	mu        sync.Mutex
	regranted int // views naming "a" for the key while watched
	believed  int // of those, views at which the watched Owner still held it
}

var _ manager.RingObserver = (*beliefWatch)(nil)

// NamespaceViewChanged sends the manager's views through NamespaceView,
// which beliefWatch overrides (the embedded table's would bypass it).
func (w *beliefWatch) NamespaceViewChanged(ns string, v lease.View, _ []ring.Range, version uint64) {
	w.NamespaceView(ns, v.Entries(), version)
}

func (w *beliefWatch) NamespaceView(ns string, es []manager.LookupEntry, v uint64) {
	if o := w.watched.Load(); o != nil {
		key := w.key.Load()
		for _, e := range es {
			if e.Range.Contains(key) && e.Owner == "a" {
				_, held := o.GetOwnershipHandle(key)
				w.mu.Lock()
				w.regranted++
				if held {
					w.believed++
				}
				w.mu.Unlock()
			}
		}
	}
	w.LeaseTable.NamespaceView(ns, es, v)
}

func (w *beliefWatch) counts() (regranted, believed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.regranted, w.believed
}

// TestOwnerCloseLeavesCleanly closes one of two owners and checks, over real
// gRPC against a real manager, that its checks fail at once, that it had
// stopped believing before the manager committed its arcs to the other
// owner, and that every arc is the other owner's well before the closed
// owner's leases could have expired.
func TestOwnerCloseLeavesCleanly(t *testing.T) {
	watch := &beliefWatch{}
	m := fugetest.StartManager(t, fugetest.Options{T: leaveT, Observer: func(lt *xds.LeaseTable) manager.Observer {
		watch.LeaseTable = lt
		return watch
	}})
	a := m.Owner(t, "a", "127.0.0.1:1", nil)
	b := m.Owner(t, "b", "127.0.0.1:2", nil)
	l := m.Lookup(t, "l", nil)
	m.Settled(t, l, "a", "b")
	fugetest.Eventually(t, "b to hold what the manager granted it", func() bool { return len(b.Held()) > 0 })

	held := b.Held()
	key := held[0].Range.End // the last point of b's first range
	h, ok := b.GetOwnershipHandle(key)
	if !ok {
		t.Fatalf("b does not hold %016x, the end of its range %v", key, held[0].Range)
	}
	watch.key.Store(key)
	watch.watched.Store(b)

	hold := manager.HoldDuration(leaveT)
	deadline := leaveT / 4 // the renewal interval: far inside the hold
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Since(start)
	if _, ok := b.GetOwnershipHandle(key); ok || b.CheckContinuousOwnership(h) || len(b.Held()) != 0 {
		t.Fatalf("checks still succeed after Close: held %v", b.Held())
	}

	// Every arc a's, in the manager's table and in the lookup's.
	regranted := func() bool {
		arcs, err := m.Arcs()
		if err != nil {
			return false
		}
		for _, x := range arcs {
			if x.State != "granted" || x.Owner != "a" {
				return false
			}
		}
		for _, e := range l.Entries() {
			if e.Owner != "a" {
				return false
			}
		}
		_, aHolds := a.GetOwnershipHandle(key)
		return aHolds
	}
	timeout := time.NewTimer(time.Until(start.Add(deadline)))
	defer timeout.Stop()
	poll := time.NewTicker(2 * time.Millisecond)
	defer poll.Stop()
	for !regranted() {
		select {
		case <-timeout.C:
			arcs, _ := m.Arcs()
			notA := 0
			for _, x := range arcs {
				if x.State != "granted" || x.Owner != "a" {
					notA++
				}
			}
			t.Fatalf("%v after Close (T=%v, hold %v): %d of %d arcs are not granted to a", deadline, leaveT, hold, notA, len(arcs))
		case <-poll.C:
		}
	}
	took := time.Since(start)
	t.Logf("T=%v hold=%v: Close returned in %v; every arc a's (manager, lookup, a's checks) %v after Close began",
		leaveT, hold, closed.Round(time.Millisecond), took.Round(time.Millisecond))

	if n, believed := watch.counts(); n == 0 || believed != 0 {
		t.Errorf("of %d committed views naming a for the key, %d came while b still believed it held it", n, believed)
	}
	if _, _, g, ok := l.Lookup(key); !ok || g <= h.Gen {
		t.Errorf("the lookup has the key under generation %d (ok %v), want a new one (> %d)", g, ok, h.Gen)
	}
}

// TestOwnerAbandonIsACrash: Abandon stops the checks at once but tells the
// manager nothing, so b's arcs stay b's until they expire; with a short T
// they then go to a.
func TestOwnerAbandonIsACrash(t *testing.T) {
	const T = time.Second
	m := fugetest.StartManager(t, fugetest.Options{T: T})
	a := m.Owner(t, "a", "127.0.0.1:1", nil)
	b := m.Owner(t, "b", "127.0.0.1:2", nil)
	l := m.Lookup(t, "l", nil)
	m.Settled(t, l, "a", "b")
	fugetest.Eventually(t, "b to hold what the manager granted it", func() bool { return len(b.Held()) > 0 })
	key := b.Held()[0].Range.End
	start := time.Now()
	if err := b.Abandon(); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.GetOwnershipHandle(key); ok || len(b.Held()) != 0 {
		t.Fatalf("checks still succeed after Abandon: held %v", b.Held())
	}
	// Right after Abandon the manager still lists b: it was not told.
	arcs, err := m.Arcs()
	if err != nil {
		t.Fatal(err)
	}
	bs := 0
	for _, x := range arcs {
		if x.Owner == "b" {
			bs++
		}
	}
	if bs == 0 {
		t.Fatal("the manager moved b's arcs at once: Abandon told it")
	}
	fugetest.Eventually(t, "b's arcs to expire to a", func() bool {
		_, ok := a.GetOwnershipHandle(key)
		return ok
	})
	if took, hold := time.Since(start), manager.HoldDuration(T); took < hold-T/4 {
		// b's last renewal was at most T/4 before Abandon.
		t.Errorf("b's arcs moved %v after Abandon, before the hold time %v less a renewal interval", took, hold)
	}
}
