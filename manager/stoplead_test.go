package manager

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestStopWhileTakingOver stops a node while it is taking over as leader
// (between the restore and the start of its leader loop, held there by
// beforeLeading until Stop has begun): Stop must end the node within its
// deadline with no leader loop left running. Before the fix the loop
// started after Stop had stepped down, and Stop returned
// context.DeadlineExceeded.
func TestStopWhileTakingOver(t *testing.T) {
	cfg := testNodeConfig(t, "n1", "ns", 64, 3*time.Second)
	// A first run commits the node and the namespace, so that the restart
	// below has nothing to commit when it takes over: its leader loop then
	// waits, as the loaded node's did, instead of ending at a failed
	// commit.
	first, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(nil); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, first, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	entered := make(chan *Server, 1)
	beforeLeading = func(s *Server) {
		entered <- s
		<-s.stop // Stop has begun: it closes s.stop, steps down, then shuts raft down
		// Hold the take-over until Stop has stepped down, as it had under
		// load: raft's state is Shutdown only after that.
		for deadline := time.Now().Add(10 * time.Second); s.raft.State() != raft.Shutdown; {
			if time.Now().After(deadline) {
				t.Error("Stop did not shut raft down: the take-over was not held until Stop stepped down")
				return
			}
			time.Sleep(time.Millisecond) // polling interval
		}
	}
	t.Cleanup(func() { beforeLeading = nil })
	s, err := NewServer(cfg) // the same data directory, new ports
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not start taking over as leader")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop while taking over: %v", err)
	}
	s.mu.Lock()
	l := s.leader
	s.mu.Unlock()
	if l != nil {
		t.Fatal("a leader loop is installed after Stop")
	}
}
