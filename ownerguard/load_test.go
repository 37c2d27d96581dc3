package ownerguard_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// managerLoad reads the fake manager's record of name's latest load report.
func managerLoad(f *fakeManager, name string) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, _ := f.core.Loads(testNS)
	return l[name].Rate
}

// TestOwnerReportsAdmittedRate: requests counted through CountRequest (as
// the guards count every admitted request) reach the manager as the
// owner's smoothed rate, on its lease requests, per range group.
func TestOwnerReportsAdmittedRate(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	o, _ := newOwner(t, "a", []string{f.addr}, func(c *ownerguard.OwnerConfig) { c.LoadWindow = testT / 8 })
	waitReady(t, o)
	h := ring.HashString("user-1")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				o.CountRequest(h)
			}
		}
	}()
	eventually(t, o, "a load report above zero at the manager", func() bool { return managerLoad(f, "a") > 0 })
	close(stop)
	<-done
	l := o.Load()
	if l == nil || l.Rate <= 0 || len(l.Groups) != lease.LoadGroups {
		t.Fatalf("Load() = %+v", l)
	}
	for g, r := range l.Groups {
		if (g == lease.LoadGroup(h)) != (r > 0) {
			t.Fatalf("group %d has rate %v; only group %d had requests", g, r, lease.LoadGroup(h))
		}
	}
}

// TestSetLoad: an application's own figure replaces the rate; a figure the
// manager would refuse is refused here, naming the field, and changes
// nothing.
func TestSetLoad(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	o, _ := newOwner(t, "a", []string{f.addr}, nil)
	waitReady(t, o)
	if err := o.SetLoad(&lease.LoadReport{Rate: 42}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []lease.LoadReport{{Rate: math.NaN()}, {Rate: -1}, {Rate: 1, Groups: []float64{1}}} {
		if err := o.SetLoad(&bad); err == nil || !strings.Contains(err.Error(), "load.") {
			t.Errorf("SetLoad(%+v) = %v", bad, err)
		}
	}
	if l := o.Load(); l == nil || l.Rate != 42 {
		t.Fatalf("a refused SetLoad changed the figure: %+v", l)
	}
	eventually(t, o, "the manager to hear 42", func() bool { return managerLoad(f, "a") == 42 })
}

// TestLoadFunc: OwnerConfig.LoadFunc's figure is reported.
func TestLoadFunc(t *testing.T) {
	f := newFakeManager(t, testT, testNS)
	o, _ := newOwner(t, "a", []string{f.addr}, func(c *ownerguard.OwnerConfig) {
		c.LoadFunc = func() lease.LoadReport { return lease.LoadReport{Rate: 7.5} }
	})
	waitReady(t, o)
	eventually(t, o, "the manager to hear 7.5", func() bool { return managerLoad(f, "a") == 7.5 })
}
