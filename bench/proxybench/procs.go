package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	hp "github.com/fuge-project/fuge/internal/procs"
)

// The CPUs of the layout: every proxy on proxyCPU, everything else (the
// client, the backends, the manager, this harness) on clientCPU.
const (
	proxyCPU  = 0
	clientCPU = 1
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat and /proc/stat times.
const clockTicks = 100

// proc is one process the harness started.
type proc = hp.Proc

// procs starts processes, pinned, with their output in log files, and
// stops each of them by PID (internal/procs does the starting and
// stopping).
type procs struct {
	logs   string // directory of the log files
	pinned bool   // taskset is there and the machine has two CPUs

	once sync.Once
	g    *hp.Group
	mu   sync.Mutex
	n    map[string]int
}

func (ps *procs) group() *hp.Group {
	ps.once.Do(func() { ps.g = &hp.Group{Dir: ps.logs} })
	return ps.g
}

// start runs bin with args on cpu (-1: unpinned), with env added to the
// harness's environment, logging to logs/name-N.log.
func (ps *procs) start(name string, cpu int, env []string, bin string, args ...string) (*proc, error) {
	ps.mu.Lock()
	if ps.n == nil {
		ps.n = map[string]int{}
	}
	ps.n[name]++
	label := fmt.Sprintf("%s-%d", name, ps.n[name])
	ps.mu.Unlock()
	if ps.pinned && cpu >= 0 {
		args = append([]string{"-c", strconv.Itoa(cpu), bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return ps.group().StartCmd(label, cmd)
}

// kill sends SIGKILL to p and waits until it is reaped.
func (ps *procs) kill(p *proc) {
	if p != nil {
		p.Kill()
	}
}

// stop sends SIGTERM to p and waits up to d, then kills it.
func (ps *procs) stop(p *proc, d time.Duration) {
	if p != nil {
		p.Stop(d)
	}
}

// stopAll stops every process still running.
func (ps *procs) stopAll() { ps.group().StopAll(3 * time.Second) }

// live lists the PIDs of the processes still running.
func (ps *procs) live() []int {
	var out []int
	for _, p := range ps.group().Procs() {
		if !p.Exited() {
			out = append(out, p.Pid())
		}
	}
	return out
}

// statFields returns the fields of /proc/<pid>/stat after the command name.
func statFields(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+2:])
}

// cpuTicks is a process's utime + stime + cutime + cstime: its own CPU and
// that of its children once reaped, in clock ticks. A process that is gone
// counts 0.
func cpuTicks(pid int) int64 {
	f := statFields(strconv.Itoa(pid))
	if len(f) < 15 {
		return 0
	}
	var sum int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		v, _ := strconv.ParseInt(f[i], 10, 64)
		sum += v
	}
	return sum
}

// selfTicks is this harness's cpuTicks: its own threads (Owner sessions,
// the Go load generators) and its reaped children (each wrk run).
func selfTicks() int64 { return cpuTicks(os.Getpid()) }

// busyTicks is the machine's busy time from /proc/stat's cpu line (all
// but idle and iowait), in clock ticks summed over CPUs.
func busyTicks() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var sum int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 7 { // idle, iowait, steal (not a process); guest time is already in user
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	return sum
}

// cpuTimes is one CPU's line of /proc/stat: busy (all but idle, iowait
// and steal), steal and the total, in clock ticks; zero if absent.
type cpuTimes struct{ busy, steal, total int64 }

func cpuTimesOf(cpu int) cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	name := "cpu" + strconv.Itoa(cpu)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != name {
			continue
		}
		var t cpuTimes
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			if i >= 8 { // guest, guest_nice: already in user and nice
				break
			}
			t.total += n
			switch i {
			case 3, 4: // idle, iowait
			case 7:
				t.steal += n
			default:
				t.busy += n
			}
		}
		return t
	}
	return cpuTimes{}
}

// cpuShares is how one CPU spent a window: busy and stolen (by the
// hypervisor), as shares of the window, and its busy ticks.
type cpuShares struct {
	Busy, Steal float64
	BusyTicks   int64
}

// since is the CPU's times from t0 to t.
func (t cpuTimes) since(t0 cpuTimes) cpuTimes {
	return cpuTimes{t.busy - t0.busy, t.steal - t0.steal, t.total - t0.total}
}

func (t cpuTimes) plus(u cpuTimes) cpuTimes {
	return cpuTimes{t.busy + u.busy, t.steal + u.steal, t.total + u.total}
}

// shares is how a window of times t was spent.
func (t cpuTimes) shares() cpuShares {
	if t.total <= 0 {
		return cpuShares{}
	}
	return cpuShares{Busy: float64(t.busy) / float64(t.total), Steal: float64(t.steal) / float64(t.total), BusyTicks: t.busy}
}

// cpuMeter measures, over a window, the CPU that processes other than the
// harness and its children used: the machine's busy time less ours.
type cpuMeter struct {
	ps          *procs
	t0          time.Time
	busy0, our0 int64
	pids        []int
	ticks0      map[int]int64
}

func (ps *procs) meter() *cpuMeter {
	m := &cpuMeter{ps: ps, t0: time.Now(), pids: ps.live(), ticks0: map[int]int64{}}
	for _, pid := range m.pids {
		m.ticks0[pid] = cpuTicks(pid)
	}
	m.our0 = selfTicks()
	m.busy0 = busyTicks()
	return m
}

// others is the CPU the rest of the machine used since the meter started,
// as a fraction of one core.
func (m *cpuMeter) others() float64 {
	busy := busyTicks() - m.busy0
	our := selfTicks() - m.our0
	for _, pid := range m.pids {
		if t := cpuTicks(pid); t > 0 {
			our += t - m.ticks0[pid]
		}
	}
	secs := time.Since(m.t0).Seconds()
	if secs <= 0 {
		return 0
	}
	return max(0, float64(busy-our)/clockTicks/secs)
}

// quietThreshold is the share of a core other processes may use before a
// run starts.
const quietThreshold = 0.10

// waitQuiet samples the CPU used by other processes in 500 ms windows
// until one is under quietThreshold or the next would end after maxWait
// (at least one sample), and returns the
// last sample and whether it was quiet.
func (ps *procs) waitQuiet(maxWait time.Duration) (float64, bool) {
	deadline := time.Now().Add(maxWait)
	for {
		m := ps.meter()
		time.Sleep(500 * time.Millisecond)
		o := m.others()
		if o < quietThreshold {
			return o, true
		}
		if time.Now().Add(500 * time.Millisecond).After(deadline) {
			return o, false
		}
	}
}

// cpusOnline is the content of /sys/devices/system/cpu/online, e.g. "0-1".
func cpusOnline() string {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return "0"
	}
	return strings.TrimSpace(string(b))
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitTCP waits until addr accepts connections.
func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not accept connections after %v: %w", addr, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHTTP waits until a GET of url through c answers 2xx.
func waitHTTP(c *http.Client, url string, hdr map[string]string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GET %s: not 2xx after %v: %w", url, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
