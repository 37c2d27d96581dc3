package manager

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// nsRecorder is an Observer that records the namespaces it was given a
// view of.
type nsRecorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *nsRecorder) NamespaceView(ns string, _ []LookupEntry, _ uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[ns] = true
}

func (r *nsRecorder) NamespaceDeleted(string) {}

func (r *nsRecorder) has(ns string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[ns]
}

// standbyApplies starts a leader and a standby whose raft CommitTimeout is
// an hour, so that the leader sends the commit index only with new
// entries, creates a namespace on the leader, and reports whether the
// standby applied that commit within d.
func standbyApplies(t *testing.T, d time.Duration) error {
	t.Helper()
	start := func(id, join string, obs Observer) *Server {
		cfg := testNodeConfig(t, id, "ns", 64, time.Minute)
		cfg.Join, cfg.Observer = join, obs
		cfg.RaftCommitTimeout = time.Hour
		return startTestNode(t, cfg)
	}
	a := start("n1", "", nil)
	waitLeading(t, a, 20*time.Second)
	var rec nsRecorder
	_, _, ah := a.Addrs()
	b := start("n2", ah, &rec)
	if err := poll(20*time.Second, func() bool { return a.Voters() == 2 && rec.has("ns") }); err != nil {
		t.Fatalf("the standby did not join and apply the first namespace: %v", err)
	}
	if err := a.apply(command{Op: "create", Namespace: &NamespaceConfig{Name: "later", RingSize: 64}}); err != nil {
		t.Fatal(err)
	}
	if b.IsLeader() {
		t.Fatal("the standby leads")
	}
	return poll(d, func() bool { return rec.has("later") })
}

// poll waits until cond holds, or returns an error after d.
func poll(d time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	return nil
}

// TestStandbyAppliesCommitsAtOnce checks that a standby applies the
// leader's last commit without waiting for raft's CommitTimeout: the
// leader appends a barrier after each commit (nudgeFollowers), whose
// AppendEntries carries the commit index. With a CommitTimeout of an hour
// the standby would otherwise not learn of the commit until the next one
// (TestStandbyWaitsWithoutNudges).
func TestStandbyAppliesCommitsAtOnce(t *testing.T) {
	if err := standbyApplies(t, 20*time.Second); err != nil {
		t.Fatalf("the standby did not apply the leader's last commit: %v", err)
	}
}

// TestStandbyWaitsWithoutNudges is the negative control of
// TestStandbyAppliesCommitsAtOnce: without the barriers the standby does
// not apply the last commit while nothing else is appended.
func TestStandbyWaitsWithoutNudges(t *testing.T) {
	skipNudges.Store(true)
	t.Cleanup(func() { skipNudges.Store(false) })
	err := standbyApplies(t, 2*time.Second)
	if err == nil {
		t.Fatal("the standby applied the last commit without a barrier: the test cannot tell nudges from none")
	}
}
