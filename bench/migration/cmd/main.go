// Command bench-migration (make bench-migration) drains one presence server
// under client load, with state migration off and then on, and prints one
// line per run:
//
//	drain migration=off: republished N of M devices (...)
//	drain migration=on: republished 0 of M devices (...)
//
// See package bench/migration for what runs and what is counted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fuge-project/fuge/bench/migration"
)

func main() {
	servers := flag.Int("servers", 5, "presence servers in the pool")
	devices := flag.Int("devices", 2000, "devices published")
	readers := flag.Int("readers", 4, "goroutines reading devices during the drain")
	ringSize := flag.Int("ring-size", 1024, "the namespace's ring size R")
	leaseT := flag.Duration("lease-duration", 4*time.Second, "lease T")
	seed := flag.Uint64("seed", 1, "seed of the devices the load reads")
	verbose := flag.Bool("v", false, "log progress to stderr")
	flag.Parse()
	logf := func(string, ...any) {}
	if *verbose {
		logf = log.New(os.Stderr, "", log.Ltime).Printf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fail := false
	for _, on := range []bool{false, true} {
		res, err := migration.Drain(ctx, migration.Config{
			Servers: *servers, Devices: *devices, Readers: *readers, RingSize: *ringSize, T: *leaseT,
			Migration: on, Seed: *seed, Logf: logf,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-migration: migration=%v: %v\n", on, err)
			fail = true
			continue
		}
		fmt.Println(res.Line())
	}
	if fail {
		os.Exit(1)
	}
}
