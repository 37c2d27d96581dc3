// Command chaos is Fuge's fault harness, run like Jepsen: real processes on
// 127.0.0.1 (three fuge-manager nodes, five presence owners, two fuge-proxy
// instances, clients), faults injected from outside (kill -9, SIGSTOP,
// partitions through relays it controls, restarts under the same name or
// address, clock-rate faults), and checkers over the recorded history:
// exclusivity, fencing, linearizability (porcupine), the notification
// bound and accounting. Every run is seeded; the seed picks the faults,
// their targets and timings, and the clients' calls.
//
//	go run ./bench/chaos -seed 1 -duration 30m        # make chaos DURATION=30m
//	go run ./bench/chaos -scenarios second-incarnation,owner-crash
//
// It prints a report and writes it under bench/results/<date>/. The exit
// code is 1 when a checker found a violation, 2 for a bad command line.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "the run's seed: faults, targets, timings and client calls")
	dur := fs.Duration("duration", 2*time.Minute, "how long faults are injected (random mode)")
	scen := fs.String("scenarios", "random", "comma-separated scenario names run once each in order, or random;\n"+strings.Join(ScenarioNames(), ", "))
	out := fs.String("out", "bench/results", "directory for the report (a dated subdirectory is made)")
	lease := fs.Duration("lease", DefaultLayout().T, "lease T of the pool (the manager holds T·65/60); the proxies' retry budget is 1.25·T")
	unsafe := fs.Bool("unsafe-replace", false, "negative control: run the managers with issue 10's bug planted; the checkers must fire")
	work := fs.String("work", "", "run directory for data, logs and histories (default: a new temporary one, kept on failure)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := RunConfig{Seed: *seed, Duration: *dur, Layout: DefaultLayout()}
	cfg.Layout.UnsafeReplace = *unsafe
	if *lease < 500*time.Millisecond {
		fmt.Fprintln(stderr, "chaos: -lease must be at least 500ms")
		return 2
	}
	cfg.Layout.T = *lease
	if *scen != "random" {
		for _, n := range strings.Split(*scen, ",") {
			if _, ok := lookupScenario(n); !ok {
				fmt.Fprintf(stderr, "chaos: unknown scenario %q (have %s)\n", n, strings.Join(ScenarioNames(), ", "))
				return 2
			}
			cfg.Scenarios = append(cfg.Scenarios, n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := *work
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fuge-chaos-"); err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return 1
		}
	}
	cfg.Dir = dir
	cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
	if err := Build(filepath.Join(dir, "bin")); err != nil {
		fmt.Fprintln(stderr, "chaos: build:", err)
		return 1
	}
	cfg.Bin = filepath.Join(dir, "bin")
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v (run directory %s)\n", err, dir)
		return 1
	}
	text := rep.Markdown()
	fmt.Fprint(stdout, text)
	fmt.Fprintln(stdout, rep.Summary())
	day := filepath.Join(*out, time.Now().Format("2006-01-02"))
	if err := os.MkdirAll(day, 0o755); err == nil {
		name := filepath.Join(day, fmt.Sprintf("chaos-seed%d-%s.md", cfg.Seed, strings.ReplaceAll(rep.Duration.String(), ".", "_")))
		if err := os.WriteFile(name, []byte(text+"\n    "+rep.Summary()+"\n"), 0o644); err == nil {
			fmt.Fprintln(stdout, "report:", name)
		}
	}
	if len(rep.Violations) > 0 {
		fmt.Fprintf(stderr, "chaos: violations; logs and histories kept in %s\n", dir)
		return 1
	}
	if *work == "" {
		os.RemoveAll(dir)
	}
	return 0
}

// Build compiles the three binaries the harness runs into dir.
func Build(dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", dir+"/",
		"./cmd/fuge-manager", "./cmd/fuge-proxy", "./examples/presence/cmd/presence-server")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the fuge module")
	}
	return filepath.Dir(mod), nil
}
