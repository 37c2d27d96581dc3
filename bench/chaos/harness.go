package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// Layout is the pool under test and its scaled timers.
type Layout struct {
	Managers, Owners, Proxies, Clients, Keys int
	T                                        time.Duration // lease; the manager holds T·65/60
	RingSize                                 int
	// Think is each client's pause between calls (bounds the history
	// porcupine must check).
	Think time.Duration
	// UnsafeReplace starts the managers with issue 10's bug planted (the
	// harness's negative control).
	UnsafeReplace bool
}

// DefaultLayout is the issue's: three managers, five presence owners, two
// proxies, with T scaled down to 2 s (the 60:65 hold kept).
func DefaultLayout() Layout {
	return Layout{Managers: 3, Owners: 5, Proxies: 2, Clients: 8, Keys: 64, T: 2 * time.Second, RingSize: 256, Think: 10 * time.Millisecond}
}

// hold is the manager's hold, T·65/60.
func (l Layout) hold() time.Duration { return l.T * 65 / 60 }

// proc is one process the harness started.
type proc struct {
	label string // m1, p3, x2
	inc   int    // incarnation, for owners
	cmd   *exec.Cmd
	done  chan struct{}
	args  []string
	bin   string
	log   *os.File
	pause bool
}

// Harness runs the pool's processes on 127.0.0.1.
type Harness struct {
	L     Layout
	Dir   string // run directory: data, logs, histories
	Bin   string // directory holding fuge-manager, fuge-proxy, presence-server
	Log   *slog.Logger
	links *Links

	mu       sync.Mutex
	procs    map[string]*proc // by label: the current incarnation
	old      []*proc          // replaced incarnations still running
	incs     map[string]int
	managers []*managerPorts
	proxies  []string // listen addresses
	faults   int
	lookup   *lb.Lookup
	hist     History
	keys     []string
	stale    string // an owner a stale router keeps sending to, or ""
	certs    string // the pool's CA and certificates: every port is mutual TLS
	admin    *http.Client

	// beforeManager, if set, runs before each manager's first start: a
	// test takes one of its ports there, as another program could.
	beforeManager func(m *managerPorts)
}

type managerPorts struct {
	name                string
	raft, grpc, http    string // bound
	rRaft, rGRPC, rHTTP *Relay
	dataDir             string
	clockRate           float64
	revivals            int // restarts on new ports at start-up (reviveManagers)
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// id names p for the relays' cuts: a manager by its node id (a cut between
// managers outlives their restarts), any other process by its incarnation,
// so that a cut isolates one process, not every process of a name.
func (p *proc) id() string {
	if p.bin == "fuge-manager" {
		return p.label
	}
	return fmt.Sprintf("%s#%d", p.label, p.inc)
}

// pids lists the harness's live processes for the relays.
func (h *Harness) pids() map[int]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[int]string{}
	for _, p := range h.procs {
		if p.cmd.Process != nil {
			m[p.cmd.Process.Pid] = p.id()
		}
	}
	for _, p := range h.old {
		if p.cmd.Process != nil {
			m[p.cmd.Process.Pid] = p.id()
		}
	}
	return m
}

// start runs bin with args as label, logging to Dir/logs.
func (h *Harness) start(label, bin string, args ...string) (*proc, error) {
	h.mu.Lock()
	h.incs[label]++
	inc := h.incs[label]
	h.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(h.Dir, "logs", fmt.Sprintf("%s-%d.log", label, inc)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(h.Bin, bin), append(args, "--tls-dir", h.certs)...)
	cmd.Stdout, cmd.Stderr = f, f
	if bin == "fuge-manager" && h.L.UnsafeReplace {
		cmd.Env = append(os.Environ(), "FUGE_UNSAFE_REPLACE_INCARNATION=break-single-copy")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{label: label, inc: inc, cmd: cmd, done: make(chan struct{}), args: args, bin: bin, log: f}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	h.mu.Lock()
	if prev := h.procs[label]; prev != nil && !exited(prev) {
		h.old = append(h.old, prev)
	}
	h.procs[label] = p
	h.mu.Unlock()
	return p, nil
}

func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to p (by its PID, which the harness started) and waits.
func (h *Harness) kill(p *proc) {
	if p == nil || exited(p) {
		return
	}
	if p.pause {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and waits up to d, then kills.
func (h *Harness) stop(p *proc, d time.Duration) {
	if p == nil || exited(p) {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		h.kill(p)
	}
}

func (h *Harness) signal(p *proc, sig syscall.Signal) {
	if p != nil && !exited(p) {
		p.pause = sig == syscall.SIGSTOP
		p.cmd.Process.Signal(sig)
	}
}

func (h *Harness) get(label string) *proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.procs[label]
}

// Close stops every process and relay and heals every link.
func (h *Harness) Close() {
	if h.lookup != nil {
		h.lookup.Close()
	}
	h.mu.Lock()
	all := append([]*proc{}, h.old...)
	for _, p := range h.procs {
		all = append(all, p)
	}
	h.mu.Unlock()
	for _, p := range all {
		h.kill(p)
	}
	h.links.HealAll()
	for _, m := range h.managers {
		m.rRaft.Close()
		m.rGRPC.Close()
		m.rHTTP.Close()
	}
}

// Start brings the pool up: managers (m1 bootstraps, the others join), the
// owners, the proxies and the harness's own lookup, and waits until every
// key is routed.
func (h *Harness) Start(ctx context.Context) error {
	h.procs, h.incs = map[string]*proc{}, map[string]int{}
	h.links = newLinks(h.pids)
	for _, d := range []string{"logs", "history", "data"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o755); err != nil {
			return err
		}
	}
	for i := range h.L.Keys {
		h.keys = append(h.keys, "dev-"+strconv.Itoa(i))
	}
	// Every process runs with mutual TLS, as it does by default: the
	// relays pass TLS through, and peers are checked by ID, not address.
	h.certs = filepath.Join(h.Dir, "certs")
	var owners []fugetls.ID
	for i := range h.L.Owners {
		owners = append(owners, fugetls.OwnerID("default", fmt.Sprintf("p%d", i+1)))
	}
	if err := fugetls.InitDir(h.certs, fugetls.InitOptions{Owners: owners, Now: time.Now()}); err != nil {
		return err
	}
	admin, err := fugetls.NewSource(fugetls.DirFiles(h.certs, fugetls.AdminBase))
	if err != nil {
		return err
	}
	h.admin = &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: admin.ClientConfig(fugetls.RoleManager)}}
	for i := range h.L.Managers {
		m := &managerPorts{name: fmt.Sprintf("m%d", i+1), raft: freePort(), grpc: freePort(), http: freePort(), clockRate: 1}
		m.dataDir = filepath.Join(h.Dir, "data", m.name)
		var err error
		if m.rRaft, err = newRelay(m.name, m.raft, h.links); err != nil {
			return err
		}
		if m.rGRPC, err = newRelay(m.name, m.grpc, h.links); err != nil {
			return err
		}
		if m.rHTTP, err = newRelay(m.name, m.http, h.links); err != nil {
			return err
		}
		h.managers = append(h.managers, m)
	}
	for i, m := range h.managers {
		if h.beforeManager != nil {
			h.beforeManager(m)
		}
		if err := h.startManager(m); err != nil {
			return err
		}
		if i == 0 {
			if err := h.waitFor(ctx, "m1 leads", 30*time.Second, func() bool { h.reviveManagers(); return h.leader() == m }); err != nil {
				return h.withLogs(err, "m")
			}
		}
	}
	if err := h.waitFor(ctx, "three voters", 30*time.Second, func() bool { h.reviveManagers(); return h.voters() == h.L.Managers }); err != nil {
		return h.withLogs(err, "m")
	}
	for i := range h.L.Owners {
		if err := h.startOwner(fmt.Sprintf("p%d", i+1), "", 1); err != nil {
			return err
		}
	}
	for i := range h.L.Proxies {
		addr, admin := freePort(), freePort()
		h.proxies = append(h.proxies, addr)
		_, err := h.start(fmt.Sprintf("x%d", i+1), "fuge-proxy", "--listen", addr, "--admin", admin,
			"--managers", h.grpcRelays(), "--namespace", "default",
			"--retry-budget", (h.L.T * 5 / 4).String(), "--upstream-timeout", (2 * h.L.T).String(),
			"--staleness-bound", (2 * h.L.T).String(), "--log-level", "warn")
		if err != nil {
			return err
		}
	}
	if err := h.startLookup(ctx); err != nil {
		return err
	}
	return h.waitFor(ctx, "every key routed by the harness's lookup", 60*time.Second, func() bool {
		for _, k := range h.keys {
			if _, _, _, ok := h.lookup.LookupKey(k); !ok {
				return false
			}
		}
		return true
	})
}

// reviveManagers restarts, on new ports, a manager that exited at start-up
// because a port freePort gave it was taken in between (by any program on
// this machine binding port 0, or by an outgoing connection's ephemeral
// port), as many times as maxRevivals allows. Its relays, whose addresses
// are the ones the cluster knows, follow it to the new ports.
func (h *Harness) reviveManagers() {
	for _, m := range h.managers {
		p := h.get(m.name)
		if p == nil || !exited(p) || m.revivals >= maxRevivals {
			continue
		}
		if b, _ := os.ReadFile(p.log.Name()); !strings.Contains(string(b), "address already in use") {
			continue
		}
		m.revivals++
		m.raft, m.grpc, m.http = freePort(), freePort(), freePort()
		m.rRaft.SetTarget(m.raft)
		m.rGRPC.SetTarget(m.grpc)
		m.rHTTP.SetTarget(m.http)
		h.note("%s could not bind a port it was given; starting it again on new ports (%s)", m.name, m.http)
		if err := h.startManager(m); err != nil {
			h.note("start %s again: %v", m.name, err)
		}
	}
}

// maxRevivals bounds reviveManagers per manager.
const maxRevivals = 3

func (h *Harness) grpcRelays() string {
	var a []string
	for _, m := range h.managers {
		a = append(a, m.rGRPC.Addr())
	}
	return strings.Join(a, ",")
}

func (h *Harness) startManager(m *managerPorts) error {
	args := []string{"--node-id", m.name, "--data-dir", m.dataDir,
		"--raft-addr", m.raft, "--grpc-addr", m.grpc, "--http-addr", m.http,
		"--advertise-raft-addr", m.rRaft.Addr(), "--advertise-grpc-addr", m.rGRPC.Addr(), "--advertise-http-addr", m.rHTTP.Addr(),
		"--lease-duration", h.L.T.String(), "--namespace", "default:" + strconv.Itoa(h.L.RingSize),
		"--raft-timeout", (h.L.T / 4).String(), "--log-level", "warn",
		"--clock-rate", strconv.FormatFloat(m.clockRate, 'f', -1, 64)}
	if m != h.managers[0] {
		args = append(args, "--join", h.managers[0].rHTTP.Addr())
	}
	_, err := h.start(m.name, "fuge-manager", args...)
	return err
}

// startOwner starts an incarnation of name: on addr (empty: a new port),
// with its lease clock at rate.
func (h *Harness) startOwner(name, addr string, rate float64) error {
	if addr == "" {
		addr = freePort()
	}
	h.mu.Lock()
	inc := h.incs[name] + 1
	h.mu.Unlock()
	_, err := h.start(name, "presence-server", "--name", name, "--listen", addr,
		"--managers", h.grpcRelays(), "--namespace", "default", "--lease-duration", h.L.T.String(),
		"--history", filepath.Join(h.Dir, "history", fmt.Sprintf("%s#%d", name, inc)),
		"--clock-rate", strconv.FormatFloat(rate, 'f', -1, 64))
	return err
}

// ownerAddr returns the listen address of an owner's current incarnation.
func (h *Harness) ownerAddr(name string) string {
	p := h.get(name)
	for i, a := range p.args {
		if a == "--listen" {
			return p.args[i+1]
		}
	}
	return ""
}

// startLookup starts the harness's own lookup, which records every table
// and loss notification for the checkers.
func (h *Harness) startLookup(ctx context.Context) error {
	var l *lb.Lookup
	record := func(all bool, ranges []ring.Range) {
		at := clientshell.SystemMonotonic()
		gens := map[string]uint64{}
		for _, k := range h.keys {
			kh := ring.HashString(k)
			in := all
			for _, r := range ranges {
				if r.Contains(kh) {
					in = true
					break
				}
			}
			if in {
				if _, _, g, ok := l.Lookup(kh); ok {
					gens[k] = uint64(g)
				}
			}
		}
		h.mu.Lock()
		h.hist.Losses = append(h.hist.Losses, Loss{At: at, All: all, Gens: gens})
		h.mu.Unlock()
	}
	src, err := fugetls.NewSource(fugetls.DirFiles(h.certs, fugetls.ProxyBase))
	if err != nil {
		return err
	}
	l, err = lb.NewLookup(lb.LookupConfig{
		Managers: strings.Split(h.grpcRelays(), ","), Namespace: "default", Name: "chaos-harness",
		StalenessBound: h.hist.Bound,
		OnLoss:         func(ranges []ring.Range, all bool) { record(all, ranges) },
		DialOptions:    []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig(fugetls.RoleManager)))},
	})
	if err != nil {
		return err
	}
	h.lookup = l
	if err := l.Start(ctx); err != nil {
		return err
	}
	go func() {
		for {
			upd := l.Updated()
			at := clientshell.SystemMonotonic()
			gens := map[string]uint64{}
			for _, k := range h.keys {
				if _, _, g, ok := l.LookupKey(k); ok {
					gens[k] = uint64(g)
				}
			}
			h.mu.Lock()
			h.hist.Tables = append(h.hist.Tables, Table{At: at, Gens: gens})
			h.mu.Unlock()
			select {
			case <-upd:
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

type clusterJSON struct {
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Servers []struct {
		Suffrage string `json:"suffrage"`
	} `json:"servers"`
}

func (h *Harness) cluster(m *managerPorts) (clusterJSON, bool) {
	var c clusterJSON
	resp, err := h.admin.Get("https://" + m.http + "/v1/cluster")
	if err != nil {
		return c, false
	}
	defer resp.Body.Close()
	return c, json.NewDecoder(resp.Body).Decode(&c) == nil
}

// leader returns the manager that says it leads with the highest term, or
// nil.
func (h *Harness) leader() *managerPorts {
	var best *managerPorts
	var term uint64
	for _, m := range h.managers {
		if c, ok := h.cluster(m); ok && c.Role == "leader" && c.Term >= term {
			best, term = m, c.Term
		}
	}
	return best
}

func (h *Harness) voters() int {
	l := h.leader()
	if l == nil {
		return 0
	}
	c, _ := h.cluster(l)
	n := 0
	for _, s := range c.Servers {
		if s.Suffrage == "Voter" {
			n++
		}
	}
	return n
}

// withLogs adds to err the last lines of the logs of the processes whose
// label starts with prefix, so that a start-up that did not converge says
// why even after the test's directory is gone.
func (h *Harness) withLogs(err error, prefix string) error {
	names, _ := filepath.Glob(filepath.Join(h.Dir, "logs", prefix+"*.log"))
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, rerr := os.ReadFile(n)
		if rerr != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-logTail):]
		fmt.Fprintf(&b, "\n--- %s (last %d lines)\n%s", filepath.Base(n), len(lines), strings.Join(lines, "\n"))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// logTail is how many lines of each log withLogs quotes.
const logTail = 20

// waitFor polls cond every 50 ms until it holds, ctx ends or d passes.
func (h *Harness) waitFor(ctx context.Context, what string, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s: not within %v", what, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// readServes parses every owner history file.
func (h *Harness) readServes() ([]Serve, error) {
	files, err := filepath.Glob(filepath.Join(h.Dir, "history", "*"))
	if err != nil {
		return nil, err
	}
	var out []Serve
	for _, f := range files {
		owner := filepath.Base(f)
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 4 {
				continue // a line cut by kill -9
			}
			at, err1 := strconv.ParseInt(fs[0], 10, 64)
			gen, err2 := strconv.ParseUint(fs[2], 10, 64)
			st, err3 := strconv.Atoi(fs[3])
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			out = append(out, Serve{At: at, Owner: owner, Key: fs[1], Gen: gen, Status: st})
		}
		fh.Close()
	}
	return out, nil
}

// runClients issues calls through the proxies until ctx ends.
func (h *Harness) runClients(ctx context.Context, seed uint64) {
	var wg sync.WaitGroup
	for c := range h.L.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
			hc := &http.Client{Timeout: 3 * h.L.T, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			for n := 0; ctx.Err() == nil; n++ {
				key := h.keys[rng.IntN(len(h.keys))]
				op := Op{Client: c, Key: key, Put: rng.IntN(2) == 0}
				proxy := h.proxies[rng.IntN(len(h.proxies))]
				if rng.IntN(100) < DirectShare {
					// A stale router: straight to some owner process,
					// perhaps one that no longer holds the key.
					if a := h.randomOwnerAddr(rng); a != "" {
						proxy, op.Direct = a, true
					}
				}
				if op.Put {
					op.Value = fmt.Sprintf("c%d-%d", c, n)
				}
				h.call(hc, proxy, &op)
				h.mu.Lock()
				h.hist.Ops = append(h.hist.Ops, op)
				h.mu.Unlock()
				sleep(ctx, h.L.Think)
			}
		}()
	}
	wg.Wait()
}

// DirectShare is the percentage of calls sent straight to an owner process
// instead of through a proxy.
const DirectShare = 10

// randomOwnerAddr returns the listen address of a running owner process,
// replaced incarnations included.
func (h *Harness) randomOwnerAddr(rng *rand.Rand) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stale != "" && rng.IntN(2) == 0 {
		return h.stale
	}
	var addrs []string
	add := func(p *proc) {
		if p.bin != "presence-server" || exited(p) {
			return
		}
		for i, a := range p.args {
			if a == "--listen" {
				addrs = append(addrs, p.args[i+1])
			}
		}
	}
	for _, p := range h.procs {
		add(p)
	}
	for _, p := range h.old {
		add(p)
	}
	if len(addrs) == 0 {
		return ""
	}
	sort.Strings(addrs) // map order is random; the seed must decide
	return addrs[rng.IntN(len(addrs))]
}

// call makes one call and classifies how it ended.
func (h *Harness) call(hc *http.Client, proxy string, op *Op) {
	method, body := http.MethodGet, io.Reader(nil)
	if op.Put {
		method, body = http.MethodPut, strings.NewReader(op.Value)
	}
	req, _ := http.NewRequest(method, "http://"+proxy+"/devices/"+op.Key, body)
	req.Header.Set("X-Fuge-Key", op.Key)
	op.Call = clientshell.SystemMonotonic()
	resp, err := hc.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	op.Return = clientshell.SystemMonotonic()
	if err != nil {
		op.Result, op.Why = Unknown, err.Error()
		return
	}
	gen, genErr := strconv.ParseUint(resp.Header.Get("Fuge-Generation"), 10, 64)
	owner := resp.Header.Get("Fuge-Owner")
	fromOwner := genErr == nil && owner != ""
	switch code := resp.StatusCode; {
	case op.Put && code == http.StatusNoContent && fromOwner:
		op.Result, op.Gen, op.Owner = OK, gen, owner
	case !op.Put && code == http.StatusOK && fromOwner:
		op.Result, op.Gen, op.Owner, op.Found, op.Value = OK, gen, owner, true, strings.TrimSpace(string(b))
	case !op.Put && code == http.StatusNotFound && fromOwner:
		op.Result, op.Gen, op.Owner = OK, gen, owner
	case op.Direct && code == http.StatusMisdirectedRequest && owner != "":
		op.Result, op.Why = Failed, "421 from "+owner // refused by the guard: not executed
	case code == http.StatusServiceUnavailable || code == http.StatusBadGateway:
		// The proxy gave up, or the owner lost the lease during the call:
		// a write may or may not have been executed; a read had no effect.
		op.Why = fmt.Sprintf("%d %s", code, strings.TrimSpace(string(b)))
		if op.Put {
			op.Result = Unknown
		} else {
			op.Result = Failed
		}
	default:
		op.Result, op.Why = Invalid, fmt.Sprintf("%d from owner %q (generation %q): %q", code, owner, resp.Header.Get("Fuge-Generation"), b)
	}
}
