package main

import (
	"os/exec"
	"testing"
	"time"
)

// TestKillManagers: an interrupt's killManagers kills the processes still
// registered and returns once they have exited, and leaves alone those
// already stopped (removed from the registry).
func TestKillManagers(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	running, stopped := start(), start()
	addManager(running.Process)
	addManager(stopped.Process)
	removeManager(stopped.Process.Pid)
	if exited(running.Process.Pid) {
		t.Fatal("a running process counts as exited")
	}
	if left := killManagers(10 * time.Second); len(left) > 0 {
		t.Fatalf("killManagers left %v running", left)
	}
	if !exited(running.Process.Pid) {
		t.Fatal("the registered process is still running")
	}
	if exited(stopped.Process.Pid) {
		t.Fatal("killManagers killed a process no longer registered")
	}
	if err := running.Wait(); err == nil || running.ProcessState.ExitCode() != -1 {
		t.Fatalf("the registered process ended with %v, want killed by a signal", err)
	}
	removeManager(running.Process.Pid)
}
