// Package bench holds Fuge's harnesses, each a main package under it:
//
//   - chaos: the fault harness (make chaos), real processes on 127.0.0.1
//     with faults injected from outside and checkers over the history;
//   - managerscale: one manager under PRS's load (make bench-manager);
//   - ratelimit: fleet-wide rate limits on real fuge-proxies and a
//     3-node manager cluster, with faults (make bench-ratelimit);
//   - proxybench: fuge-proxy beside HAProxy, nginx and round-robin
//     balancers, throughput, latency and inconsistency (make bench).
//
// Nothing imports it.
package bench
