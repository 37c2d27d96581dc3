// Command balance is make bench-balance: it measures the balancing
// policies (off, seeds, fit) of issue 14 on this machine.
//
// One real manager (raft on disk, gRPC owner protocol, delta xDS for
// lookups, admin HTTP API, all on 127.0.0.1:0) serves one namespace per
// Zipf parameter and policy, all at once, each with -owners real
// ownerguard.Owner sessions and a real lb.Lookup. The load is generated in
// this process: keys drawn from a Zipf distribution over -keys keys, each
// request routed by the Lookup to an owner and admitted by that owner's
// ownership check (GetOwnershipHandle) and counted with Owner.CountRequest,
// exactly as the guards count the requests they admit, minus HTTP. So the
// owners report their default load (the admitted rate, EWMA over 5 s)
// and the manager's leader runs the policy rounds on real time: no scaled
// clock. Halfway through, the load shifts: the popularity ranks move to
// other keys.
//
// It prints, per Zipf parameter and policy, one line of the form
//
//	balance zipf=0.8 policy=seeds: max/mean 1.07 at 60s, moves/min after convergence 0, republished after drain -
//
// writes PNG line plots of max/mean over time, a JSON file of every series,
// and, with -section, appends a Markdown section to make bench's report.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fuge-project/fuge/bench/migration"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

type options struct {
	duration   time.Duration
	owners     int
	rate       float64
	keys       int
	window     time.Duration
	lease      time.Duration
	interval   time.Duration
	zipfs      []float64
	policies   []string
	out        string
	section    string
	seed       uint64
	converge   time.Duration
	ringSize   int
	maxMoves   int
	quietStart time.Duration
}

func main() {
	var o options
	var zipfs, policies string
	flag.DurationVar(&o.duration, "duration", 240*time.Second, "length of the measured run; the load shifts halfway")
	flag.IntVar(&o.owners, "owners", 5, "owners per namespace (5 to 10 is the issue's range; at 5 the mean share, 20%, is above Zipf 1.1's top key, 13.5%: with 8 the key alone exceeds the mean and the ring's entry names keep max/mean at 1.34 or more on this draw, see -floor)")
	flag.Float64Var(&o.rate, "rate", 8000, "requests per second per namespace")
	flag.IntVar(&o.keys, "keys", 100_000, "distinct keys")
	flag.DurationVar(&o.window, "window", 5*time.Second, "measurement window of max/mean")
	flag.DurationVar(&o.lease, "lease", manager.DefaultLeaseDuration, "lease duration T (owners renew and report every T/4)")
	flag.DurationVar(&o.interval, "interval", manager.DefaultBalanceInterval, "the namespaces' balance interval")
	flag.StringVar(&zipfs, "zipf", "0.8,1.1", "Zipf parameters, comma-separated")
	flag.StringVar(&policies, "policies", "off,seeds,fit", "policies, comma-separated")
	flag.StringVar(&o.out, "out", filepath.Join("bench", "results", time.Now().UTC().Format("2006-01-02"), "balance"), "directory for the plots and balance.json")
	flag.StringVar(&o.section, "section", "", "append a Markdown section with the results to this file (make bench's report.md)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the key draws")
	flag.DurationVar(&o.converge, "converge", 60*time.Second, "time after the start and after the shift by which max/mean is judged; moves after it count as moves after convergence")
	flag.IntVar(&o.ringSize, "ring-size", 4096, "ring size R")
	flag.IntVar(&o.maxMoves, "max-moves", 0, "balance max moves per round (0: the manager's default)")
	floorOnly := flag.Bool("floor", false, "only search, per Zipf parameter and phase, the least max/mean any virtual-node counts reach on the true loads of the keys with -owners owners (floor.go), and print it")
	drain := flag.Bool("drain", true, "also drain one presence server under load with state migration off and on (bench/migration) and print the devices republished with migration in each line")
	flag.Parse()
	for _, s := range strings.Split(zipfs, ",") {
		var z float64
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &z); err != nil || z <= 0 || z > 3 {
			log.Fatalf("balance: -zipf %q: want numbers in (0, 3]", zipfs)
		}
		o.zipfs = append(o.zipfs, z)
	}
	for _, p := range strings.Split(policies, ",") {
		p = strings.TrimSpace(p)
		if !manager.ValidBalance(p) {
			log.Fatalf("balance: -policies: %q is not off, seeds or fit", p)
		}
		o.policies = append(o.policies, p)
	}
	switch {
	case o.owners < 2 || o.owners > 64:
		log.Fatal("balance: -owners must be 2 to 64")
	case o.rate <= 0 || o.rate > 1e6:
		log.Fatal("balance: -rate must be in (0, 1e6]")
	case o.keys < 1 || o.keys > 10_000_000:
		log.Fatal("balance: -keys must be 1 to 10^7")
	case o.window <= 0 || o.duration < 4*o.window:
		log.Fatal("balance: -duration must be at least 4 windows")
	case o.converge >= o.duration/2:
		log.Fatal("balance: -converge must be under half the duration")
	}
	if *floorOnly {
		floor(o, os.Stdout)
		return
	}
	res, err := run(context.Background(), o, os.Stderr)
	if err != nil {
		log.Fatalf("balance: %v", err)
	}
	if *drain {
		on, err := drainBoth(context.Background(), os.Stdout)
		if err != nil {
			log.Fatalf("balance: drain: %v", err)
		}
		republishedAfterDrain = func(float64, string) string { return strconv.Itoa(on.Republished) }
	}
	if err := res.write(o, os.Stdout); err != nil {
		log.Fatalf("balance: %v", err)
	}
}

// republishedAfterDrain is the figure of each line's "republished after
// drain": the devices that had to republish after a drain of one presence
// server under load with state migration on (bench/migration's Drain; the
// drain does not depend on the policy or the Zipf parameter, so every line
// shows the same run). "-" with -drain=false.
var republishedAfterDrain = func(zipf float64, policy string) string { return "-" }

// lossTime is a loss notification as the Lookup's upcall records it.
type lossTime struct {
	at     time.Time
	ranges int
	all    bool
}

// lossEvent is one loss notification of a namespace's Lookup, in the
// result: seconds since the load started (negative: between the counters'
// reset and the start).
type lossEvent struct {
	At     float64 `json:"at"`
	Ranges int     `json:"ranges"`
	All    bool    `json:"all,omitempty"`
}

// drainBoth runs bench/migration's drain with migration off, then on,
// prints both lines to w, and returns the run with migration.
func drainBoth(ctx context.Context, w io.Writer) (migration.Result, error) {
	var on migration.Result
	for _, m := range []bool{false, true} {
		r, err := migration.Drain(ctx, migration.Config{Migration: m, Seed: 1})
		if err != nil {
			return on, err
		}
		fmt.Fprintln(w, r.Line())
		on = r
	}
	return on, nil
}

// nsRun is one namespace of the run: a Zipf parameter and a policy.
type nsRun struct {
	Name   string  `json:"namespace"`
	Zipf   float64 `json:"zipf"`
	Policy string  `json:"policy"`
	// Seconds, MaxMean and Moved are the series, one point per window:
	// the window's end, max/mean of the owners' served requests in it, and
	// the virtual nodes the policy had moved by then.
	Seconds []float64 `json:"seconds"`
	MaxMean []float64 `json:"max_mean"`
	Moved   []uint64  `json:"vnodes_moved"`
	Ranges  uint64    `json:"ranges_moved"`
	// Losses counts the Lookup's loss notifications (upcalls) and the
	// ranges they named.
	Losses     uint64 `json:"loss_notifications"`
	LossRanges uint64 `json:"loss_ranges"`
	// LossLog is each loss notification counted: seconds since the load
	// started, ranges named, and whether it said all state may be lost.
	LossLog     []lossEvent `json:"loss_log,omitempty"`
	Unserved    uint64      `json:"unserved"`      // requests no owner admitted (in transit between owners)
	Served      uint64      `json:"served"`        // requests admitted
	TopKeyShare float64     `json:"top_key_share"` // the most popular key's share of the load
	// Top names the most popular key of each half (before and after the
	// shift).
	Top [2]string `json:"top_key"`

	owners []*ownerguard.Owner
	byAddr map[string]int
	lookup *lb.Lookup
	served []atomic.Uint64 // per owner, since the start
	prev   []uint64
	unsrv  atomic.Uint64
	lossMu sync.Mutex
	losses []lossTime  // since the counters were reset, before the load
	keys   [2][]uint64 // key hashes by rank, per phase
	cdf    []float64
	lns    []net.Listener
	mu     sync.Mutex
}

type result struct {
	Owners   int      `json:"owners"`
	Rate     float64  `json:"rate"`
	Keys     int      `json:"keys"`
	Duration string   `json:"duration"`
	Lease    string   `json:"lease"`
	Interval string   `json:"interval"`
	Runs     []*nsRun `json:"runs"`
	Started  string   `json:"started"`
}

func nsName(z float64, p string) string {
	return strings.ReplaceAll(fmt.Sprintf("zipf%g-%s", z, p), ".", "_")
}

func run(ctx context.Context, o options, logw io.Writer) (*result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp("", "fuge-balance-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	res := &result{Owners: o.owners, Rate: o.rate, Keys: o.keys, Duration: o.duration.String(), Lease: o.lease.String(),
		Interval: o.interval.String(), Started: time.Now().UTC().Format(time.RFC3339)}
	var runs []*nsRun
	var ncs []manager.NamespaceConfig
	for _, z := range o.zipfs {
		for _, p := range o.policies {
			r := &nsRun{Name: nsName(z, p), Zipf: z, Policy: p}
			runs = append(runs, r)
			ncs = append(ncs, manager.NamespaceConfig{Name: r.Name, RingSize: o.ringSize, Balance: p, BalanceInterval: o.interval,
				BalanceMaxMoves: o.maxMoves})
		}
	}
	res.Runs = runs

	// The manager: one node, real raft, gRPC and admin API.
	var srv *manager.Server
	lt := xds.NewLeaseTable(xds.LeaseTableConfig{Gate: func(ctx context.Context) error { return srv.CheckLeader(ctx) }})
	cfg := manager.DefaultServerConfig()
	cfg.NodeID, cfg.DataDir = "bench", dir
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.LeaseDuration = o.lease
	cfg.Namespaces = ncs
	cfg.Observer, cfg.Heartbeat = lt, lt.Heartbeat
	srv, err = manager.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(lt.Register); err != nil {
		return nil, err
	}
	defer srv.Kill()
	_, grpcAddr, httpAddr := srv.Addrs()
	deadline := time.Now().Add(30 * time.Second)
	for !srv.IsLeader() {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader after 30 s")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	fmt.Fprintf(logw, "balance: manager at %s (admin %s); %d namespaces of %d owners, %.0f requests/s each, %d keys, T=%v, rounds every %v\n",
		grpcAddr, httpAddr, len(runs), o.owners, o.rate, o.keys, o.lease, o.interval)

	// Keys and their popularity: drawn from the seed and the Zipf
	// parameter only, so that every policy of a Zipf parameter gets the
	// same keys whatever -policies lists (the namespace's index in the run
	// changed them before).
	for _, r := range runs {
		r.cdf, r.TopKeyShare = zipfCDF(o.keys, r.Zipf)
		r.keys, r.Top = drawKeys(o.seed, r.Zipf, o.keys)
	}

	// Owners and lookups.
	for _, r := range runs {
		r.byAddr = map[string]int{}
		r.served = make([]atomic.Uint64, o.owners)
		r.prev = make([]uint64, o.owners)
		for i := range o.owners {
			ln, err := net.Listen("tcp", "127.0.0.1:0") // a unique address to advertise; nothing is served on it
			if err != nil {
				return nil, err
			}
			r.lns = append(r.lns, ln)
			addr := ln.Addr().String()
			ow, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
				Managers: []string{grpcAddr}, Namespace: r.Name, Name: fmt.Sprintf("o%d", i), Addr: addr, LeaseDuration: o.lease,
			})
			if err != nil {
				return nil, err
			}
			if err := ow.Start(ctx); err != nil {
				return nil, err
			}
			r.owners = append(r.owners, ow)
			r.byAddr[addr] = i
		}
		r := r
		lk, err := lb.NewLookup(lb.LookupConfig{Managers: []string{grpcAddr}, Namespace: r.Name, Name: "bench-" + r.Name,
			OnLoss: func(rs []ring.Range, all bool) {
				r.lossMu.Lock()
				r.losses = append(r.losses, lossTime{time.Now(), len(rs), all})
				r.lossMu.Unlock()
			}})
		if err != nil {
			return nil, err
		}
		if err := lk.Start(ctx); err != nil {
			return nil, err
		}
		r.lookup = lk
	}
	defer func() {
		for _, r := range runs {
			for _, ow := range r.owners {
				ow.Close()
			}
			r.lookup.Close()
			for _, ln := range r.lns {
				ln.Close()
			}
		}
	}()
	// Wait until every namespace's lease table covers the ring and the
	// lookups have it.
	deadline = time.Now().Add(2*o.lease + 30*time.Second)
	for _, r := range runs {
		for !settled(r, o) {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s did not settle", r.Name)
			}
			time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
		}
	}
	fmt.Fprintf(logw, "balance: all owners hold their arcs; load starts now for %v (shift at %v)\n", o.duration, o.duration/2)
	// Counters before the load: moves made while owners joined are not
	// the policy's (there are none: no load, no moves).
	base := map[string]uint64{}
	for _, r := range runs {
		m, _, err := balanceStats(ctx, httpAddr, r.Name)
		if err != nil {
			return nil, err
		}
		base[r.Name] = m
		r.lossMu.Lock()
		r.losses = nil
		r.lossMu.Unlock()
	}

	// Load: one generator per namespace.
	start := time.Now()
	var phase atomic.Int32
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			generate(ctx, r, o, start, &phase, rand.New(rand.NewPCG(o.seed, ^math.Float64bits(r.Zipf))))
		}()
	}
	// Sampling.
	tick := time.NewTicker(o.window)
	defer tick.Stop()
	shifted := false
	for k := 1; ; k++ {
		<-tick.C
		el := time.Since(start)
		for _, r := range runs {
			mm := r.sample()
			moved, ranges, err := balanceStats(ctx, httpAddr, r.Name)
			if err != nil {
				return nil, err
			}
			r.Seconds = append(r.Seconds, math.Round(el.Seconds()))
			r.MaxMean = append(r.MaxMean, mm)
			r.Moved = append(r.Moved, moved-base[r.Name])
			r.Ranges = ranges
		}
		line := fmt.Sprintf("balance: t=%3.0fs", el.Seconds())
		for _, r := range runs {
			line += fmt.Sprintf("  %s %.2f/%d", r.Name, r.MaxMean[len(r.MaxMean)-1], r.Moved[len(r.Moved)-1])
		}
		fmt.Fprintln(logw, line)
		if !shifted && el >= o.duration/2-o.window/2 {
			shifted = true
			phase.Store(1)
			fmt.Fprintf(logw, "balance: t=%3.0fs the load shifts: the popularity ranks move to other keys\n", el.Seconds())
		}
		if el >= o.duration-o.window/2 {
			break
		}
	}
	cancel()
	wg.Wait()
	for _, r := range runs {
		// A loss upcall comes after the table it belongs to, from the
		// lookup's own goroutine; Close delivers those still queued.
		r.lookup.Close()
		r.lossMu.Lock()
		for _, l := range r.losses {
			r.LossLog = append(r.LossLog, lossEvent{At: l.at.Sub(start).Seconds(), Ranges: l.ranges, All: l.all})
			r.LossRanges += uint64(l.ranges)
		}
		r.Losses = uint64(len(r.losses))
		r.lossMu.Unlock()
		r.Unserved = r.unsrv.Load()
		for i := range r.served {
			r.Served += r.served[i].Load()
		}
	}
	return res, nil
}

// settled: every owner holds arcs and the lookup maps the whole ring.
func settled(r *nsRun, o options) bool {
	var share float64
	for _, ow := range r.owners {
		for _, l := range ow.Held() {
			share += l.Range.Share()
		}
	}
	es := r.lookup.Entries()
	covered := 0.0
	for _, e := range es {
		if e.Owner != "" {
			covered += e.Range.Share()
		}
	}
	return math.Abs(share-1) < 1e-9 && math.Abs(covered-1) < 1e-9
}

// generate sends r's requests at o.rate until ctx ends: each key is drawn
// from the Zipf distribution, routed by the Lookup to an owner, and
// admitted by that owner's ownership check and counted, as a guard does.
func generate(ctx context.Context, r *nsRun, o options, start time.Time, phase *atomic.Int32, rng *rand.Rand) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	sent := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := o.rate * time.Since(start).Seconds()
		keys := r.keys[phase.Load()]
		for ; sent < due; sent++ {
			rank := sort.SearchFloat64s(r.cdf, rng.Float64())
			rank = min(rank, len(keys)-1)
			h := keys[rank]
			addr, _, _, ok := r.lookup.Lookup(h)
			i, known := r.byAddr[addr]
			if !ok || !known {
				r.unsrv.Add(1)
				continue
			}
			ow := r.owners[i]
			if _, held := ow.GetOwnershipHandle(h); !held {
				r.unsrv.Add(1) // a guard would answer 421; the router retries
				continue
			}
			ow.CountRequest(h)
			r.served[i].Add(1)
		}
	}
}

// sample returns max/mean of the requests the owners served since the
// last sample.
func (r *nsRun) sample() float64 {
	var total, mx float64
	for i := range r.served {
		c := r.served[i].Load()
		d := float64(c - r.prev[i])
		r.prev[i] = c
		total += d
		mx = max(mx, d)
	}
	if total == 0 {
		return 0
	}
	return mx / (total / float64(len(r.served)))
}

// drawKeys returns the key hashes by popularity rank in each half of the
// run (the load shifts to other keys halfway) and the name of the top key
// of each half. They depend on seed and the Zipf parameter only.
func drawKeys(seed uint64, zipf float64, n int) (keys [2][]uint64, top [2]string) {
	rng := rand.New(rand.NewPCG(seed, math.Float64bits(zipf)))
	for ph := range 2 {
		keys[ph] = make([]uint64, n)
		perm := rng.Perm(n)
		for k := range n {
			name := fmt.Sprintf("user-%d-%d", ph, perm[k])
			if k == 0 {
				top[ph] = name
			}
			keys[ph][k] = ring.HashString(name)
		}
	}
	return keys, top
}

// zipfCDF is the cumulative distribution of ranks 1..n with P(k) ∝ k^-α,
// and the top rank's probability.
func zipfCDF(n int, alpha float64) ([]float64, float64) {
	cdf := make([]float64, n)
	var sum float64
	for k := range n {
		sum += math.Pow(float64(k+1), -alpha)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return cdf, cdf[0]
}

// balanceStats reads the policy's counters from the admin API.
func balanceStats(ctx context.Context, httpAddr, ns string) (moved, ranges uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/namespaces/"+ns+"/owners", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Balance struct {
			VNodesMoved uint64 `json:"vnodes_moved"`
			RangesMoved uint64 `json:"ranges_moved"`
		} `json:"balance"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET owners of %s: %s", ns, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, 0, err
	}
	return out.Balance.VNodesMoved, out.Balance.RangesMoved, nil
}

// summary is one run's figures.
type summary struct {
	at60, at60shift float64 // max/mean in the window ending at converge after the start, after the shift
	movesPerMin     float64 // moves after convergence (both halves), per minute
	worstAfter      float64 // the worst max/mean after convergence (both halves)
}

func (r *nsRun) summarize(o options) summary {
	var s summary
	half := (o.duration / 2).Seconds()
	conv := o.converge.Seconds()
	at := func(sec float64) float64 {
		best, bi := math.Inf(1), -1
		for i, x := range r.Seconds {
			if d := math.Abs(x - sec); d < best {
				best, bi = d, i
			}
		}
		if bi < 0 {
			return 0
		}
		return r.MaxMean[bi]
	}
	s.at60, s.at60shift = at(conv), at(half+conv)
	// Moves in [conv, half) and [half+conv, end].
	movedAt := func(sec float64) uint64 {
		var m uint64
		for i, x := range r.Seconds {
			if x <= sec+0.5 {
				m = r.Moved[i]
			}
		}
		return m
	}
	end := r.Seconds[len(r.Seconds)-1]
	moves := float64(movedAt(half)-movedAt(conv)) + float64(movedAt(end)-movedAt(half+conv))
	mins := ((half - conv) + (end - half - conv)) / 60
	if mins > 0 {
		s.movesPerMin = moves / mins
	}
	for i, x := range r.Seconds {
		if (x >= conv && x <= half) || x >= half+conv {
			s.worstAfter = max(s.worstAfter, r.MaxMean[i])
		}
	}
	return s
}

func (res *result) write(o options, w io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, "balance.json"), b, 0o644); err != nil {
		return err
	}
	plots, err := res.plots(o.out)
	if err != nil {
		return err
	}
	for _, p := range plots {
		fmt.Fprintf(w, "plot: %s\n", p)
	}
	for _, r := range res.Runs {
		s := r.summarize(o)
		fmt.Fprintf(w, "balance zipf=%g policy=%s: max/mean %.2f at %ds, moves/min after convergence %s, republished after drain %s\n",
			r.Zipf, r.Policy, s.at60, int(o.converge.Seconds()), fmtMoves(s.movesPerMin), republishedAfterDrain(r.Zipf, r.Policy))
		fmt.Fprintf(w, "  after the shift: max/mean %.2f at %ds; worst after convergence %.2f; %d vnodes and %d ranges moved, %d loss notifications (%d ranges), %.2f%% of requests refused in transit\n",
			s.at60shift, int(o.converge.Seconds()), s.worstAfter, r.Moved[len(r.Moved)-1], r.Ranges, r.Losses, r.LossRanges,
			100*float64(r.Unserved)/float64(max(r.Served+r.Unserved, 1)))
		fmt.Fprintf(w, "  %s\n", r.dominant(res.Owners))
	}
	if o.section != "" {
		return res.appendSection(o, o.section, plots)
	}
	return nil
}

// dominant says which key dominates and by how much: the top key of each
// half and its share of the load against the mean owner's; a key above
// the mean share alone puts its holder at or above share × owners.
func (r *nsRun) dominant(owners int) string {
	mean := 1 / float64(owners)
	s := fmt.Sprintf("top key %s before the shift, %s after: each %.1f%% of the load (rank 2 %.1f%%, rank 3 %.1f%%), mean owner share %.1f%%",
		r.Top[0], r.Top[1], 100*r.TopKeyShare, 100*(r.cdf[1]-r.cdf[0]), 100*(r.cdf[2]-r.cdf[1]), 100*mean)
	if r.TopKeyShare > mean {
		s += fmt.Sprintf(": it dominates, its holder is at max/mean %.2f or more from that key alone", r.TopKeyShare/mean)
	}
	return s
}

func fmtMoves(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// appendSection appends the results as a Markdown section to path (make
// bench's report.md), with the plots linked relative to it.
func (res *result) appendSection(o options, path string, plots []string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n## Load balancing (make bench-balance)\n\n")
	fmt.Fprintf(f, "%d owners per namespace, %.0f requests/s each over %d keys, T = %s, policy rounds every %s, %s run with the load shifting halfway; "+
		"requests routed by a real Lookup and admitted by the owner's ownership check and counted as a guard counts them; "+
		"max/mean of the requests served per %s window.\n\n", res.Owners, res.Rate, res.Keys, res.Lease, res.Interval, res.Duration, o.window)
	fmt.Fprintf(f, "| zipf | policy | max/mean at %[1]ds | after the shift, at %[1]ds | worst after convergence | moves/min after convergence | vnodes moved | ranges moved | loss notifications |\n|---|---|---|---|---|---|---|---|---|\n", int(o.converge.Seconds()))
	for _, r := range res.Runs {
		s := r.summarize(o)
		fmt.Fprintf(f, "| %g | %s | %.2f | %.2f | %.2f | %s | %d | %d | %d |\n", r.Zipf, r.Policy, s.at60, s.at60shift, s.worstAfter,
			fmtMoves(s.movesPerMin), r.Moved[len(r.Moved)-1], r.Ranges, r.Losses)
	}
	fmt.Fprintln(f)
	dir := filepath.Dir(path)
	for _, p := range plots {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			rel = p
		}
		fmt.Fprintf(f, "![%s](%s)\n", strings.TrimSuffix(filepath.Base(p), ".png"), filepath.ToSlash(rel))
	}
	fmt.Fprintln(f, "\n```")
	for _, r := range res.Runs {
		s := r.summarize(o)
		fmt.Fprintf(f, "balance zipf=%g policy=%s: max/mean %.2f at %ds, moves/min after convergence %s, republished after drain %s\n",
			r.Zipf, r.Policy, s.at60, int(o.converge.Seconds()), fmtMoves(s.movesPerMin), republishedAfterDrain(r.Zipf, r.Policy))
	}
	fmt.Fprintln(f, "```")
	return f.Close()
}

// zipfsOf lists the runs' Zipf parameters in order.
func zipfsOf(runs []*nsRun) []float64 {
	var zs []float64
	for _, r := range runs {
		if !slices.Contains(zs, r.Zipf) {
			zs = append(zs, r.Zipf)
		}
	}
	return zs
}
