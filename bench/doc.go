// Package bench holds Fuge's harnesses, each a main package under it:
//
//   - chaos: the fault harness (make chaos), real processes on 127.0.0.1
//     with faults injected from outside and checkers over the history;
//   - managerscale: one manager under PRS's load (make bench-manager);
//   - proxybench: fuge-proxy beside HAProxy, nginx and round-robin
//     balancers, throughput, latency and inconsistency (make bench).
//
// Nothing imports it.
package bench
