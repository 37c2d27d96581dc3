package ownerguard_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// These tests run Owners against real manager nodes (raft, the owner stream
// service), where the fake manager only stands in for the lease core.

const serverT = 3 * time.Second // the namespace's lease T, and so the owners'

func startManagerNode(t *testing.T, id, join string) *manager.Server {
	t.Helper()
	cfg := manager.DefaultServerConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Join = join
	cfg.LeaseDuration = serverT
	cfg.Namespaces = []manager.NamespaceConfig{{Name: testNS, RingSize: 64}}
	cfg.RaftHeartbeatTimeout = 100 * time.Millisecond
	cfg.RaftElectionTimeout = 100 * time.Millisecond
	cfg.RaftLeaderLeaseTimeout = 50 * time.Millisecond
	s, err := manager.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return s
}

func grpcAddr(s *manager.Server) string { _, g, _ := s.Addrs(); return g }

// exactlyOne reports whether, at n random points, exactly one of the owners
// holds the key.
func exactlyOne(n int, owners ...*ownerguard.Owner) bool {
	rnd := rand.New(rand.NewPCG(5, 6))
	for range n {
		k, holders := rnd.Uint64(), 0
		for _, o := range owners {
			if _, ok := o.GetOwnershipHandle(k); ok {
				holders++
			}
		}
		if holders != 1 {
			return false
		}
	}
	return true
}

func TestOwnerWithManagerCluster(t *testing.T) {
	n1 := startManagerNode(t, "n1", "")
	eventually(t, nil, "n1 to lead", n1.IsLeader)
	_, _, h1 := n1.Addrs()
	n2 := startManagerNode(t, "n2", h1)
	eventually(t, nil, "n2 to know the leader", func() bool { _, g, _ := n2.Leader(); return g == grpcAddr(n1) })

	withT := func(c *ownerguard.OwnerConfig) { c.LeaseDuration = serverT }
	// a knows only the standby, which names the leader in its trailer.
	a, _ := newOwner(t, "a", []string{grpcAddr(n2)}, withT)
	waitReady(t, a)
	if held := a.Held(); len(held) != 1 || !held[0].Range.IsFull() {
		t.Fatalf("a holds %v, want the whole ring", lease.FormatLeases(held))
	}
	if st := a.Stats(); st.Redirects != 1 {
		t.Errorf("a: Stats() = %+v, want one redirect", st)
	}
	b, _ := newOwner(t, "b", []string{grpcAddr(n2), grpcAddr(n1)}, withT)
	waitReady(t, b)
	eventually(t, b, "a and b to split the ring", func() bool {
		return len(a.Held()) > 0 && len(b.Held()) > 0 && exactlyOne(1000, a, b)
	})
}

func TestOwnerSurvivesLeaderFailover(t *testing.T) {
	n1 := startManagerNode(t, "n1", "")
	eventually(t, nil, "n1 to lead", n1.IsLeader)
	_, _, h1 := n1.Addrs()
	n2 := startManagerNode(t, "n2", h1)
	n3 := startManagerNode(t, "n3", h1)
	nodes := []*manager.Server{n1, n2, n3}
	for _, n := range nodes[1:] {
		eventually(t, nil, "the standbys to know the leader", func() bool { _, g, _ := n.Leader(); return g == grpcAddr(n1) })
	}
	o, rec := newOwner(t, "a", []string{grpcAddr(n1), grpcAddr(n2), grpcAddr(n3)},
		func(c *ownerguard.OwnerConfig) { c.LeaseDuration = serverT })
	waitReady(t, o)
	before := o.Held()
	if len(before) != 1 || !before[0].Range.IsFull() {
		t.Fatalf("a holds %v, want the whole ring", lease.FormatLeases(before))
	}
	eventually(t, nil, "the grant upcall", func() bool { _, _, n := rec.all(); return n == 1 })

	n1.Kill()
	eventually(t, o, "the session to reopen on the new leader", func() bool { return o.Stats().Sessions == 2 })
	if !n2.IsLeader() && !n3.IsLeader() {
		t.Fatal("no new leader, yet the session reopened")
	}
	// The new leader took every lease over as renewed: same generations,
	// no loss.
	if after := o.Held(); !ring.Equal(heldTable(after), heldTable(before)) {
		t.Errorf("held %v before the failover, %v after", lease.FormatLeases(before), lease.FormatLeases(after))
	}
	if _, revoked, n := rec.all(); n != 1 || len(revoked) != 0 {
		t.Errorf("%d upcalls, revoked %v, during the failover; want none", n-1, revoked)
	}
}
