package manager

import (
	"testing"
	"time"
)

func TestViewCoreDampedChanges(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newViewCore(4*time.Second, 3*time.Second)
	c.current.Namespace = "ns"
	if _, ok := c.tick(t0); ok {
		t.Fatal("a view with no proxies")
	}
	c.register("p1", "127.0.0.1:1", 1, t0)
	c.register("p2", "127.0.0.1:2", 1, t0)
	v, ok := c.tick(t0)
	if !ok || len(v.Members) != 2 || v.Registered != 2 {
		t.Fatalf("first view: %+v %v", v, ok)
	}
	if _, again := c.tick(t0); again {
		t.Fatal("proposed twice while the first was being committed")
	}
	v.ID = 7
	c.committed(v, true)
	// A third proxy registers at once: no new view before the interval.
	c.register("p3", "127.0.0.1:3", 1, t0.Add(time.Second))
	if _, ok := c.tick(t0.Add(time.Second)); ok {
		t.Fatal("a view change within the damping interval")
	}
	renewAll := func(at time.Time, names ...string) {
		for _, n := range names {
			c.renew(n, at)
		}
	}
	at := t0.Add(3 * time.Second)
	renewAll(at, "p1", "p2", "p3")
	v, ok = c.tick(at)
	if !ok || len(v.Members) != 3 || v.Registered != 3 {
		t.Fatalf("after the interval: %+v %v", v, ok)
	}
	v.ID = 9
	c.committed(v, true)
	// p3 stops renewing: left out after 2.5 s (suspect), and counted
	// registered until its hold (4.33 s) and ghostLeases (32 s) pass.
	at2 := at.Add(3 * time.Second)
	renewAll(at2, "p1", "p2")
	v, ok = c.tick(at2)
	if !ok || len(v.Members) != 2 || v.Registered != 3 {
		t.Fatalf("p3 suspected: %+v %v", v, ok)
	}
	v.ID = 11
	c.committed(v, true)
	at3 := at2.Add(3 * time.Second)
	renewAll(at3, "p1", "p2")
	if v, ok := c.tick(at3); ok {
		t.Fatalf("p3 expired, but it may still admit its panic share: no change of N yet: %+v", v)
	}
	if !c.renew("p1", at3) || c.renew("p3", at3) {
		t.Fatal("renew: p1 registered, p3 expired")
	}
	at4 := at3.Add(33 * time.Second)
	renewAll(at4, "p1", "p2")
	v, ok = c.tick(at4)
	if !ok || len(v.Members) != 2 || v.Registered != 2 {
		t.Fatalf("p3 forgotten after ghostLeases: %+v %v", v, ok)
	}
	// A pause of the manager (no tick for longer than a hold) expires
	// nobody: it cannot tell who stopped renewing.
	v.ID = 13
	c.committed(v, true)
	at5 := at4.Add(10 * time.Second)
	if v, ok := c.tick(at5); ok {
		t.Fatalf("a pause of the manager changed the view: %+v", v)
	}
	// A proxy that stays away is then left out and, later, expires; N
	// holds (ghostLeases) while it may still admit its panic share.
	at6 := at5.Add(4500 * time.Millisecond)
	c.renew("p1", at5.Add(2*time.Second))
	c.tick(at5.Add(2 * time.Second)) // the leader ticks every 100 ms
	c.renew("p1", at6)
	v, ok = c.tick(at6)
	if !ok || len(v.Members) != 1 || v.Registered != 2 {
		t.Fatalf("p2 away after the pause: %+v %v, want p1 alone of 2 registered", v, ok)
	}
}

func TestViewCoreReportAndFailover(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newViewCore(4*time.Second, 3*time.Second)
	c.register("p1", "a1", 1, t0)
	c.register("p2", "a2", 1, t0)
	v, _ := c.tick(t0)
	v.ID = 5
	c.committed(v, true)
	// p2 renewed 0.5 s ago: a report does not remove it (the relay serves).
	at := t0.Add(4 * time.Second)
	c.renew("p1", at)
	c.renew("p2", at.Add(-500*time.Millisecond))
	c.report(5, []string{"p2"}, at)
	if _, ok := c.tick(at); ok {
		t.Fatal("a view change for a member that renews on time")
	}
	// p2 missed a renewal (1.5 s): the report leaves it out now, before
	// the suspect time of 2.5 s.
	c.renew("p2", at.Add(-1500*time.Millisecond))
	c.report(4, []string{"p2"}, at) // a report on an old view: ignored
	if _, ok := c.tick(at); ok {
		t.Fatal("an old view's report changed the view")
	}
	c.report(5, []string{"p2"}, at)
	v, ok := c.tick(at)
	if !ok || len(v.Members) != 1 || v.Members[0].Name != "p1" || v.Registered != 2 {
		t.Fatalf("after the report: %+v %v", v, ok)
	}
	// A new leader restores the committed view: no change while the
	// members come back in time.
	n := newViewCore(4*time.Second, 3*time.Second)
	n.restore(ProxyView{ID: 5, Members: []ViewMember{{"p1", "a1"}, {"p2", "a2"}}, Registered: 2}, at)
	n.register("p1", "a1", 1, at.Add(time.Second))
	n.register("p2", "a2", 1, at.Add(2*time.Second))
	if v, ok := n.tick(at.Add(3 * time.Second)); ok {
		t.Fatalf("a failover changed the view: %+v", v)
	}
}
