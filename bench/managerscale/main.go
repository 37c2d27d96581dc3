// Command managerscale measures fuge-manager processes under the PRS §7.1
// load: 500 owners and 2,000 lookups as real gRPC clients on 127.0.0.1,
// first in steady state, then while single changes (an owner's clean leave
// and its return) are timed until every lookup has seen them, then with
// every node restarting at random so that some node restarts every 12 s
// on average. It reports each manager's CPU (% of one core, from /proc),
// its peak RSS and the bytes per second on its client connections, the
// time until every owner holds its arcs and every lookup has the whole
// table, and how long a change takes to reach every lookup, as a table.
//
//	go run ./bench/managerscale                      # the PRS configuration
//	go run ./bench/managerscale -owners 50 -lookups 200 -steady 20s -churn 20s
//	go run ./bench/managerscale -nodes 3             # a leader and two standbys
//	go run ./bench/managerscale -ring 4096,65536     # one run per ring size (commas or spaces)
//
// With -nodes N, N manager processes form one raft cluster; owners and
// lookups are given every node's address (owners follow the leader,
// lookups start at a node at random and are served by standbys too), and
// the table has a row per node. Lookups share TCP connections
// (-streams-per-conn, lb.ConnPool), each with a stream of its own;
// -streams-per-conn 1 gives each its own connection, as separate routers
// would have. Of the lookups, -full-lookups (10) are lb.Lookups, which
// decode, hold and check the whole table; the others are light (light.go):
// a real Lookup stream each, acknowledged and resumed as lb.Lookup does,
// keeping only each block's version, so that 20,000 of them at R = 65536
// do not take the generator to tens of GB. Generated owners all connect
// from 127.0.0.1, so the manager is started with --session-burst at the
// owner count (-session-burst; its per-client default, 1,000 then 100 a
// second, would pace 5,000 owners over 40 s). -markdown FILE writes the
// table in markdown. Interrupted (SIGINT, SIGTERM), it kills the managers
// it started and removes their data directory. Each run ends with one line
// a script can read (with several nodes, each figure is the largest
// node's):
//
//	managerscale: owners 500 lookups 2000 nodes 1 ring 4096 memory-limit none: steady cpu 2.4% peak-rss 180MB; churn cpu 5.2% peak-rss 190MB; lookups synced 1.3s
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // -pprof
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

const namespace = "bench"

// ringSize is the namespace's ring size R of the run under way.
var ringSize = 4096

func main() {
	owners := flag.Int("owners", 500, "owners (PRS: 500)")
	lookups := flag.Int("lookups", 2000, "lookups (PRS: 2,000)")
	rings := flag.String("ring", "4096", "ring size R of the namespace (a power of two); a list (commas or spaces) runs once per size")
	nodes := flag.Int("nodes", 1, "manager nodes: one leader, the others standbys; owners and lookups are given every node")
	steady := flag.Duration("steady", 30*time.Second, "steady-state measurement window")
	churn := flag.Duration("churn", 30*time.Second, "churn measurement window")
	every := flag.Duration("restart-every", 12*time.Second, "mean time between node restarts during churn")
	changes := flag.Int("changes", 10, "changes to time until every lookup has seen them, between steady and churn: an owner's clean leave, then its return, in turn")
	leaseT := flag.Duration("lease", 60*time.Second, "lease duration T")
	heartbeat := flag.Duration("heartbeat", 0, "passed to fuge-manager --heartbeat-interval, how often every node heartbeats its lookups (0: the manager's default, T/6); shorter makes a change likelier to meet a standby's heartbeat to all its lookups")
	seed := flag.Uint64("seed", 1, "seed for the restart schedule and the owners changed")
	kind := flag.String("restart-kind", "crash", "how an owner restarts during churn: crash (its process dies: the manager is not told, as in PRS §7.1) or clean (Close: a clean leave, its arcs move to the others and back)")
	memLimit := flag.String("memory-limit", "", "passed to fuge-manager --memory-limit (empty: Go's default)")
	perConn := flag.Int("streams-per-conn", 10, "lookup streams multiplexed onto one TCP connection (lb.ConnPool); 1: a connection per lookup, as separate routers would have")
	burst := flag.Int("session-burst", -1, "passed to fuge-manager --session-burst: every generated owner connects from 127.0.0.1, which the manager's per-client session bucket (1,000 at once, then 100 a second) would pace; -1: the owner count, at least 1,000; 0: the manager's default")
	genMem := flag.Int("generator-memory-mb", 6144, "soft memory limit of this load generator (not of the managers), in MB: its lookups receive every table whole as they connect, 3.7 MB each at R=65536, and without a limit its garbage piles up; 0: Go's default")
	full := flag.Int("full-lookups", 10, "how many of the lookups are lb.Lookups, which decode, hold and check the whole table; the others are light: a real Lookup stream each that acknowledges like one but keeps only each block's version (light.go); -1: all full (a full table per lookup: many GB at R=65536)")
	profDir := flag.String("profiles", "", "start the managers with --pprof and save into this directory the leader's heap and allocs profiles after start-up, steady and churn, and every node's and this generator's CPU profiles of start-up and of the changes")
	selfPprof := flag.String("pprof", "", "serve this load generator's own net/http/pprof on this 127.0.0.1 address (e.g. 127.0.0.1:6060)")
	startConc := flag.Int("start-concurrency", 0, "lookups that may be receiving their first table at once while they start (a new one starts as one holds the whole table); 0: all start at once. gRPC buffers each stream's whole message whatever the window, so 20,000 lookups starting at once on this machine held 6-14 GB of unread tables in this generator, which then spent its CPU collecting garbage and its keepalive pings timed out (make bench-manager SCALE=10 passes 2000, PRS's count)")
	markdown := flag.String("markdown", "", "also write the table, in markdown, to this file")
	flag.Parse()
	log.SetFlags(log.Ltime)
	if *genMem > 0 {
		// Set in-process, not through GOMEMLIMIT, which the managers
		// would inherit.
		debug.SetMemoryLimit(int64(*genMem) << 20)
	}
	if *selfPprof != "" {
		host, _, err := net.SplitHostPort(*selfPprof)
		if err != nil || host != "127.0.0.1" {
			log.Fatalf("-pprof %q: want 127.0.0.1:PORT", *selfPprof)
		}
		ln, err := net.Listen("tcp", *selfPprof)
		if err != nil {
			log.Fatalf("-pprof: %v", err)
		}
		go http.Serve(ln, nil) //nolint:errcheck // serves until the process ends
	}
	if *startConc < 0 {
		log.Fatalf("-start-concurrency %d: want 0 or more", *startConc)
	}
	if *kind != "crash" && *kind != "clean" {
		log.Fatalf("-restart-kind %q: want crash or clean", *kind)
	}
	if *perConn < 1 {
		log.Fatalf("-streams-per-conn %d: want at least 1", *perConn)
	}
	if *heartbeat < 0 || (*heartbeat > 0 && *heartbeat >= *leaseT) {
		log.Fatalf("-heartbeat %v: want 0 or under -lease %v", *heartbeat, *leaseT)
	}
	if *burst < -1 {
		log.Fatalf("-session-burst %d: want -1 or more", *burst)
	}
	if *burst == -1 {
		*burst = max(*owners, 1000)
	}
	if *full < -1 {
		log.Fatalf("-full-lookups %d: want -1 or more", *full)
	}
	if *changes < 0 {
		log.Fatalf("-changes %d: want 0 or more", *changes)
	}
	var rs []int
	for _, f := range strings.FieldsFunc(*rings, func(c rune) bool { return c == ',' || c == ' ' }) {
		r, err := strconv.Atoi(f)
		if err != nil || r < 1 || r&(r-1) != 0 {
			log.Fatalf("-ring %q: want powers of two", *rings)
		}
		if r < *owners {
			// Σ V_h = R and every owner needs V_h ≥ 1: the manager admits
			// at most R sessions to a namespace (ErrNamespaceFull).
			log.Fatalf("-ring %d: %d owners need a ring of at least as many entries (the manager admits at most R owners to a namespace)", r, *owners)
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		log.Fatalf("-ring %q: want at least one ring size", *rings)
	}
	cfg := config{owners: *owners, lookups: *lookups, nodes: *nodes, steady: *steady, churn: *churn, every: *every,
		changes: *changes, lease: *leaseT, heartbeat: *heartbeat, seed: *seed, memLimit: *memLimit, kind: *kind, profDir: *profDir, perConn: *perConn, full: *full, burst: *burst, startConc: *startConc}
	if err := runAll(cfg, rs, *markdown); err != nil {
		log.Fatal(err)
	}
}

// managerNode is one fuge-manager process.
type managerNode struct {
	id             string
	pid            int
	grpc, http     string
	cmd            *exec.Cmd
	rss            *rssSampler // peak RSS since start-up, or since the last reset
	startRSS, peak float64
	in, out        atomic.Int64 // bytes on its client connections: received, sent
}

// startManager starts node id, joining the cluster at join (an admin
// address) unless join is empty.
func startManager(bin, dir, id, join string, cfg config) (*managerNode, error) {
	n := &managerNode{id: id, grpc: freePort(), http: freePort()}
	args := []string{"--data-dir", filepath.Join(dir, "data-"+id), "--node-id", id,
		"--raft-addr", freePort(), "--grpc-addr", n.grpc, "--http-addr", n.http,
		"--lease-duration", cfg.lease.String(), "--namespace", fmt.Sprintf("%s:%d", namespace, ringSize), "--log-level", "warn",
		// The figures are PRS's plaintext protocol cost; 2,500 clients with
		// certificates of their own (and their handshakes) are not measured
		// here yet.
		"--insecure"}
	if join != "" {
		args = append(args, "--join", join)
	}
	if cfg.heartbeat > 0 {
		args = append(args, "--heartbeat-interval", cfg.heartbeat.String())
	}
	if cfg.memLimit != "" {
		args = append(args, "--memory-limit", cfg.memLimit)
	}
	if cfg.burst > 0 {
		args = append(args, "--session-burst", strconv.Itoa(cfg.burst))
	}
	if cfg.profDir != "" {
		args = append(args, "--pprof")
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = os.Stderr, os.Stderr
	// A manager never outlives this generator: killed or crashed, it
	// would leave three managers running, and the next run would measure
	// their CPU as noise.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	n.pid = n.cmd.Process.Pid
	addManager(n.cmd.Process)
	// RSS is sampled from the start, so that the steady phase's peak
	// covers start-up too: the goal is the peak under the whole load.
	n.rss = newRSSSampler(n.pid)
	return n, nil
}

func (n *managerNode) stop() {
	n.rss.stop()
	n.cmd.Process.Signal(os.Interrupt)
	n.cmd.Wait()
	removeManager(n.pid)
}

// config is the command line.
type config struct {
	owners, lookups, nodes  int
	steady, churn, every    time.Duration
	changes                 int
	lease                   time.Duration
	heartbeat               time.Duration // fuge-manager --heartbeat-interval; 0: its default
	seed                    uint64
	memLimit, kind, profDir string
	perConn                 int // lookup streams per connection
	full                    int // lookups that are lb.Lookups; -1: all
	burst                   int // fuge-manager --session-burst; 0: its default
	startConc               int // lookups receiving their first table at once; 0: all
}

// result is one run's figures.
type result struct {
	ring                int
	rows                []row // steady, then churn, a row per node
	ownersUp, lookupsUp time.Duration
	conv                convergence
	line                string // the line a script reads
}

// runAll builds fuge-manager, runs once per ring size, and prints the
// table (and writes it to markdown, when named), then each run's line.
func runAll(cfg config, rings []int, markdown string) error {
	dir, err := os.MkdirTemp("", "managerscale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer onInterrupt(dir)()
	bin := filepath.Join(dir, "fuge-manager")
	log.Printf("building fuge-manager")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/fuge-manager").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	var results []result
	for i, r := range rings {
		ringSize = r
		res, err := run(cfg, bin, filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return fmt.Errorf("ring %d: %w", r, err)
		}
		results = append(results, res)
	}
	printTable(cfg, results)
	if markdown != "" {
		if err := os.WriteFile(markdown, []byte(markdownTable(cfg, results)), 0o644); err != nil {
			return err
		}
	}
	fmt.Println()
	for _, res := range results {
		fmt.Println(res.line)
	}
	return nil
}

func run(cfg config, bin, dir string) (result, error) {
	res := result{ring: ringSize}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	nOwners, nLookups, nNodes := cfg.owners, cfg.lookups, cfg.nodes
	steady, churn, every, leaseT := cfg.steady, cfg.churn, cfg.every, cfg.lease
	seed, memLimit, kind, profDir := cfg.seed, cfg.memLimit, cfg.kind, cfg.profDir
	var nodes []*managerNode
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for i := range nNodes {
		join := ""
		if i > 0 {
			join = nodes[0].http
		}
		n, err := startManager(bin, dir, fmt.Sprintf("m%d", i+1), join, cfg)
		if err != nil {
			return res, err
		}
		nodes = append(nodes, n)
		// A standby answers the admin API once it knows the leader (it
		// redirects there).
		if err := waitHTTP("http://"+n.http+"/v1/namespaces/"+namespace+"/leases", time.Minute); err != nil {
			return res, err
		}
		log.Printf("ring %d: manager %s pid %d up on %s", ringSize, n.id, n.pid, n.grpc)
	}
	httpAddr := nodes[0].http // the leader's, which the admin API redirects to anyway
	profile := func(phase string) {
		if profDir != "" {
			saveProfiles(httpAddr, profDir, fmt.Sprintf("R%d.%s", ringSize, phase))
		}
	}
	var managers []string
	byAddr := map[string]*managerNode{}
	for _, n := range nodes {
		managers = append(managers, n.grpc)
		byAddr[n.grpc] = n
	}

	// Every client connection counts its bytes for the node it is to.
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		n := byAddr[addr]
		if n == nil {
			return c, nil
		}
		return &countingConn{Conn: c, in: &n.out, out: &n.in}, nil
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer)}
	p := &pool{managers: managers, dial: dial, lease: leaseT, cleanRestarts: kind == "clean"}
	if cfg.perConn > 1 {
		// Lookups share connections; each keeps a stream of its own.
		var err error
		if p.conns, err = lb.NewConnPool(cfg.perConn, grpc.WithContextDialer(dialer)); err != nil {
			return res, err
		}
		defer p.conns.Close()
	}
	defer p.close()
	ctx := context.Background()
	// Owners first, then lookups: a pool is brought up before front ends
	// are pointed at it, and the steady state does not depend on the order.
	t0 := time.Now()
	log.Printf("starting %d owners", nOwners)
	for i := range nOwners {
		p.owners = append(p.owners, p.newOwner(ctx, fmt.Sprintf("owner-%04d", i)))
	}
	if err := p.waitReady(10 * time.Minute); err != nil {
		return res, err
	}
	if err := waitConverged(httpAddr, nOwners, 10*time.Minute); err != nil {
		return res, err
	}
	res.ownersUp = time.Since(t0)
	t0 = time.Now()
	log.Printf("owners converged in %v; starting %d lookups", res.ownersUp.Round(time.Millisecond), nLookups)
	mgrCPU0, selfCPU0 := cpuOf(nodes), cpuTicks(os.Getpid())
	stopCPU := func() {}
	if profDir != "" {
		stopCPU = cpuProfiles(nodes, profDir, fmt.Sprintf("R%d.startup", ringSize))
	}
	nFull := nLookups
	if cfg.full >= 0 {
		nFull = min(cfg.full, nLookups)
	}
	// With -start-concurrency, a lookup starts once fewer than that many
	// are still waiting for their first whole table. Each lookup's time
	// to its first whole table counts from its own start.
	slots := make(chan struct{}, max(cfg.startConc, 1))
	startBy := time.After(10 * time.Minute)
	readyIn := make([]time.Duration, nLookups)
	var readyWG sync.WaitGroup
	for i := range nLookups {
		name := fmt.Sprintf("lookup-%05d", i)
		if cfg.startConc > 0 {
			select {
			case slots <- struct{}{}:
			case <-startBy:
				return res, fmt.Errorf("%d of %d lookups started after 10m0s: the others did not sync", i, nLookups)
			}
		}
		var ready <-chan struct{}
		startI := time.Now()
		if i < nFull {
			l := p.newLookup(ctx, name)
			p.lookups, ready = append(p.lookups, l), l.Ready()
		} else {
			l := p.newLight(name)
			p.light, ready = append(p.light, l), l.Ready()
		}
		readyWG.Add(1)
		go func() {
			defer readyWG.Done()
			select {
			case <-ready:
				readyIn[i] = time.Since(startI)
			case <-ctx.Done():
			}
			if cfg.startConc > 0 {
				<-slots
			}
		}()
	}
	started := time.Since(t0)
	readyAt := func() []time.Duration {
		readyWG.Wait()
		slices.Sort(readyIn)
		return readyIn
	}
	if err := p.waitReady(10 * time.Minute); err != nil {
		return res, err
	}
	if err := p.waitLookups(httpAddr, 10*time.Minute); err != nil {
		return res, err
	}
	res.lookupsUp = time.Since(t0)
	rt := readyAt()
	// CPU time is what start-up costs whatever else the machine runs: on
	// a busy machine the wall time is mostly waiting for a core.
	syncCPU := fmt.Sprintf("CPU used meanwhile: managers %.2f s, clients %.2f s",
		float64(cpuOf(nodes)-mgrCPU0)/clockTicks, float64(cpuTicks(os.Getpid())-selfCPU0)/clockTicks)
	stopCPU()
	var spread []string
	for _, n := range nodes {
		n.startRSS = rssMB(n.pid)
		body, _ := get("http://" + n.http + "/metrics")
		spread = append(spread, fmt.Sprintf("%s %.0f lookups, RSS %.0f MB", n.id, metric(body, "fuge_lookups_connected"), n.startRSS))
	}
	profile("startup")
	log.Printf("lookups synced in %v (started in %v; a lookup's first whole table after its start: first %v, median %v, p99 %v, last %v; %s; %s; %s)",
		res.lookupsUp.Round(time.Millisecond), started.Round(time.Millisecond), rt[0].Round(time.Millisecond), rt[len(rt)/2].Round(time.Millisecond),
		rt[len(rt)*99/100].Round(time.Millisecond), rt[len(rt)-1].Round(time.Millisecond), syncCPU, p.counters(), strings.Join(spread, "; "))
	log.Printf("measuring steady state for %v", steady)
	config := fmt.Sprintf("%d owners + %d lookups, R=%d", nOwners, nLookups, ringSize)
	c0 := p.counters()
	steadyRows := measure(config, "steady", nodes, steady, nil)
	note := p.counters().sub(c0).String()
	for i, n := range nodes {
		steadyRows[i].rssMB = max(steadyRows[i].rssMB, n.rss.reset())
		steadyRows[i].note = note
	}
	logRows(steadyRows)
	profile("steady")
	rnd := rand.New(rand.NewPCG(seed, 0))
	if cfg.changes > 0 {
		log.Printf("timing %d changes until every lookup has seen each", cfg.changes)
		stopCPU := func() {}
		if profDir != "" {
			stopCPU = cpuProfiles(nodes, profDir, fmt.Sprintf("R%d.changes", ringSize))
		}
		mgr0, gen0 := cpuOf(nodes), cpuTicks(os.Getpid())
		var err error
		res.conv, err = p.timeChanges(ctx, httpAddr, cfg.changes, rnd, 5*time.Minute)
		perChange := func(ticks int64) time.Duration {
			return time.Duration(float64(ticks) / clockTicks / float64(cfg.changes) * float64(time.Second))
		}
		res.conv.mgrCPU, res.conv.genCPU = perChange(cpuOf(nodes)-mgr0), perChange(cpuTicks(os.Getpid())-gen0)
		stopCPU()
		if err != nil {
			return res, err
		}
		log.Printf("convergence: %v", res.conv)
		// The changes' own peaks count with the churn's.
	}
	c0 = p.counters()
	log.Printf("measuring churn (a restart every %v on average) for %v", every, churn)
	restarts := 0
	churnRows := measure(config, fmt.Sprintf("churn, %s restart every %v", kind, every), nodes, churn,
		func(stop <-chan struct{}) {
			for {
				wait := time.Duration(rnd.ExpFloat64() * float64(every))
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
				p.restartOne(ctx, rnd)
				restarts++
			}
		})
	note = fmt.Sprintf("%d restarts; %s", restarts, p.counters().sub(c0))
	for i, n := range nodes {
		churnRows[i].rssMB = max(churnRows[i].rssMB, n.rss.reset())
		churnRows[i].note = note
	}
	logRows(churnRows)
	profile("churn")
	res.rows = append(steadyRows, churnRows...)
	if memLimit == "" {
		memLimit = "none"
	}
	// One line a script can read; with several nodes, each figure is the
	// largest node's.
	worst := func(rs []row) (cpu, rss float64) {
		for _, r := range rs {
			cpu, rss = max(cpu, r.cpu), max(rss, r.rssMB)
		}
		return cpu, rss
	}
	sc, sr := worst(steadyRows)
	cc, cr := worst(churnRows)
	res.line = fmt.Sprintf("managerscale: owners %d lookups %d nodes %d ring %d memory-limit %s: steady cpu %.1f%% peak-rss %.0fMB; churn cpu %.1f%% peak-rss %.0fMB; lookups synced %.1fs",
		nOwners, nLookups, nNodes, ringSize, memLimit, sc, sr, cc, cr, res.lookupsUp.Seconds())
	log.Print(res.line)
	return res, nil
}

// logRows logs a phase's rows as soon as they are measured: a run cut
// short keeps them.
func logRows(rows []row) {
	for _, r := range rows {
		log.Printf("%s, %s, %s: CPU %.2f%% of a core, peak RSS %.1f MB, bytes/s in %.0f, out %.0f; %s", r.config, r.phase, r.node, r.cpu, r.rssMB, r.inBps, r.outBps, r.note)
	}
}

// cpuOf is the CPU time of every node, in clock ticks.
func cpuOf(nodes []*managerNode) int64 {
	var t int64
	for _, n := range nodes {
		t += cpuTicks(n.pid)
	}
	return t
}

type row struct {
	config, phase, node string
	cpu                 float64 // % of one core
	rssMB               float64
	inBps, outBps       float64 // on the node's client connections
	note                string
}

// measure samples each node's CPU, RSS and client bytes over a window
// while load (if any) runs: one row per node.
func measure(config, phase string, nodes []*managerNode, window time.Duration, load func(stop <-chan struct{})) []row {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if load != nil {
		wg.Add(1)
		go func() { defer wg.Done(); load(stop) }()
	}
	cpu0 := make([]int64, len(nodes))
	in0, out0 := make([]int64, len(nodes)), make([]int64, len(nodes))
	for i, n := range nodes {
		cpu0[i] = cpuTicks(n.pid)
		in0[i], out0[i] = n.in.Load(), n.out.Load()
	}
	t0 := time.Now()
	peak := make([]float64, len(nodes))
	tick := time.NewTicker(time.Second)
	deadline := time.After(window)
loop:
	for {
		select {
		case <-tick.C:
			for i, n := range nodes {
				peak[i] = max(peak[i], rssMB(n.pid))
			}
		case <-deadline:
			break loop
		}
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	secs := time.Since(t0).Seconds()
	rows := make([]row, len(nodes))
	for i, n := range nodes {
		rows[i] = row{
			config: config, phase: phase, node: n.id,
			cpu:    100 * float64(cpuTicks(n.pid)-cpu0[i]) / clockTicks / secs,
			rssMB:  max(peak[i], rssMB(n.pid)),
			inBps:  float64(n.in.Load()-in0[i]) / secs,
			outBps: float64(n.out.Load()-out0[i]) / secs,
		}
	}
	return rows
}

// pool is the set of simulated nodes.
type pool struct {
	mu       sync.Mutex
	managers []string
	dial     []grpc.DialOption
	conns    *lb.ConnPool // shared by the lookups; nil: a connection each
	lease    time.Duration
	owners   []*ownerguard.Owner
	lookups  []*lb.Lookup               // full lookups
	light    []*lightLookup             // the others
	watch    atomic.Pointer[pointWatch] // the change light lookups time the arrival of (timeChanges), nil for none
	retired  counters                   // counts of clients closed by restarts
	// cleanRestarts restarts owners with Close (a clean leave) instead of
	// Abandon (a crash).
	cleanRestarts bool
}

func (p *pool) newOwner(ctx context.Context, name string) *ownerguard.Owner {
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: p.managers, Namespace: namespace, Name: name, Addr: name + ":80",
		LeaseDuration: p.lease, DialOptions: p.dial,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		log.Fatal(err)
	}
	return o
}

func (p *pool) newLookup(ctx context.Context, name string) *lb.Lookup {
	cfg := lb.LookupConfig{
		Managers: p.managers, Namespace: namespace, Name: name, DialOptions: p.dial,
		OnLoss: func([]ring.Range, bool) {},
	}
	if p.conns != nil {
		cfg.DialOptions, cfg.Conns = nil, p.conns
	}
	l, err := lb.NewLookup(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		log.Fatal(err)
	}
	return l
}

func (p *pool) newLight(name string) *lightLookup {
	return startLight(name, p.managers, p.conns, p.dial, &p.watch)
}

func (p *pool) waitReady(limit time.Duration) error {
	deadline := time.After(limit)
	for i, o := range p.owners {
		select {
		case <-o.Ready():
		case <-deadline:
			return fmt.Errorf("owner %d not ready after %v", i, limit)
		}
	}
	for i, l := range p.readiers() {
		select {
		case <-l.Ready():
		case <-deadline:
			return fmt.Errorf("lookup %d not ready after %v", i, limit)
		}
	}
	return nil
}

// readiers are every lookup, full and light.
func (p *pool) readiers() []interface{ Ready() <-chan struct{} } {
	out := make([]interface{ Ready() <-chan struct{} }, 0, len(p.lookups)+len(p.light))
	for _, l := range p.lookups {
		out = append(out, l)
	}
	for _, l := range p.light {
		out = append(out, l)
	}
	return out
}

// restartOne restarts a random node: an owner comes back as a new
// incarnation under its name, a lookup reconnects from scratch.
func (p *pool) restartOne(ctx context.Context, rnd *rand.Rand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := rnd.IntN(len(p.owners) + len(p.lookups) + len(p.light))
	if k < len(p.owners) {
		st := p.owners[k].Stats()
		p.retired.ownerReconnects += st.Reconnects
		p.retired.ownerResponses += st.Responses
		if p.cleanRestarts {
			p.owners[k].Close()
		} else {
			p.owners[k].Abandon()
		}
		p.owners[k] = p.newOwner(ctx, fmt.Sprintf("owner-%04d", k))
		return
	}
	k -= len(p.owners)
	if k >= len(p.lookups) {
		k -= len(p.lookups)
		l := p.light[k]
		u, h, r := l.stats()
		p.retired.lookupUpdates += u
		p.retired.heartbeats += h
		p.retired.lookupReconnects += r
		l.Close()
		p.light[k] = p.newLight(l.name)
		return
	}
	st := p.lookups[k].Stats()
	p.retired.lookupReconnects += st.Reconnects
	p.retired.lookupUpdates += st.Updates
	p.retired.heartbeats += st.Heartbeats
	p.lookups[k].Close()
	p.lookups[k] = p.newLookup(ctx, fmt.Sprintf("lookup-%04d", k))
}

// waitLookups waits until every lookup's table has as many entries as the
// manager's view, so that the steady window does not count the last
// convergence pushes. Each lookup is checked until it matches, then left
// alone: copying 2,000 tables of 4,096 entries on every poll took the CPU
// the lookups were syncing with.
func (p *pool) waitLookups(httpAddr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	pending := slices.Clone(p.lookups)
	for time.Now().Before(deadline) {
		body, err := get("http://" + httpAddr + "/v1/namespaces/" + namespace + "/view")
		if err == nil {
			want := strings.Count(body, `"generation"`)
			pending = slices.DeleteFunc(pending, func(l *lb.Lookup) bool {
				select {
				case <-l.Ready():
					return l.Len() == want
				default:
					return false
				}
			})
			if len(pending) == 0 && p.lightReady() {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("lookups not converged after %v", limit)
}

// lightReady reports whether every light lookup holds every block.
func (p *pool) lightReady() bool {
	for _, l := range p.light {
		select {
		case <-l.Ready():
		default:
			return false
		}
	}
	return true
}

// counters sums the clients' protocol counters.
type counters struct{ ownerReconnects, ownerResponses, lookupReconnects, lookupUpdates, heartbeats uint64 }

func (p *pool) counters() counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.retired
	for _, o := range p.owners {
		st := o.Stats()
		c.ownerReconnects += st.Reconnects
		c.ownerResponses += st.Responses
	}
	for _, l := range p.lookups {
		st := l.Stats()
		c.lookupReconnects += st.Reconnects
		c.lookupUpdates += st.Updates
		c.heartbeats += st.Heartbeats
	}
	for _, l := range p.light {
		u, h, r := l.stats()
		c.lookupUpdates += u
		c.heartbeats += h
		c.lookupReconnects += r
	}
	return c
}

func (c counters) sub(d counters) counters {
	return counters{c.ownerReconnects - d.ownerReconnects, c.ownerResponses - d.ownerResponses,
		c.lookupReconnects - d.lookupReconnects, c.lookupUpdates - d.lookupUpdates, c.heartbeats - d.heartbeats}
}

func (c counters) String() string {
	return fmt.Sprintf("owner reconnects %d, renewals %d; lookup reconnects %d, table updates %d, heartbeats %d",
		c.ownerReconnects, c.ownerResponses, c.lookupReconnects, c.lookupUpdates, c.heartbeats)
}

// close ends every client. Lookups go first, and owners are abandoned
// rather than closed: 500 clean leaves would each commit and push a table
// change to whatever lookups remain, for a manager about to be stopped.
func (p *pool) close() {
	for _, l := range p.lookups {
		l.Close()
	}
	for _, l := range p.light {
		l.Close()
	}
	for _, o := range p.owners {
		o.Abandon()
	}
}

type countingConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHTTP(url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v", url, limit)
}

// waitConverged polls the admin API until every arc is granted and every
// owner has a session.
func waitConverged(httpAddr string, owners int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		body, err := get("http://" + httpAddr + "/metrics")
		if err == nil && metric(body, `fuge_owners{namespace="`+namespace+`"}`) == float64(owners) &&
			metric(body, `fuge_arcs{namespace="`+namespace+`",state="recalling"}`) == 0 &&
			metric(body, `fuge_arcs{namespace="`+namespace+`",state="free"}`) == 0 && ringHeld(httpAddr) &&
			viewStill(httpAddr, time.Second) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("lease table not converged after %v", limit)
}

// ringHeld reports whether every entry of the desired ring is held by its
// owner. Arcs that must move are recalled as their holders next renew
// (every T/4), so a table with nothing free or recalling may still have
// moves to come: lookups started then would measure the join storm's
// tail, not their own start-up.
func ringHeld(httpAddr string) bool {
	var rg struct {
		Entries []struct {
			Position string `json:"position"`
			Owner    string `json:"owner"`
		} `json:"entries"`
	}
	var view struct {
		Entries []struct {
			End   string `json:"end"`
			Owner string `json:"owner"`
		} `json:"entries"`
	}
	base := "http://" + httpAddr + "/v1/namespaces/" + namespace
	for url, v := range map[string]any{base + "/ring": &rg, base + "/view": &view} {
		body, err := get(url)
		if err != nil || json.Unmarshal([]byte(body), v) != nil {
			return false
		}
	}
	type arc struct {
		end   uint64
		owner string
	}
	arcs := make([]arc, 0, len(view.Entries))
	for _, e := range view.Entries {
		end, err := strconv.ParseUint(e.End, 16, 64)
		if err != nil {
			return false
		}
		arcs = append(arcs, arc{end, e.Owner})
	}
	slices.SortFunc(arcs, func(a, b arc) int { return cmp.Compare(a.end, b.end) })
	if len(arcs) == 0 || len(rg.Entries) == 0 {
		return false
	}
	for _, e := range rg.Entries {
		p, err := strconv.ParseUint(e.Position, 16, 64)
		if err != nil {
			return false
		}
		i, _ := slices.BinarySearchFunc(arcs, p, func(a arc, p uint64) int { return cmp.Compare(a.end, p) })
		if i == len(arcs) {
			i = 0 // past the last end: the arc that wraps
		}
		if arcs[i].owner != e.Owner {
			return false
		}
	}
	return true
}

// viewStill reports whether the lookup view's LSN stays the same for d:
// after the last move, the last grants' confirmations still change it.
func viewStill(httpAddr string, d time.Duration) bool {
	lsn := func() string {
		var v struct {
			LSN uint64 `json:"lsn"`
		}
		body, err := get("http://" + httpAddr + "/v1/namespaces/" + namespace + "/view")
		if err != nil || json.Unmarshal([]byte(body), &v) != nil {
			return "error"
		}
		return strconv.FormatUint(v.LSN, 10)
	}
	a := lsn()
	time.Sleep(d)
	return a != "error" && lsn() == a
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func metric(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}
