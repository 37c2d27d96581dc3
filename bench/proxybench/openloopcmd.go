package main

import (
	"flag"
	"fmt"
	"time"
)

// runOpenLoop is "proxybench openloop [flags] ADDR...": the open-loop
// generator of item 2b against running targets (for example those that
// -hold started), each address in turn, -n times, printing p50, p99 and
// p99.9 per run. For looking into a latency figure by hand; run it under
// taskset on the client CPU as the harness does.
func runOpenLoop(args []string) error {
	fs := flag.NewFlagSet("openloop", flag.ContinueOnError)
	rate := fs.Int("rate", openRate, "requests a second")
	conns := fs.Int("conns", openConns, "connections")
	dur := fs.Duration("d", 4*time.Second, "each run's length")
	n := fs.Int("n", 3, "runs per address, interleaved")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no address given")
	}
	if *rate <= 0 || *conns <= 0 || *dur <= 0 || *n <= 0 {
		return fmt.Errorf("-rate, -conns, -d and -n must be positive")
	}
	for range *n {
		for _, addr := range fs.Args() {
			r := openLoop(addr, *rate, *conns, *dur)
			fmt.Printf("%-21s sent %6d failed %d p50 %6.0f p99 %6.0f p99.9 %6.0f µs\n", addr, r.Sent, r.Failed, r.P50, r.P99, r.P999)
		}
	}
	return nil
}
