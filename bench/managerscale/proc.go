package main

import (
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clockTicks = 100

// statFields returns the fields of /proc/<pid>/stat after the command
// name (which is in parentheses and may hold spaces): the state first.
// It returns nil if the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// cpuTicks is utime + stime of a process, in clock ticks.
func cpuTicks(pid int) int64 {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// rssMB is a process's resident set in MiB (2^20 bytes: /proc reports
// kB of 1,024 bytes). The summary line's "MB" and the goals are read in
// the same unit.
func rssMB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb / 1024
		}
	}
	return 0
}

func numCPU() int { return runtime.NumCPU() }

// managers are the manager processes a run has started and not yet
// stopped, by PID, so that an interrupt can stop them before it removes
// the directory they write in.
var managers = struct {
	sync.Mutex
	procs map[int]*os.Process
}{procs: map[int]*os.Process{}}

func addManager(p *os.Process) {
	managers.Lock()
	defer managers.Unlock()
	managers.procs[p.Pid] = p
}

func removeManager(pid int) {
	managers.Lock()
	defer managers.Unlock()
	delete(managers.procs, pid)
}

// onInterrupt makes SIGINT and SIGTERM kill the managers still running,
// remove dir and exit, until the returned function is called. Without it
// an interrupted run left its data directory behind (tens of MB a run;
// the managers themselves die with the generator, Pdeathsig, but perhaps
// after the directory is removed, writing into it).
func onInterrupt(dir string) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			log.Printf("%v: killing the managers, removing %s", s, dir)
			if left := killManagers(10 * time.Second); len(left) > 0 {
				log.Printf("managers %v still running; %s left in place", left, dir)
				os.Exit(1)
			}
			os.RemoveAll(dir)
			os.Exit(1)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}

// killManagers kills the managers still running and waits until each has
// exited, until timeout at most; it returns those that had not.
func killManagers(timeout time.Duration) []int {
	managers.Lock()
	procs := maps.Clone(managers.procs)
	managers.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	deadline := time.Now().Add(timeout)
	var left []int
	for pid := range procs {
		for !exited(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polls /proc against the deadline
		}
		if !exited(pid) {
			left = append(left, pid)
		}
	}
	slices.Sort(left)
	return left
}

// exited reports whether process pid has ended: it is gone, or a zombie
// its parent has not yet waited for (it writes nothing more).
func exited(pid int) bool {
	f := statFields(pid)
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// rssSampler samples a process's RSS every 100 ms and keeps the peak.
type rssSampler struct {
	mu   sync.Mutex
	peak float64
	done chan struct{}
}

func newRSSSampler(pid int) *rssSampler {
	s := &rssSampler{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				v := rssMB(pid)
				s.mu.Lock()
				s.peak = max(s.peak, v)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// reset returns the peak since the last reset (or the start) and starts
// a new one.
func (s *rssSampler) reset() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peak
	s.peak = 0
	return p
}

func (s *rssSampler) stop() { close(s.done) }

// saveProfiles saves the manager's heap and allocs profiles as
// dir/<phase>.heap and dir/<phase>.allocs (go tool pprof reads them).
func saveProfiles(httpAddr, dir, phase string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Printf("profiles: %v", err)
		return
	}
	for _, kind := range []string{"heap", "allocs"} {
		resp, err := http.Get("http://" + httpAddr + "/debug/pprof/" + kind)
		if err != nil {
			log.Printf("profiles: %v", err)
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, phase+"."+kind), b, 0o644)
		}
		if err != nil {
			log.Printf("profiles: %v", err)
		}
	}
}

// cpuProfiles starts CPU profiles of this process (the clients) and of
// every manager node, and returns the function that stops them, saving
// dir/<phase>.clients.cpu and dir/<phase>.<node>.manager.cpu. The
// managers' profiles run for at most 30 s.
func cpuProfiles(nodes []*managerNode, dir, phase string) (stop func()) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Printf("profiles: %v", err)
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, phase+".clients.cpu"))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		log.Printf("profiles: %v", err)
		return func() {}
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			resp, err := http.Get("http://" + n.http + "/debug/pprof/profile?seconds=30")
			if err != nil {
				log.Printf("profiles: %v", err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, phase+"."+n.id+".manager.cpu"), b, 0o644)
			}
			if err != nil {
				log.Printf("profiles: %v", err)
			}
		})
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		wg.Wait()
	}
}
