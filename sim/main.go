// Command sim is Fuge's deterministic protocol simulator: one manager lease
// core, N Owner cores and M Lookup cores, driven by one seeded scheduler over
// a simulated network with delay, loss, duplication and reordering, per-node
// clocks with their own rates, and owner crashes, clean leaves (Owner.Close),
// restarts, pauses, joins, leaves and drains. At every event it checks the
// single-copy guarantee (I1), generation monotonicity, and the
// recovery-notification bound (I4); once faults stop it checks liveness. It
// is a main package so that nothing can import it.
//
//	go run ./sim -seeds 2000        # seeds 1..2000
//	go run ./sim -seed 17 -v        # replay one seed with its event log
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
)

func main() {
	seeds := flag.Int("seeds", 200, "number of seeds to run")
	first := flag.Uint64("first", 1, "first seed")
	seed := flag.Uint64("seed", 0, "replay this one seed (overrides -seeds and -first)")
	verbose := flag.Bool("v", false, "print the event log (with -seed)")
	jobs := flag.Int("j", runtime.GOMAXPROCS(0), "seeds run in parallel")
	flag.Parse()
	if *seed != 0 {
		*first, *seeds = *seed, 1
	}
	var log io.Writer
	if *verbose && *seeds == 1 {
		log = os.Stdout
	}
	start := time.Now()
	sum := runSeeds(*first, *seeds, *jobs, log)
	for _, r := range sum.failed {
		fmt.Printf("FAIL seed=%d violations=%d first: %s\n  replay: make sim SEED=%d\n", r.Seed, len(r.Violations), r.Violations[0], r.Seed)
	}
	fmt.Printf("elapsed %v on %d workers\n", time.Since(start).Round(time.Millisecond), *jobs)
	fmt.Printf("balancing: %d virtual nodes moved in %d moving rounds, in %d of the seeds\n", sum.vnodesMoved, sum.movingRounds, sum.balanced)
	fmt.Printf("clean leaves accepted: %d, of which %d raced a message to the owner\n", sum.leaves, sum.racingLeaves)
	fmt.Printf("seeds=%d events=%d violations=%d\n", *seeds, sum.events, sum.violations)
	if sum.violations > 0 {
		os.Exit(1)
	}
}

type summary struct {
	events, violations        uint64
	vnodesMoved, movingRounds uint64
	leaves, racingLeaves      uint64
	balanced                  int // seeds in which the policy moved a virtual node
	failed                    []Result
}

// runSeeds runs seeds [first, first+n) on jobs workers; results are gathered
// in seed order so the output does not depend on scheduling.
func runSeeds(first uint64, n, jobs int, log io.Writer) summary {
	results := make([]Result, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range max(jobs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = run(paramsFor(first+uint64(i)), log)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	var s summary
	for _, r := range results {
		s.events += r.Events
		s.vnodesMoved += r.VNodesMoved
		s.leaves += r.Leaves
		s.racingLeaves += r.RacingLeaves
		s.movingRounds += r.MovingRounds
		if r.VNodesMoved > 0 {
			s.balanced++
		}
		s.violations += uint64(len(r.Violations))
		if len(r.Violations) > 0 {
			s.failed = append(s.failed, r)
		}
	}
	return s
}
