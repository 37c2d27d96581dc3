package manager_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/manager"
)

// TestStandbyServesLookups checks that a standby in contact with the
// leader admits Lookup streams and heartbeats its namespaces, and that the
// leader's standby loop does not heartbeat (its own loop does).
func TestStandbyServesLookups(t *testing.T) {
	a := startNode(t, "n1", "", nil)
	eventually(t, "leadership", a.IsLeader)
	_, _, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	eventually(t, "n2 to hear from the leader", b.ServesLookups)
	if err := b.CheckLookup(context.Background()); err != nil {
		t.Fatalf("standby refuses a Lookup: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	beats := func(s interface {
		RunStandbyHeartbeats(context.Context, func() []string, func(string), func(string, time.Duration) bool)
	}) chan string {
		ch := make(chan string, 64)
		go s.RunStandbyHeartbeats(ctx, func() []string { return []string{"ns"} }, func(ns string) {
			select {
			case ch <- ns:
			default:
			}
		}, nil)
		return ch
	}
	fromA, fromB := beats(a), beats(b)
	select {
	case ns := <-fromB:
		if ns != "ns" {
			t.Errorf("standby heartbeat for %q", ns)
		}
	case <-ctx.Done():
		t.Fatal("no heartbeat from the standby")
	}
	// Two more of the standby's heartbeats: the leader's loop had as long.
	for range 2 {
		select {
		case <-fromB:
		case <-ctx.Done():
			t.Fatal("the standby's heartbeats stopped")
		}
	}
	select {
	case <-fromA:
		t.Error("the leader's standby loop heartbeats")
	default:
	}
	// A standby that is always busy with a table change still heartbeats:
	// each heartbeat waits a quarter of the interval at most.
	var asked atomic.Int64
	busyBeats := make(chan string, 64)
	go b.RunStandbyHeartbeats(ctx, func() []string { return []string{"ns"} }, func(ns string) {
		select {
		case busyBeats <- ns:
		default:
		}
	}, func(ns string, within time.Duration) bool {
		if ns != "ns" || within <= 0 {
			t.Errorf("busy(%q, %v)", ns, within)
		}
		asked.Add(1)
		return true
	})
	for range 3 {
		select {
		case <-busyBeats:
		case <-ctx.Done():
			t.Fatal("a standby busy with changes stopped heartbeating")
		}
	}
	if asked.Load() == 0 {
		t.Error("the heartbeat loop never asked whether a change was going out")
	}
}

// TestLeaderLeavesLookupsToStandbys checks CheckLookup on the leader: it
// serves Lookups while alone, refuses them with UNAVAILABLE once standbys
// are in contact, naming each in turn, and names only those still in
// contact once one is gone.
func TestLeaderLeavesLookupsToStandbys(t *testing.T) {
	a := startNode(t, "n1", "", nil)
	eventually(t, "leadership", a.IsLeader)
	if err := a.CheckLookup(context.Background()); err != nil {
		t.Fatalf("a leader without standbys refuses a Lookup: %v", err)
	}
	_, _, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	c := startNode(t, "n3", ah, nil)
	_, bg, _ := b.Addrs()
	_, cg, _ := c.Addrs()
	eventually(t, "the leader in contact with both standbys, and both serving", func() bool {
		return slices.Equal(a.StandbysInContact(), []string{"n2", "n3"}) && b.ServesLookups() && c.ServesLookups()
	})
	var cl struct {
		Role              string
		StandbysInContact []string `json:"standbys_in_contact"`
	}
	getJSON(t, "http://"+ah+"/v1/cluster", &cl)
	if cl.Role != "leader" || !slices.Equal(cl.StandbysInContact, []string{"n2", "n3"}) {
		t.Errorf("/v1/cluster on the leader: %+v; want standbys_in_contact [n2 n3]", cl)
	}
	// A standby is named once its join's addresses are applied.
	seen := map[string]bool{}
	eventually(t, "the leader to name both standbys", func() bool {
		if err := a.CheckLookup(context.Background()); err != nil {
			for _, addr := range []string{bg, cg} {
				seen[addr] = seen[addr] || strings.Contains(err.Error(), addr)
			}
		}
		return len(seen) == 2 && seen[bg] && seen[cg]
	})
	named := map[string]int{}
	for range 4 {
		err := a.CheckLookup(context.Background())
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), manager.ErrLookupsOnStandbys.Error()) {
			t.Fatalf("the leader's refusal: %v; want UNAVAILABLE, %v", err, manager.ErrLookupsOnStandbys)
		}
		for _, addr := range []string{bg, cg} {
			if strings.Contains(err.Error(), addr) {
				named[addr]++
			}
		}
	}
	if named[bg] != 2 || named[cg] != 2 {
		t.Errorf("four refusals named %v; want each standby twice (%s, %s)", named, bg, cg)
	}
	// A Lookup that could not reach the standby named asks the leader.
	fallback := metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.LeaderFallbackKey, "1"))
	if err := a.CheckLookup(fallback); err != nil {
		t.Errorf("the leader refuses a Lookup asking it to serve (%s): %v", wire.LeaderFallbackKey, err)
	}
	for _, s := range []*manager.Server{b, c} {
		if err := s.CheckLookup(context.Background()); err != nil {
			t.Fatalf("a standby refuses a Lookup: %v", err)
		}
	}

	// n3 goes (the leader keeps its quorum with n2): only n2 is named.
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	c.Stop(ctx)
	cancel()
	eventually(t, "the leader to see n3 gone", func() bool { return slices.Equal(a.StandbysInContact(), []string{"n2"}) })
	for range 3 {
		if err := a.CheckLookup(context.Background()); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), bg) {
			t.Fatalf("the leader's refusal with n3 gone: %v; want UNAVAILABLE naming %s", err, bg)
		}
	}
}

// TestLeaderServesLookupsOption checks LeaderServesLookups: that leader
// serves Lookups with a standby in contact.
func TestLeaderServesLookupsOption(t *testing.T) {
	a := startNode(t, "n1", "", func(cfg *manager.ServerConfig) { cfg.LeaderServesLookups = true })
	eventually(t, "leadership", a.IsLeader)
	_, _, ah := a.Addrs()
	b := startNode(t, "n2", ah, nil)
	eventually(t, "n2 to hear from the leader", b.ServesLookups)
	eventually(t, "the leader in contact with n2", func() bool { return slices.Equal(a.StandbysInContact(), []string{"n2"}) })
	if err := a.CheckLookup(context.Background()); err != nil {
		t.Fatalf("LeaderServesLookups: the leader refuses a Lookup: %v", err)
	}
}
