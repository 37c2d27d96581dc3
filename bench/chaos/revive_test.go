package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestStartRevivesManagerWhosePortWasTaken takes m2's raft port before m2
// starts, as any program binding port 0 could after freePort released it:
// m2 exits with "address already in use", and Start must bring it up on new
// ports behind the same relay addresses instead of timing out on "three
// voters" (the cause of a CI failure). Without reviveManagers it fails.
func TestStartRevivesManagerWhosePortWasTaken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := Build(bin); err != nil {
		t.Fatal(err)
	}
	l := DefaultLayout()
	l.Owners, l.Proxies = 1, 0
	h := &Harness{L: l, Dir: dir, Bin: bin, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	h.hist.Bound = 2 * l.T
	defer h.Close()
	var taken net.Listener
	h.beforeManager = func(m *managerPorts) {
		if m.name != "m2" {
			return
		}
		var err error
		if taken, err = net.Listen("tcp", m.raft); err != nil {
			t.Fatalf("taking m2's raft port %s: %v", m.raft, err)
		}
	}
	defer func() {
		if taken != nil {
			taken.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := h.managers[1]
	if m2.revivals != 1 {
		t.Fatalf("m2 started again %d times, want 1", m2.revivals)
	}
	if m2.raft == taken.Addr().String() {
		t.Fatalf("m2 still on the taken port %s", m2.raft)
	}
	if n := h.voters(); n != l.Managers {
		t.Fatalf("%d voters, want %d", n, l.Managers)
	}
}
