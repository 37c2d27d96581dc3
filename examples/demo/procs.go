package main

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

// proc is one process the demo started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // its exit status, once done is closed
}

// procs starts processes with their output in log files, and stops every
// one of them, by PID, at the end.
type procs struct {
	dir string // log directory

	mu  sync.Mutex
	all []*proc
}

// start runs bin with args, its stdout and stderr in dir/name.log.
func (ps *procs) start(name, bin string, args ...string) (*proc, error) {
	path := filepath.Join(ps.dir, name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: path, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (a crash) and waits for the process to be reaped.
func (p *proc) kill() {
	if !p.exited() {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// stop sends SIGTERM, waits up to grace, then kills.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// stopAll stops every process still running, newest first (the proxy and
// the servers before the manager), each by its PID.
func (ps *procs) stopAll(grace time.Duration) {
	ps.mu.Lock()
	all := ps.all
	ps.all = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].name == "manager" {
			continue
		}
		wg.Go(func() { all[i].stop(grace) })
	}
	wg.Wait()
	for _, p := range all {
		if p.name == "manager" {
			p.stop(grace)
		}
	}
}

// freePorts reserves n distinct ports on 127.0.0.1 by binding port 0, and
// releases them for the processes to bind. Another program could take one
// in between; the demo then fails at start and says which process failed.
func freePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []string
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

// errExited is returned when a process the demo needs has ended.
var errExited = errors.New("process exited")
