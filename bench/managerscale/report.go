package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// goals are the goals for a row of the phase.
func goals(cfg config, phase string) string {
	tenfold := cfg.owners >= 5000
	switch {
	case tenfold && strings.HasPrefix(phase, "churn"):
		return "< 50% CPU per node, convergence p99 < 1 s"
	case tenfold:
		return "< 10% CPU, < 500 MB per node"
	case strings.HasPrefix(phase, "churn"):
		return "< 25% CPU, < 200 MB"
	default:
		return "< 5% CPU, < 200 MB"
	}
}

func printTable(cfg config, results []result) {
	memLimit := cfg.memLimit
	if memLimit == "" {
		memLimit = "Go's default"
	}
	fmt.Printf("\nmanagerscale: fuge-manager processes, lease T=%v, memory limit %s, %d lookup streams per TCP connection, 127.0.0.1, %d cores\n\n",
		cfg.lease, memLimit, cfg.perConn, numCPU())
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "configuration\tphase\tnode\tmanager CPU (% of a core)\tpeak RSS (MiB)\tbytes/s in\tbytes/s out\tgoal\tnotes")
	for _, res := range results {
		for _, r := range res.rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%.2f\t%.1f\t%.0f\t%.0f\t%s\t%s\n", r.config, r.phase, r.node, r.cpu, r.rssMB, r.inBps, r.outBps, goals(cfg, r.phase), r.note)
		}
	}
	w.Flush()
	fmt.Println()
	for _, res := range results {
		fmt.Printf("R=%d: %d owners held their arcs %v after they started, then %d lookups had the whole table %v after they started%s (goal < 2 s); a change seen by every lookup: %v\n",
			res.ring, cfg.owners, res.ownersUp.Round(time.Millisecond), cfg.lookups, res.lookupsUp.Round(time.Millisecond), paced(cfg), res.conv)
	}
}

// paced says how the lookups were started, when not all at once.
func paced(cfg config) string {
	if cfg.startConc <= 0 || cfg.startConc >= cfg.lookups {
		return ""
	}
	return fmt.Sprintf(", started at most %d at a time (-start-concurrency)", cfg.startConc)
}

// markdownTable is the table for the README: a row per ring size, phase
// and node.
func markdownTable(cfg config, results []result) string {
	var b strings.Builder
	memLimit := cfg.memLimit
	if memLimit == "" {
		memLimit = "Go's default"
	}
	fmt.Fprintf(&b, "%d owners, %d lookups (%d streams per TCP connection%s), %d manager node(s), lease T=%v, memory limit %s, %d cores:\n\n",
		cfg.owners, cfg.lookups, cfg.perConn, paced(cfg), cfg.nodes, cfg.lease, memLimit, numCPU())
	b.WriteString("| R | phase | node | CPU (% of a core) | peak RSS (MiB) | bytes/s out | owners hold | lookups synced | change seen by every lookup (p50 / p99 per lookup, slowest) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range results {
		for i, r := range res.rows {
			up, conv := "", ""
			if i == 0 {
				up = fmt.Sprintf("%.1f s", res.ownersUp.Seconds())
				conv = res.conv.String()
			}
			synced := ""
			if i == 0 {
				synced = fmt.Sprintf("%.1f s", res.lookupsUp.Seconds())
			}
			phase, _, _ := strings.Cut(r.phase, ",")
			fmt.Fprintf(&b, "| %d | %s | %s | %.1f | %.0f | %s | %s | %s | %s |\n", res.ring, phase, r.node, r.cpu, r.rssMB, bytesRate(r.outBps), up, synced, conv)
		}
	}
	return b.String()
}

func bytesRate(bps float64) string {
	switch {
	case bps >= 1e6:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.0f kB/s", bps/1e3)
	default:
		return fmt.Sprintf("%.0f B/s", bps)
	}
}
