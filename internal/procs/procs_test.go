package procs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a child process: its value says
// how.
const helperEnv = "PROCS_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "exit3":
		fmt.Println("hello from the child")
		os.Exit(3)
	case "wait":
		// Ends on SIGTERM with code 0.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		os.Exit(0)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Hour) // until the test kills it
	}
}

// child starts the test binary in mode under g.
func child(t *testing.T, g *Group, name, mode string) *Proc {
	t.Helper()
	t.Setenv(helperEnv, mode)
	p, err := g.Start(name, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// waitLog polls p's log until it holds want.
func waitLog(t *testing.T, p *Proc, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(p.Log)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("%s's log %s does not say %q: %q", p.Name, p.Log, want, b)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

func TestStartLogsAndExitStatus(t *testing.T) {
	g := &Group{Dir: t.TempDir()}
	p := child(t, g, "c1", "exit3")
	<-p.Done()
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit status %v, want code 3", err)
	}
	if !p.Exited() {
		t.Fatal("Exited is false after Done")
	}
	if p.Log != filepath.Join(g.Dir, "c1.log") {
		t.Fatalf("log %s", p.Log)
	}
	b, err := os.ReadFile(p.Log)
	if err != nil || !strings.Contains(string(b), "hello from the child") {
		t.Fatalf("log %q, %v", b, err)
	}
}

func TestStartCmdKeepsEnvironment(t *testing.T) {
	g := &Group{Dir: t.TempDir()}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=exit3")
	p, err := g.StartCmd("env", cmd)
	if err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit status %v: the child did not get the environment the caller set", err)
	}
	if got := g.Procs(); len(got) != 1 || got[0] != p {
		t.Fatalf("Procs %v, want the one started", got)
	}
}

func TestStartMissingBinary(t *testing.T) {
	g := &Group{Dir: t.TempDir()}
	if _, err := g.Start("nope", filepath.Join(g.Dir, "no-such-binary")); err == nil || !strings.Contains(err.Error(), "starting nope") {
		t.Fatalf("err %v, want one naming the process", err)
	}
}

func TestStopIsGracefulThenKills(t *testing.T) {
	g := &Group{Dir: t.TempDir()}
	polite := child(t, g, "polite", "wait")
	stubborn := child(t, g, "stubborn", "ignore-term")
	waitLog(t, polite, "ready")
	waitLog(t, stubborn, "ready")
	polite.Stop(time.Minute)
	if err := polite.Err(); err != nil {
		t.Fatalf("a process that handles SIGTERM exited with %v, want 0", err)
	}
	stubborn.Stop(50 * time.Millisecond)
	var ee *exec.ExitError
	if err := stubborn.Err(); !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("a process that ignores SIGTERM ended with %v, want killed by SIGKILL", err)
	}
}

func TestKillStoppedProcess(t *testing.T) {
	g := &Group{Dir: t.TempDir()}
	p := child(t, g, "paused", "wait")
	waitLog(t, p, "ready")
	p.Signal(syscall.SIGSTOP)
	p.Kill() // returns only once reaped
	if !p.Exited() {
		t.Fatal("not reaped after Kill")
	}
	p.Kill() // and again: a reaped process is not signalled
}

func TestStopAllStopsLastAfterTheOthers(t *testing.T) {
	g := &Group{Dir: t.TempDir()}
	var ps []*Proc
	for _, n := range []string{"manager", "s1", "s2"} {
		ps = append(ps, child(t, g, n, "wait"))
	}
	for _, p := range ps {
		waitLog(t, p, "ready")
	}
	// The manager must outlive the others: watch for it ending first.
	managerFirst := make(chan bool, 1)
	go func() {
		<-ps[0].Done()
		managerFirst <- !ps[1].Exited() || !ps[2].Exited()
	}()
	g.StopAll(time.Minute, "manager")
	for _, p := range ps {
		if !p.Exited() {
			t.Fatalf("%s still running after StopAll", p.Name)
		}
	}
	if <-managerFirst {
		t.Fatal("the manager was stopped before the processes named before it")
	}
	g.StopAll(time.Minute) // nothing left: returns at once
}

func TestFreePortsDistinct(t *testing.T) {
	a, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, x := range a {
		if !strings.HasPrefix(x, "127.0.0.1:") || seen[x] {
			t.Fatalf("ports %v: %s repeated or not on 127.0.0.1", a, x)
		}
		seen[x] = true
	}
}
