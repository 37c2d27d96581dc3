package ownerguard

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestHandles follows one key through grant, renewal, recall and a regrant
// under a new generation, as PRS Fig. 4 would use it.
func TestHandles(t *testing.T) {
	const key = 150 // in rangeA
	c, m, req := granted(t, nil, leaseA)
	now := at(2 * time.Second)
	h, ok := c.GetOwnershipHandle(key, now)
	if want := (Handle{Key: key, Range: rangeA, Gen: 5}); !ok || h != want {
		t.Fatalf("GetOwnershipHandle = %+v, %v; want %+v, true", h, ok, want)
	}
	if _, ok := c.GetOwnershipHandle(rangeA.Start, now); ok {
		t.Error("the point just before the range is owned")
	}
	if !c.CheckContinuousOwnership(h, now) {
		t.Error("not continuous right after the grant")
	}
	if g, ok := c.CheckLeaseNow(key, now); !ok || g != 5 || !c.CheckLeaseContinuous(key, 5, now) {
		t.Errorf("CheckLeaseNow = %d, %v; want 5, true and continuous", g, ok)
	}
	// Expiry bounds the handle: A runs until T.
	if !c.CheckContinuousOwnership(h, at(testT-1)) || c.CheckContinuousOwnership(h, at(testT)) {
		t.Error("continuity not bounded by the expiry at T")
	}
	if _, ok := c.GetOwnershipHandle(key, at(testT)); ok {
		t.Error("owned at the expiry")
	}

	req = c.Step(m.reply(req, []lease.Lease{leaseA}, nil), now).Send // renewal
	if req != nil {
		t.Fatalf("renewal sent %+v", req)
	}
	if !c.CheckContinuousOwnership(h, at(testT)) {
		t.Error("renewal broke continuity")
	}
	before := c.View()

	// Recall (request 2 was sent at 1s; the manager writes on its own).
	req = c.Step(m.push(2, nil, nil), at(3*time.Second)).Send
	if _, ok := c.GetOwnershipHandle(key, at(3*time.Second)); ok {
		t.Error("owned after recall")
	}
	if c.CheckContinuousOwnership(h, at(3*time.Second)) || c.CheckLeaseContinuous(key, 5, at(3*time.Second)) {
		t.Error("continuous after recall")
	}
	if !before.CheckContinuousOwnership(h, at(3*time.Second)) {
		t.Error("an earlier View changed")
	}

	// Regrant under a new generation: owned again, but not continuously.
	c.Step(m.reply(req, nil, []lease.Lease{ls(rangeA, 8)}), at(4*time.Second))
	h2, ok := c.GetOwnershipHandle(key, at(4*time.Second))
	if !ok || h2.Gen != 8 {
		t.Fatalf("after regrant: %+v, %v; want gen 8", h2, ok)
	}
	if c.CheckContinuousOwnership(h, at(4*time.Second)) {
		t.Error("the old handle survived a regrant")
	}
	if !c.CheckContinuousOwnership(h2, at(4*time.Second)) {
		t.Error("the new handle is not continuous")
	}
}

func TestHandleRange(t *testing.T) {
	top := ^uint64(0)
	for _, tc := range []struct {
		name  string
		grant []lease.Lease
		key   uint64
		want  ring.Range
	}{
		{"merged arc", []lease.Lease{ls(rg(100, 200), 5), ls(rg(200, 300), 5)}, 250, rg(100, 300)},
		{"split by gen", []lease.Lease{ls(rg(100, 200), 5), ls(rg(200, 300), 6)}, 250, rg(200, 300)},
		{"across the wrap", []lease.Lease{ls(rg(top-9, 10), 5)}, 0, rg(top-9, 10)},
		{"the range end", []lease.Lease{ls(rg(top-9, 10), 5)}, 10, rg(top-9, 10)},
		{"whole circle", []lease.Lease{ls(rg(42, 42), 5)}, 42, ring.Full()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, _ := granted(t, nil, tc.grant...)
			h, ok := c.GetOwnershipHandle(tc.key, at(time.Second))
			if !ok || h.Range != tc.want {
				t.Errorf("GetOwnershipHandle(%d) = %+v, %v; want range %v", tc.key, h, ok, tc.want)
			}
		})
	}
}

// checkCore returns a core holding 64 leases of alternating generations, a
// handle on a held key, and a time at which it is held.
func checkCore(tb testing.TB) (*Core, Handle, time.Time) {
	c := newCore(tb, nil)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	var grant []lease.Lease
	for i := range uint64(64) {
		grant = append(grant, ls(rg(i<<58, i<<58+1<<57), lease.Gen(i+1)))
	}
	c.Step(m.reply(req, nil, grant), at(time.Second))
	now := at(2 * time.Second)
	h, ok := c.GetOwnershipHandle(17<<58+5, now)
	if !ok {
		tb.Fatal("key not held")
	}
	return c, h, now
}

func TestCheckDoesNotAllocate(t *testing.T) {
	c, h, now := checkCore(t)
	v := c.View()
	n := testing.AllocsPerRun(100, func() {
		if _, ok := c.GetOwnershipHandle(h.Key, now); !ok {
			t.Fatal("not held")
		}
		if !c.CheckContinuousOwnership(h, now) || !v.CheckContinuousOwnership(h, now) {
			t.Fatal("not continuous")
		}
		if _, ok := v.CheckLeaseNow(h.Key+1<<57, now); ok {
			t.Fatal("gap held")
		}
	})
	if n != 0 {
		t.Errorf("checks allocate %v times per run", n)
	}
}

func BenchmarkCheck(b *testing.B) {
	c, h, now := checkCore(b)
	b.ReportAllocs()
	for b.Loop() {
		hd, ok := c.GetOwnershipHandle(h.Key, now)
		if !ok || !c.CheckContinuousOwnership(hd, now) {
			b.Fatal("not held")
		}
	}
}
