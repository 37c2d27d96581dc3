package ownerguard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

func TestOwnerSingleHoldsEveryArc(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	o, rec := newOwner(t, "a", []string{f.addr}, nil)
	waitReady(t, o)
	eventually(t, o, "a holds what the manager granted", func() bool { return agrees(f, o, "a") })
	held := o.Held()
	if len(held) != 1 || !held[0].Range.IsFull() {
		t.Fatalf("Held() = %v, want the whole ring", lease.FormatLeases(held))
	}
	// Upcalls are asynchronous: wait for the first, then check them all.
	eventually(t, nil, "an upcall", func() bool { _, _, n := rec.all(); return n > 0 })
	granted, revoked, _ := rec.all()
	if !ring.Equal(rangeTable(granted), rangeTable([]ring.Range{ring.Full()})) || len(revoked) != 0 {
		t.Errorf("upcalls granted %v revoked %v, want the whole ring granted", granted, revoked)
	}
	for _, key := range []string{"alice", "bob", ""} {
		h, ok := o.GetOwnershipHandleKey(key)
		if !ok || h.Key != ring.HashString(key) || h.Gen != held[0].Gen || !o.CheckContinuousOwnership(h) {
			t.Errorf("key %q: handle %+v %v, want held under %d", key, h, ok, held[0].Gen)
		}
	}
	if st := o.Stats(); st.Attempts != 1 || st.Reconnects != 0 || st.Sessions != 1 || st.Requests == 0 || st.Responses == 0 || st.Core.Accepted == 0 {
		t.Errorf("Stats() = %+v", st)
	}
	if o.Err() != nil || o.Incarnation() == 0 {
		t.Errorf("Err() = %v, Incarnation() = %x", o.Err(), o.Incarnation())
	}
}

// An owner sends its renewals packed once its manager said it reads them,
// and never to a manager that did not (one from before packed leases would
// take an empty held for a release); either way it keeps its leases.
func TestOwnerPacksRenewalsOnlyForAManagerThatReadsThem(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		f := newFakeManager(t, testT, testNS)
		if legacy {
			f.setLegacy()
		}
		o, _ := newOwner(t, "a", []string{f.addr}, nil)
		waitReady(t, o)
		eventually(t, o, "a holds what the manager granted", func() bool { return agrees(f, o, "a") })
		// Renewals every T/4: wait for a few after the grant.
		accepted := o.Stats().Core.Accepted
		eventually(t, o, "three more answers", func() bool { return o.Stats().Core.Accepted >= accepted+3 })
		if !agrees(f, o, "a") {
			t.Errorf("legacy %v: the owner and the manager disagree after renewals", legacy)
		}
		if n := f.packedRequests(); (n > 0) == legacy {
			t.Errorf("legacy %v: %d requests carried packed leases", legacy, n)
		}
		o.Close()
	}
}

func TestOwnerSecondOwnerJoins(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	a, recA := newOwner(t, "a", []string{f.addr}, nil)
	waitReady(t, a)
	eventually(t, a, "a holds the ring", func() bool { return agrees(f, a, "a") })

	// Handles made while a holds everything.
	rnd := rand.New(rand.NewPCG(1, 2))
	handles := make([]ownerguard.Handle, 200)
	for i := range handles {
		h, ok := a.GetOwnershipHandle(rnd.Uint64())
		if !ok {
			t.Fatalf("a does not hold key %d before b joins", i)
		}
		handles[i] = h
	}

	b, _ := newOwner(t, "b", []string{f.addr}, nil)
	waitReady(t, b)
	eventually(t, b, "both owners agree with the manager", func() bool {
		return agrees(f, a, "a") && agrees(f, b, "b")
	})
	heldA, heldB := a.Held(), b.Held()
	if len(heldA) == 0 || len(heldB) == 0 {
		t.Fatalf("a holds %v, b holds %v: want both to hold something", lease.FormatLeases(heldA), lease.FormatLeases(heldB))
	}
	// Disjoint, and together the whole ring: at every point exactly one
	// owner answers, and the manager agrees which.
	for _, arc := range f.leases(testNS) {
		for _, p := range []uint64{arc.Range.End, arc.Range.Start + 1} {
			ha, okA := a.GetOwnershipHandle(p)
			hb, okB := b.GetOwnershipHandle(p)
			switch {
			case okA == okB:
				t.Fatalf("point %x: a holds %v, b holds %v", p, okA, okB)
			case okA && (arc.Owner != "a" || ha.Gen != arc.Gen):
				t.Fatalf("point %x: a holds it under %d, manager says %s@%d", p, ha.Gen, arc.Owner, arc.Gen)
			case okB && (arc.Owner != "b" || hb.Gen != arc.Gen):
				t.Fatalf("point %x: b holds it under %d, manager says %s@%d", p, hb.Gen, arc.Owner, arc.Gen)
			}
		}
	}
	// a hears exactly b's ranges revoked (upcalls are asynchronous).
	var bRanges []ring.Range
	for _, l := range heldB {
		bRanges = append(bRanges, l.Range)
	}
	eventually(t, nil, "a to hear b's ranges revoked", func() bool {
		_, revoked, _ := recA.all()
		return ring.Equal(rangeTable(revoked), rangeTable(bRanges))
	})
	// Old handles: continuous where a kept the key, broken where it moved.
	moved := 0
	for _, h := range handles {
		_, nowB := b.GetOwnershipHandle(h.Key)
		if got := a.CheckContinuousOwnership(h); got == nowB {
			t.Errorf("key %x: a's continuity %v, yet b holds it: %v", h.Key, got, nowB)
		}
		if nowB {
			moved++
		}
	}
	if moved == 0 || moved == len(handles) {
		t.Errorf("%d of %d keys moved to b: want some but not all", moved, len(handles))
	}
}

func TestOwnerReconnectKeepsLeases(t *testing.T) {
	// With T = 1 min no periodic request falls within the test: the new
	// stream hears a request only because the owner sends one on connecting.
	const T = time.Minute
	f := newFakeManager(t, T, testNS)
	o, rec := newOwner(t, "a", []string{f.addr}, func(c *ownerguard.OwnerConfig) { c.LeaseDuration = T })
	waitReady(t, o)
	eventually(t, o, "a holds the ring", func() bool { return agrees(f, o, "a") })
	before := o.Held()
	// Upcalls are asynchronous: wait for the grant's.
	eventually(t, nil, "the grant upcall", func() bool { _, _, n := rec.all(); return n == 1 })

	f.drop("a")
	eventually(t, o, "the session reopens on a new stream", func() bool { return o.Stats().Sessions == 2 })
	if after := o.Held(); !ring.Equal(heldTable(after), heldTable(before)) {
		t.Errorf("held %v before the drop, %v after", lease.FormatLeases(before), lease.FormatLeases(after))
	}
	if !agrees(f, o, "a") {
		t.Errorf("after the reconnect the manager disagrees with a's %v", lease.FormatLeases(o.Held()))
	}
	if _, _, n := rec.all(); n != 1 {
		t.Errorf("%d upcalls during the reconnect, want none", n-1)
	}
	if opened, _ := f.counts(); opened != 2 {
		t.Errorf("manager saw %d streams, want 2", opened)
	}
	if st := o.Stats(); st.Attempts != 2 || st.Reconnects != 1 {
		t.Errorf("Stats() = %+v, want two attempts", st)
	}
}

func TestOwnerFollowsLeader(t *testing.T) {
	// Each case has its own leader: a closed owner's session lives on at
	// the manager core until its hold expires.
	t.Run("trailer", func(t *testing.T) {
		b := newFakeManager(t, testT, testNS)
		a := newFakeManager(t, testT, testNS)
		a.setMode(standby, b.addr)
		// Only the standby is configured: the trailer is the only way to b.
		o, _ := newOwner(t, "x", []string{a.addr}, nil)
		waitReady(t, o)
		eventually(t, o, "x holds what b granted", func() bool { return agrees(b, o, "x") })
		if st := o.Stats(); st.Redirects != 1 || st.Attempts != 2 {
			t.Errorf("Stats() = %+v, want one redirect and two attempts", st)
		}
		if opened, _ := a.counts(); opened != 1 {
			t.Errorf("standby saw %d streams, want 1", opened)
		}
		if o.Err() != nil {
			t.Errorf("Err() = %v after a redirect", o.Err())
		}
	})
	t.Run("electing", func(t *testing.T) {
		b := newFakeManager(t, testT, testNS)
		c := newFakeManager(t, testT, testNS)
		c.setMode(standby, "") // no leader known yet: rotate
		o, _ := newOwner(t, "y", []string{c.addr, b.addr}, nil)
		waitReady(t, o)
		eventually(t, o, "y holds what b granted", func() bool { return agrees(b, o, "y") })
		if st := o.Stats(); st.Redirects != 0 || st.Attempts != 2 {
			t.Errorf("Stats() = %+v, want no redirect and two attempts", st)
		}
		if opened, _ := c.counts(); opened != 1 {
			t.Errorf("electing standby saw %d streams, want 1", opened)
		}
	})
}

func TestOwnerAbandonsSilentManager(t *testing.T) {
	silent := newFakeManager(t, testT, testNS)
	silent.setMode(blackhole, "")
	b := newFakeManager(t, testT, testNS)
	o, _ := newOwner(t, "a", []string{silent.addr, b.addr}, func(c *ownerguard.OwnerConfig) {
		c.ResponseTimeout = 100 * time.Millisecond
	})
	waitReady(t, o)
	eventually(t, o, "a holds what b granted", func() bool { return agrees(b, o, "a") })
	if st := o.Stats(); st.Stalls != 1 {
		t.Errorf("Stats() = %+v, want one stall", st)
	}
}

func TestOwnerUnknownNamespace(t *testing.T) {
	f := newFakeManager(t, testT) // no namespace yet
	o, _ := newOwner(t, "a", []string{f.addr}, nil)
	eventually(t, o, "Err", func() bool { return o.Err() != nil })
	err := o.Err()
	if !errors.Is(err, ownerguard.ErrUnknownNamespace) || status.Code(err) != codes.NotFound {
		t.Fatalf("Err() = %v (%v), want ErrUnknownNamespace with NOT_FOUND", err, status.Code(err))
	}
	select {
	case <-o.Ready():
		t.Fatal("Ready closed for an unknown namespace")
	default:
	}
	if h := o.Held(); len(h) != 0 {
		t.Fatalf("Held() = %v", h)
	}
	// It keeps retrying, and gets in once the namespace exists.
	eventually(t, nil, "a retry", func() bool { return o.Stats().Attempts >= 2 })
	f.createNamespace(testNS)
	waitReady(t, o)
	eventually(t, o, "a holds the ring", func() bool { return agrees(f, o, "a") })
	if o.Err() != nil {
		t.Errorf("Err() = %v after the session opened", o.Err())
	}
}

func TestOwnerNameInUse(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	first, _ := newOwner(t, "a", []string{f.addr}, nil)
	waitReady(t, first)
	eventually(t, first, "first holds the ring", func() bool { return agrees(f, first, "a") })
	gen := first.Held()[0].Gen

	second, _ := newOwner(t, "a", []string{f.addr}, nil)
	eventually(t, second, "Err", func() bool { return second.Err() != nil })
	if err := second.Err(); !errors.Is(err, ownerguard.ErrOwnerInUse) || status.Code(err) != codes.AlreadyExists {
		t.Fatalf("Err() = %v, want ErrOwnerInUse with ALREADY_EXISTS", err)
	}
	first.Close()
	waitReady(t, second)
	eventually(t, second, "second holds the ring", func() bool { return agrees(f, second, "a") })
	if g := second.Held()[0].Gen; g <= gen {
		t.Errorf("the new incarnation holds generation %d, want a new one (> %d)", g, gen)
	}
}

func TestOwnerClose(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	o, rec := newOwner(t, "a", []string{f.addr}, nil)
	waitReady(t, o)
	eventually(t, o, "a holds the ring", func() bool { return agrees(f, o, "a") })
	h, ok := o.GetOwnershipHandleKey("k")
	if !ok {
		t.Fatal("no handle before Close")
	}
	if err := o.Start(context.Background()); !errors.Is(err, ownerguard.ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.GetOwnershipHandleKey("k"); ok || o.CheckContinuousOwnership(h) || len(o.Held()) != 0 {
		t.Errorf("after Close: handle %v, continuity %v, held %v", ok, o.CheckContinuousOwnership(h), o.Held())
	}
	if _, revoked := rec.last(); !ring.Equal(rangeTable(revoked), rangeTable([]ring.Range{ring.Full()})) {
		t.Errorf("last upcall revoked %v, want the whole ring", revoked)
	}
	if _, eofs := f.counts(); eofs != 1 {
		t.Errorf("manager saw %d clean stream ends, want 1", eofs)
	}
	if err := o.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := o.Start(context.Background()); !errors.Is(err, ownerguard.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if leaked := ownerGoroutines(defaultTestTimeout); leaked != "" {
		t.Errorf("goroutines left after Close:\n%s", leaked)
	}
}

func TestOwnerContextEndsSession(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	ctx, cancel := context.WithCancel(context.Background())
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: []string{f.addr}, Namespace: testNS, Name: "a", Addr: "a:1", LeaseDuration: testT,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, o)
	eventually(t, o, "a holds", func() bool { return len(o.Held()) > 0 })
	cancel()
	eventually(t, o, "a holds nothing", func() bool { return len(o.Held()) == 0 })
	o.Close()
}

func TestNewOwnerValidates(t *testing.T) {
	ok := ownerguard.OwnerConfig{Managers: []string{"m:1"}, Namespace: "ns", Name: "a", Addr: "a:1"}
	for _, tc := range []struct {
		name string
		mut  func(*ownerguard.OwnerConfig)
		want error
	}{
		{"valid", func(*ownerguard.OwnerConfig) {}, nil},
		{"no managers", func(c *ownerguard.OwnerConfig) { c.Managers = nil }, ownerguard.ErrNoManagers},
		{"empty manager", func(c *ownerguard.OwnerConfig) { c.Managers = []string{""} }, ownerguard.ErrNoManagers},
		{"no namespace", func(c *ownerguard.OwnerConfig) { c.Namespace = "" }, ownerguard.ErrNoNamespace},
		{"no name", func(c *ownerguard.OwnerConfig) { c.Name = "" }, ownerguard.ErrNoName},
		{"no addr", func(c *ownerguard.OwnerConfig) { c.Addr = "" }, ownerguard.ErrNoAddr},
		{"negative T", func(c *ownerguard.OwnerConfig) { c.LeaseDuration = -1 }, ownerguard.ErrLeaseDuration},
		{"backoff max < base", func(c *ownerguard.OwnerConfig) {
			c.Backoff = ownerguard.BackoffConfig{Base: time.Second, Max: time.Millisecond}
		}, ownerguard.ErrBackoff},
		{"jitter > 1", func(c *ownerguard.OwnerConfig) { c.Backoff.Jitter = 2 }, ownerguard.ErrBackoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mut(&cfg)
			_, err := ownerguard.NewOwner(cfg)
			if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("NewOwner: %v, want %v", err, tc.want)
			}
		})
	}
	d := ownerguard.DefaultOwnerConfig()
	if d.LeaseDuration != 8*time.Second || d.ResponseTimeout != 4*time.Second ||
		d.KeepaliveTime != 10*time.Second || d.KeepaliveTimeout != time.Second ||
		d.Backoff != (ownerguard.BackoffConfig{Base: 50 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: 0.2}) ||
		d.MaxMessageBytes != 16<<20 {
		t.Errorf("DefaultOwnerConfig() = %+v", d)
	}
}

// readyOwner returns an owner that holds the whole ring.
func readyOwner(tb testing.TB) *ownerguard.Owner {
	f := newFakeManager(tb, testT, testNS)
	o, _ := newOwner(tb, "a", []string{f.addr}, func(c *ownerguard.OwnerConfig) { c.Logger = nil })
	waitReady(tb, o)
	eventually(tb, o, "a holds the ring", func() bool { return agrees(f, o, "a") })
	return o
}

func TestOwnerChecksDoNotAllocate(t *testing.T) {
	o := readyOwner(t)
	key := ring.HashString("k")
	allocs := testing.AllocsPerRun(1000, func() {
		h, ok := o.GetOwnershipHandle(key)
		if !ok || !o.CheckContinuousOwnership(h) {
			panic("not held")
		}
	})
	if allocs != 0 {
		t.Errorf("GetOwnershipHandle + CheckContinuousOwnership: %v allocs, want 0", allocs)
	}
}

func BenchmarkOwnerCheck(b *testing.B) {
	o := readyOwner(b)
	keys := make([]uint64, 1024)
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range keys {
		keys[i] = rnd.Uint64()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		h, ok := o.GetOwnershipHandle(keys[i&1023])
		if !ok || !o.CheckContinuousOwnership(h) {
			b.Fatal("not held")
		}
	}
}
