package manager

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// nsRecorder is an Observer that records the namespaces it was given a
// view of, and signals each view on changed.
type nsRecorder struct {
	mu      sync.Mutex
	seen    map[string]bool
	changed chan struct{} // buffered 1
}

func newNSRecorder() *nsRecorder {
	return &nsRecorder{seen: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (r *nsRecorder) NamespaceView(ns string, _ []LookupEntry, _ uint64) {
	r.mu.Lock()
	r.seen[ns] = true
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *nsRecorder) NamespaceDeleted(string) {}

func (r *nsRecorder) has(ns string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[ns]
}

// waitFor waits until a view of ns has been recorded, or returns an error
// after d.
func (r *nsRecorder) waitFor(ns string, d time.Duration) error {
	timeout := time.After(d)
	for !r.has(ns) {
		select {
		case <-r.changed:
		case <-timeout:
			return fmt.Errorf("no view of %q within %v", ns, d)
		}
	}
	return nil
}

// standbyApplies starts a leader and a standby whose raft CommitTimeout is
// an hour, so that the leader sends the commit index only with new
// entries, creates a namespace on the leader, and reports whether the
// standby applied that commit within d. The standby's view of the first
// namespace shows it replicating, and the leader added it to its raft
// configuration before that: nothing else is appended after the create.
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
	rec := newNSRecorder()
	_, _, ah := a.Addrs()
	b := start("n2", ah, rec)
	if err := rec.waitFor("ns", 20*time.Second); err != nil {
		t.Fatalf("the standby did not join and apply the first namespace: %v", err)
	}
	if v := a.Voters(); v != 2 {
		t.Fatalf("the leader's configuration has %d voters, want 2", v)
	}
	if err := a.apply(command{Op: "create", Namespace: &NamespaceConfig{Name: "later", RingSize: 64}}); err != nil {
		t.Fatal(err)
	}
	if b.IsLeader() {
		t.Fatal("the standby leads")
	}
	return rec.waitFor("later", d)
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
