// Package procs starts the child processes of Fuge's harnesses (the demo
// and the benchmarks) with their output in log files, and stops them by the
// PID it started them with, never by name.
package procs

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrExited is the error of a process that ended while it was needed.
var ErrExited = errors.New("process exited")

// Proc is one process a Group started.
type Proc struct {
	Name string // the name it was started under
	Log  string // the file holding its stdout and stderr

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // its exit status, once done is closed
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit status (nil for exit code 0); valid once Done
// is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends s to the process unless it has already been reaped (its PID
// may then belong to another process).
func (p *Proc) Signal(s os.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(s)
	}
}

// Kill sends SIGKILL (a crash) and waits until the process is reaped. A
// stopped process is continued first.
func (p *Proc) Kill() {
	p.cont()
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM (continuing a stopped process first so that it can
// handle it), waits up to grace, then kills.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	p.cont()
	p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}

// Group starts processes with their output in Dir/<name>.log and stops
// every one of them at the end.
type Group struct {
	Dir string // log directory; it must exist

	mu  sync.Mutex
	all []*Proc
}

// Start runs bin with args, its stdout and stderr appended to
// Dir/<name>.log. The child runs in a process group of its own (a Ctrl-C
// at the terminal reaches the harness, which stops it in order) and, on
// Linux, is killed if the harness dies first.
func (g *Group) Start(name, bin string, args ...string) (*Proc, error) {
	return g.StartCmd(name, exec.Command(bin, args...))
}

// StartCmd is Start of a command the caller prepared (its environment, a
// taskset in front of it); the group sets its output and process
// attributes.
func (g *Group) StartCmd(name string, cmd *exec.Cmd) (*Proc, error) {
	path := filepath.Join(g.Dir, name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: path, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	g.mu.Lock()
	g.all = append(g.all, p)
	g.mu.Unlock()
	return p, nil
}

// Procs lists the processes the group started and has not yet stopped
// with StopAll, oldest first.
func (g *Group) Procs() []*Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Proc(nil), g.all...)
}

// StopAll stops every process the group started, each by its PID with
// Stop(grace): all at once, except those whose names are in last, which
// are stopped afterwards one by one in the order given (a manager after the
// proxies and servers that talk to it).
func (g *Group) StopAll(grace time.Duration, last ...string) {
	g.mu.Lock()
	all := g.all
	g.all = nil
	g.mu.Unlock()
	isLast := func(name string) bool {
		for _, n := range last {
			if n == name {
				return true
			}
		}
		return false
	}
	var wg sync.WaitGroup
	for _, p := range all {
		if !isLast(p.Name) {
			wg.Go(func() { p.Stop(grace) })
		}
	}
	wg.Wait()
	for _, n := range last {
		for _, p := range all {
			if p.Name == n {
				p.Stop(grace)
			}
		}
	}
}

// FreePorts reserves n distinct ports on 127.0.0.1 by binding port 0 and
// releases them for the processes to bind. Another program could take one
// in between; the process that then fails to bind says so in its log.
func FreePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	addrs := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// FreePort is FreePorts(1)'s one address.
func FreePort() (string, error) {
	a, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}
