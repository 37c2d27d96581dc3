// Command proxybench puts fuge-proxy beside HAProxy, nginx and round-robin
// balancers on one machine, in one run, and writes
// bench/results/<date>/report.md with its tables and PNG plots (make bench;
// scripts/bench.sh installs haproxy, nginx-light and wrk first):
//
//  1. throughput and proxy CPU per request, wrk -t1 -c64 over 10,000 keys,
//     in interleaved pairs (fuge-proxy, haproxy-chash: each target's 6 s
//     as six 1 s runs alternating with the other's) and the other targets
//     once a round, with how busy each CPU was;
//  2. the latency each proxy adds over going direct: wrk -c1, and an
//     open-loop generator at 5,000 requests/s over 64 connections;
//  3. stale reads and split-brain writes of the presence example behind
//     each balancer while its servers restart;
//  4. fuge-proxy while 25% of the ring moves (a drain);
//  5. the manager's scale (go run ./bench/managerscale; not with -quick).
//
// Layout: every proxy runs with one worker pinned to CPU 0; the client
// (wrk, this harness), the backends and the manager share CPU 1. The
// backends are three fasthttp servers (64-byte body) that every target
// reaches; fuge-proxy finds them through real leases: Owner sessions in
// this harness hold their addresses against a real fuge-manager, over
// mutual TLS, while the backends stay plain.
//
//	go run ./bench/proxybench            # the full run, under 20 minutes
//	go run ./bench/proxybench -quick     # one pair of each, under 3 minutes
//	go run ./bench/proxybench -hold      # start everything, print addresses and PIDs, wait
//	go run ./bench/proxybench openloop -n 3 ADDR...  # item 2b against running targets
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is a run's lengths.
type config struct {
	quick                 bool
	rounds                int           // valid pairs wanted
	otherRounds           int           // rounds in which the targets outside the pair are measured too
	warm, run             time.Duration // wrk warm-up and measured run
	slices                int           // the pair's runs are cut into this many alternating wrk runs each (pairSlices)
	latRounds             int           // rounds of latency measurements, each target once per round
	latWarm, latDur       time.Duration // each latency measurement's warm-up, and the measurement
	quietMax              time.Duration // longest wait for a quiet machine before a run
	churnDur              time.Duration // per balancer
	churnEvery, churnDown time.Duration // a restart every, and how long the server stays down
	moveSteady, moveAfter time.Duration
	managerScale          bool
	hold                  bool // start the pool and the targets, print them and wait for a signal
}

func fullConfig() config {
	// make bench must end within 20 minutes from a clean clone, Go's
	// build cache empty: 20m46s at 2 s warm-ups, 20 s of churn per
	// balancer and every target in all 5 rounds (2026-11-28, this 2-core
	// machine). The pair keeps its five rounds; the other targets, whose
	// figures are beside it and in no goal, run in three.
	return config{rounds: 5, otherRounds: 3, warm: time.Second, run: 6 * time.Second, slices: 6, latRounds: 5, latWarm: time.Second, latDur: 2 * time.Second, quietMax: 5 * time.Second,
		churnDur: 15 * time.Second, churnEvery: 3 * time.Second, churnDown: 500 * time.Millisecond,
		moveSteady: 4 * time.Second, moveAfter: 4 * time.Second, managerScale: true}
}

func quickConfig() config {
	return config{quick: true, rounds: 1, otherRounds: 1, warm: time.Second, run: 3 * time.Second, slices: 3, latRounds: 1, latWarm: time.Second, latDur: 2 * time.Second, quietMax: 500 * time.Millisecond,
		churnDur: 6 * time.Second, churnEvery: 2 * time.Second, churnDown: 500 * time.Millisecond,
		moveSteady: 3 * time.Second, moveAfter: 3 * time.Second}
}

// bench is one run's state.
type bench struct {
	cfg      config
	dir, bin string
	certs    string
	ps       *procs
	admin    *http.Client // the managers' admin API, as an admin

	mgr              *proc
	mgrGRPC, mgrHTTP string
	backends         []*backend
}

func main() {
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "backend":
			err = runBackend(os.Args[2:])
		case "presence":
			err = runPresence(os.Args[2:])
		case "openloop":
			err = runOpenLoop(os.Args[2:])
		default:
			os.Exit(run(os.Args[1:]))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxybench:", os.Args[1]+":", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run(nil))
}

const pinnedEnv = "PROXYBENCH_PINNED"

func run(args []string) int {
	fs := flag.NewFlagSet("proxybench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "one pair of each, short runs, no managerscale (under 3 minutes)")
	out := fs.String("out", "bench/results", "directory for the report (a dated subdirectory is made; -quick: <date>/quick)")
	work := fs.String("work", "", "directory for logs, configurations and histories (default: a new temporary one, kept on failure)")
	hold := fs.Bool("hold", false, "start the manager, backends and targets, print their addresses and PIDs, and wait for SIGINT or SIGTERM without measuring (for profiling by hand; writes no report)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log.SetFlags(log.Ltime)
	// The harness is the client: pin it, and so its Go generators, to the
	// client CPU by running it again under taskset.
	pinned := cpusOnline() != "0" && hasCommand("taskset")
	if pinned && os.Getenv(pinnedEnv) == "" {
		self, err := os.Executable()
		if err == nil {
			argv := append([]string{"taskset", "-c", fmt.Sprint(clientCPU), self}, os.Args[1:]...)
			tp, _ := exec.LookPath("taskset")
			err = syscall.Exec(tp, argv, append(os.Environ(), pinnedEnv+"=1"))
		}
		log.Printf("cannot pin the harness (%v); running unpinned", err)
		pinned = false
	}
	cfg := fullConfig()
	if *quick {
		cfg = quickConfig()
	}
	cfg.hold = *hold
	for _, c := range []string{"haproxy", "nginx", "wrk"} {
		if !hasCommand(c) {
			fmt.Fprintf(os.Stderr, "proxybench: %s is not installed (scripts/bench.sh installs it)\n", c)
			return 1
		}
	}
	dir := *work
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fuge-proxybench-"); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench:", err)
			return 1
		}
	}
	started := time.Now()
	rep, err := runAll(cfg, dir, pinned)
	if err != nil {
		fmt.Fprintf(os.Stderr, "proxybench: %v (logs in %s)\n", err, dir)
		return 1
	}
	if cfg.hold {
		if *work == "" {
			os.RemoveAll(dir)
		}
		return 0
	}
	rep.Took = time.Since(started)
	outDir := filepath.Join(*out, time.Now().Format("2006-01-02"))
	if cfg.quick {
		outDir = filepath.Join(outDir, "quick")
	}
	if err := rep.write(outDir); err != nil {
		fmt.Fprintf(os.Stderr, "proxybench: writing the report: %v\n", err)
		return 1
	}
	fmt.Println(rep.Summary)
	fmt.Println("report:", filepath.Join(outDir, "report.md"), "took", rep.Took.Round(time.Second))
	if *work == "" {
		os.RemoveAll(dir)
	}
	return 0
}

func hasCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// build compiles the binaries the harness runs into dir.
func build(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return errors.New("not inside the fuge module")
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/fuge-manager", "./cmd/fuge-proxy", "./examples/presence/cmd/presence-server")
	cmd.Dir = filepath.Dir(mod)
	// Build with every CPU, not just the harness's.
	if hasCommand("taskset") {
		cmd = exec.Command("taskset", append([]string{"-c", cpusOnline()}, cmd.Args...)...)
		cmd.Dir = filepath.Dir(mod)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v: %s", err, out)
	}
	return nil
}

// runAll brings the pool up, runs every item and returns the report.
func runAll(cfg config, dir string, pinned bool) (*report, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &bench{cfg: cfg, dir: dir, bin: filepath.Join(dir, "bin"), certs: filepath.Join(dir, "certs")}
	b.ps = &procs{logs: filepath.Join(dir, "logs"), pinned: pinned}
	defer b.ps.stopAll()
	if err := os.MkdirAll(b.ps.logs, 0o755); err != nil {
		return nil, err
	}
	rep := newReport(cfg, pinned)
	log.Printf("building fuge-manager, fuge-proxy and presence-server into %s", b.bin)
	if err := build(b.bin); err != nil {
		return nil, err
	}
	return rep, b.runItems(ctx, rep)
}
