package manager

import (
	"context"
	"testing"
	"time"
)

// testNodeConfig is the configuration of a single-node manager for this
// package's tests: node id, a data directory of tb's, kernel-chosen ports
// on 127.0.0.1, raft's timers short (elections in tens of milliseconds),
// lease duration T and one namespace ns of ring size r.
func testNodeConfig(tb testing.TB, id, ns string, r int, T time.Duration) ServerConfig {
	cfg := DefaultServerConfig()
	cfg.NodeID = id
	cfg.DataDir = tb.TempDir()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.LeaseDuration = T
	cfg.Namespaces = []NamespaceConfig{{Name: ns, RingSize: r}}
	cfg.RaftHeartbeatTimeout, cfg.RaftElectionTimeout, cfg.RaftLeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	return cfg
}

// waitLeading waits until s leads, failing tb after d.
func waitLeading(tb testing.TB, s *Server, d time.Duration) {
	tb.Helper()
	deadline := time.After(d)
	for {
		leading, changed := s.leadership()
		if leading {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			tb.Fatal("the node did not come to lead")
		}
	}
}

// startTestNode starts a node with cfg and stops it when tb ends.
func startTestNode(tb testing.TB, cfg ServerConfig) *Server {
	tb.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return s
}
