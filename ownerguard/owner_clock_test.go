package ownerguard

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// setClock is a Clock that reads what the test sets.
type setClock struct{ nanos atomic.Int64 }

func (c *setClock) set(t time.Time) { c.nanos.Store(t.UnixNano()) }
func (c *setClock) Now() time.Time  { return time.Unix(0, c.nanos.Load()) }

func clockOwner(t *testing.T, clock Clock) *Owner {
	t.Helper()
	o, err := NewOwner(OwnerConfig{
		Managers: []string{"127.0.0.1:1"}, Namespace: testNS, Name: testName, Addr: testAddr,
		LeaseDuration: testT, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestOwnerChecksReadTheClock: the Owner's checks read its clock on every
// call, an injected Clock as well as the default monotonic clock (which
// they read without going through the Clock interface), and compare it with
// the lease's expiry to the nanosecond.
func TestOwnerChecksReadTheClock(t *testing.T) {
	key := ring.HashString("device-1")
	full := []lease.Lease{ls(ring.Full(), 5)}

	t.Run("injected", func(t *testing.T) {
		clock := &setClock{}
		o := clockOwner(t, clock)
		if o.isMono {
			t.Fatal("an injected clock is taken for the monotonic one")
		}
		c, _, _ := granted(t, nil, full...) // sent at 0: held until testT
		o.view.Store(c.View())
		clock.set(at(time.Second))
		h, ok := o.GetOwnershipHandle(key)
		if !ok || h.Gen != 5 || !o.CheckContinuousOwnership(h) {
			t.Fatalf("at 1s: handle %+v %v, want held under 5", h, ok)
		}
		clock.set(at(testT - 1))
		if _, ok := o.GetOwnershipHandle(key); !ok || !o.CheckContinuousOwnership(h) {
			t.Errorf("1 ns before the expiry: not held")
		}
		clock.set(at(testT))
		if _, ok := o.GetOwnershipHandle(key); ok || o.CheckContinuousOwnership(h) {
			t.Errorf("at the expiry: still held")
		}
	})

	t.Run("monotonic", func(t *testing.T) {
		o := clockOwner(t, nil)
		if _, ok := o.clock.(clientshell.MonoClock); !ok || !o.isMono {
			t.Fatalf("default clock %T, fast path %v; want clientshell.MonoClock read directly", o.clock, o.isMono)
		}
		// Leases sent now, and sent two lease durations ago.
		for _, tc := range []struct {
			name string
			sent time.Duration
			held bool
		}{{"live", 0, true}, {"expired", -2 * testT, false}} {
			sent := o.clock.Now().Add(tc.sent)
			c := newCore(t, nil)
			m := &fakeMgr{nonce: mgrNonce}
			c.Step(m.reply(c.Start(sent).Send, nil, full), sent)
			o.view.Store(c.View())
			if _, ok := o.GetOwnershipHandle(key); ok != tc.held {
				t.Errorf("%s lease: GetOwnershipHandle %v, want %v", tc.name, ok, tc.held)
			}
			h := Handle{Key: key, Range: ring.Full(), Gen: 5}
			if got := o.CheckContinuousOwnership(h); got != tc.held {
				t.Errorf("%s lease: CheckContinuousOwnership %v, want %v", tc.name, got, tc.held)
			}
		}
	})
}
