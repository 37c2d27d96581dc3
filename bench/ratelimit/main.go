// Command ratelimit measures fleet-wide rate limits on real processes
// (make bench-ratelimit, and a section of make bench's report): a 3-node
// fuge-manager cluster, 5 to 20 fuge-proxy processes with --ratelimit on
// 127.0.0.1, a sink backend in the harness counting what each proxy
// admitted per tenant, and an open-loop load with Zipf demand across
// tenants and across proxies, whose hot proxy moves every 10 s.
//
// Two runs. "faults": steady state with the hot spot moving, then, with the
// hot spot still, a proxy SIGSTOPped and resumed,
// the manager leader killed (failover), and the remaining managers
// SIGSTOPped for 10 s (every proxy loses its registration and falls to its
// panic share) and resumed. "loss20": steady state with 20% of the gossip
// messages dropped at the sender (fuge-proxy --gossip-loss 0.2). It
// reports admitted/limit per tenant over 1 s and 10 s windows, epochs to
// get back within ±5% after each event, the static L/N split computed from
// the same offered load as the baseline, writes report.md and PNG plots,
// and prints one line:
//
//	ratelimit: limiters 10 steady admitted/limit 1.02 loss20 admitted/limit 1.06 reconverge 9 epochs outside-view admitted/share 0.98
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

type config struct {
	proxies, tenants int
	demand, limit    float64 // total requests/s offered; each tenant's L
	epoch, hotEvery  time.Duration
	quick            bool
}

func main() {
	fs := flag.NewFlagSet("ratelimit", flag.ExitOnError)
	var c config
	fs.IntVar(&c.proxies, "proxies", 10, "fuge-proxy processes (5-20)")
	fs.IntVar(&c.tenants, "tenants", 8, "tenants, with Zipf(1.1) demand")
	fs.Float64Var(&c.demand, "demand", 2000, "total requests per second offered")
	fs.Float64Var(&c.limit, "limit", 150, "each tenant's fleet-wide limit L, requests per second")
	fs.DurationVar(&c.epoch, "epoch", 500*time.Millisecond, "the proxies' gossip epoch")
	fs.DurationVar(&c.hotEvery, "hot-every", 10*time.Second, "the hot proxy moves this often")
	fs.BoolVar(&c.quick, "quick", false, "shorter phases")
	out := fs.String("out", "bench/results", "directory for the report: <out>/<date>/ratelimit")
	work := fs.String("work", "", "directory for binaries, data and logs (default: a temporary one, removed)")
	fs.Parse(os.Args[1:])
	if c.proxies < 5 || c.proxies > 20 {
		fmt.Fprintln(os.Stderr, "ratelimit: -proxies must be within [5, 20]")
		os.Exit(2)
	}
	dir := *work
	if dir == "" {
		d, err := os.MkdirTemp("", "fuge-ratelimit-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "ratelimit:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	outDir := filepath.Join(*out, time.Now().Format("2006-01-02"), "ratelimit")
	if err := run(c, dir, outDir); err != nil {
		fmt.Fprintf(os.Stderr, "ratelimit: %v (logs in %s)\n", err, dir)
		if *work == "" {
			os.RemoveAll(dir)
		}
		os.Exit(1)
	}
}

func run(c config, dir, outDir string) error {
	bin, err := build(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	s := time.Second
	if c.quick {
		s = 600 * time.Millisecond
		c.hotEvery = c.hotEvery * 6 / 10
	}
	faults, err := scenario(c, dir, bin, "faults", 0, 75*s, []event{
		{at: 25 * s, name: "SIGSTOP p03", do: func(cl *cluster) error {
			cl.proxies[2].down.Store(true)
			cl.proxies[2].stop(sigStop)
			return nil
		}},
		{at: 33 * s, name: "SIGCONT p03", do: func(cl *cluster) error {
			cl.proxies[2].stop(sigCont)
			cl.proxies[2].down.Store(false)
			return nil
		}},
		{at: 42 * s, name: "leader killed", do: func(cl *cluster) error {
			l := cl.leader()
			if l == nil {
				return fmt.Errorf("no leader to kill")
			}
			l.p.Kill()
			l.dead = true
			return nil
		}},
		{at: 52 * s, name: "managers SIGSTOP", do: func(cl *cluster) error {
			for _, m := range cl.mgrs {
				if !m.dead {
					m.p.Signal(sigStop)
				}
			}
			return nil
		}},
		{at: 62 * s, name: "managers SIGCONT", do: func(cl *cluster) error {
			for _, m := range cl.mgrs {
				if !m.dead {
					m.p.Signal(sigCont)
				}
			}
			return nil
		}},
	}, [2]time.Duration{10 * s, 25 * s})
	if err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	loss, err := scenario(c, dir, bin, "loss20", 0.2, 30*s, nil, [2]time.Duration{10 * s, 30 * s})
	if err != nil {
		return fmt.Errorf("loss20: %w", err)
	}
	rep := report{cfg: c, runs: []*runData{faults, loss}}
	if err := rep.write(outDir); err != nil {
		return err
	}
	fmt.Printf("report: %s\nplots: %s %s\n", filepath.Join(outDir, "report.md"),
		filepath.Join(outDir, "faults.png"), filepath.Join(outDir, "loss20.png"))
	fmt.Println(rep.line())
	return nil
}
