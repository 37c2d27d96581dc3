package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fuge-project/fuge/ownerguard"
)

// runItems runs items 1 to 5 in order and fills rep.
func (b *bench) runItems(ctx context.Context, rep *report) error {
	var owners []ownerName
	for i := range 4 {
		owners = append(owners, ownerName{nsPlain, fmt.Sprintf("b%d", i+1)})
	}
	for i := range 3 {
		owners = append(owners, ownerName{nsTLS, fmt.Sprintf("b%d", i+1)}, ownerName{nsPresence, fmt.Sprintf("p%d", i+1)})
	}
	if err := initCerts(b.certs, owners); err != nil {
		return err
	}
	var err error
	if b.admin, err = adminClient(b.certs); err != nil {
		return err
	}
	if err := b.startManager(); err != nil {
		return fmt.Errorf("fuge-manager: %w", err)
	}
	if err := b.startBackends(4); err != nil {
		return err
	}
	var sessions []*ownerguard.Owner
	defer func() {
		for _, o := range sessions {
			o.Close()
		}
	}()
	var plain []string
	for _, be := range b.backends[:3] {
		for _, s := range []struct{ ns, addr string }{{nsPlain, be.addr}, {nsTLS, be.tlsAddr}} {
			o, err := b.startOwner(ctx, s.ns, be.name, s.addr)
			if err != nil {
				return err
			}
			sessions = append(sessions, o)
		}
		plain = append(plain, be.addr)
	}
	for _, ns := range []string{nsPlain, nsTLS} {
		if err := b.waitSettled(ns, 30*time.Second, "b1", "b2", "b3"); err != nil {
			return err
		}
	}

	// The targets of items 1, 2 and 4, each started once.
	targets := []*target{{name: tDirect, addr: b.backends[0].addr}}
	add := func(name string) func(*target, error) error {
		return func(t *target, err error) error {
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			t.name = name
			targets = append(targets, t)
			return nil
		}
	}
	if err := add(tFuge)(b.startFugeProxy("fuge-proxy", nsPlain)); err != nil {
		return err
	}
	fuge := targets[len(targets)-1]
	if err := add(tFugeRR)(b.startFugeProxy("fuge-proxy-rr", nsPlain, "--balance", "round-robin")); err != nil {
		return err
	}
	// Pipelining to the owners and spinning for a lone request's answer
	// are fuge-proxy's defaults, each a trade of its own; the same proxy
	// without both shows what they buy. Each acts in one regime only
	// (pipelining under load, from four busy connections to an owner;
	// the spin when one request is in flight), so item 1 shows the first
	// and item 2 the second.
	if b.proxyHasFlag("--spin-wait") {
		if err := add(tFugePlain)(b.startFugeProxy("fuge-proxy-plain", nsPlain, "--pipeline-depth", "1", "--spin-wait", "0")); err != nil {
			return err
		}
	}
	rep.BackendTLS = b.proxyHasFlag("--backend-tls")
	if rep.BackendTLS {
		if err := add(tFugeTLS)(b.startFugeProxy("fuge-proxy-tls", nsTLS, "--backend-tls")); err != nil {
			return err
		}
	}
	if err := add(tHAChash)(b.startHAProxy("haproxy-chash", "hdr(X-Fuge-Key)", plain, false)); err != nil {
		return err
	}
	if err := add(tHARR)(b.startHAProxy("haproxy-roundrobin", "roundrobin", plain, false)); err != nil {
		return err
	}
	if err := add(tNginx)(b.startNginx("nginx-chash", plain, false)); err != nil {
		return err
	}
	for _, t := range targets {
		if err := waitTarget(t); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	rep.Targets = nil
	for _, t := range targets {
		rep.Targets = append(rep.Targets, t.name)
	}
	if b.cfg.hold {
		return b.holdTargets(ctx, targets)
	}

	log.Printf("1. throughput and CPU per request")
	rep.Runs, rep.Pairs = b.throughput(targets)
	log.Printf("2. latency added")
	rep.Latency = b.latency(targets)
	log.Printf("4. fuge-proxy under a 25%% ring move")
	rep.Move = b.move(ctx, fuge)
	for _, t := range targets {
		b.ps.stop(t.p, 3*time.Second) // free the proxy CPU
	}
	log.Printf("3. inconsistency under churn")
	if rep.Churn, err = b.churn(); err != nil {
		return fmt.Errorf("churn: %w", err)
	}
	for _, o := range sessions {
		o.Close()
	}
	sessions = nil
	b.ps.stopAll()
	if b.cfg.managerScale {
		log.Printf("5. the manager's scale (go run ./bench/managerscale; minutes)")
		rep.ManagerScale, rep.ManagerScaleErr = b.managerScale()
	}
	return nil
}

// proxyHasFlag reports whether fuge-proxy --help lists flag.
func (b *bench) proxyHasFlag(flag string) bool {
	out, _ := exec.Command(filepath.Join(b.bin, "fuge-proxy"), "--help").CombinedOutput()
	return strings.Contains(string(out), flag+" ") || strings.Contains(string(out), flag+"\n")
}

// churn runs item 3: two pools of presence servers, five balancers.
func (b *bench) churn() ([]churnRow, error) {
	leased, err := b.startPresencePool("leased", true)
	if err != nil {
		return nil, err
	}
	unleased, err := b.startPresencePool("unleased", false)
	if err != nil {
		return nil, err
	}
	budget := []string{"--retry-budget", "3s", "--upstream-timeout", "2s"}
	type row struct {
		name    string
		t       *target
		err     error
		pool    *presencePool
		servers string
	}
	var rows []row
	mk := func(name string, pool *presencePool, servers string, t *target, err error) {
		rows = append(rows, row{name, t, err, pool, servers})
	}
	const leasedS, unleasedS = "presence-server (leases, ownerguard)", "presence service, no leases"
	t, err := b.startFugeProxy("churn-fuge-proxy", nsPresence, budget...)
	mk(tFuge, leased, leasedS, t, err)
	t, err = b.startFugeProxy("churn-fuge-proxy-rr", nsPresence, append(budget, "--balance", "round-robin")...)
	mk(tFugeRR, leased, leasedS, t, err)
	t, err = b.startHAProxy("churn-haproxy-chash", "hdr(X-Fuge-Key)", unleased.addrs, true)
	mk(tHAChash, unleased, unleasedS, t, err)
	t, err = b.startHAProxy("churn-haproxy-roundrobin", "roundrobin", unleased.addrs, true)
	mk(tHARR, unleased, unleasedS, t, err)
	t, err = b.startNginx("churn-nginx-chash", unleased.addrs, true)
	mk(tNginx, unleased, unleasedS, t, err)
	var out []churnRow
	for i, r := range rows {
		if r.err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, r.err)
		}
		r.t.name = r.name
		if r.pool.leased {
			if err := b.waitSettled(nsPresence, 30*time.Second, r.pool.names...); err != nil {
				return nil, err
			}
		}
		if err := waitPresence(r.t.addr); err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		cr := b.runChurn(i+1, r.t, r.pool, r.servers)
		log.Printf("  %-30s %d restarts, %d writes (%d ok), %d reads (%d ok): %d stale, %d lost, %d failed",
			cr.Balancer, cr.Restarts, cr.Writes, cr.WritesOK, cr.Reads, cr.ReadsOK, cr.Stale, cr.Lost, cr.Failed)
		out = append(out, cr)
		b.ps.stop(r.t.p, 3*time.Second)
	}
	splitBrain([]string{leased.history, unleased.history}, out)
	return out, nil
}

// waitPresence waits until a presence server answers through addr (200 or
// 404 from a server).
func waitPresence(addr string) error {
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/devices/warm-up", nil)
		req.Header.Set("X-Fuge-Key", "warm-up")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if (resp.StatusCode == 200 || resp.StatusCode == 404) && resp.Header.Get("Fuge-Owner") != "" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no presence server answers through %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// managerScale runs bench/managerscale with every CPU and returns its table.
func (b *bench) managerScale() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	args := []string{"go", "run", "./bench/managerscale", "-ring", "4096", "-changes", "4"}
	if b.ps.pinned {
		args = append([]string{"taskset", "-c", cpusOnline()}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	logf, err := os.Create(filepath.Join(b.ps.logs, "managerscale.log"))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd.Stderr = logf
	table, err := cmd.Output()
	return strings.TrimSpace(string(table)), err
}

// holdTargets prints the targets, the manager and the backends, and waits
// for SIGINT or SIGTERM (-hold): the pool as the measurements see it, for
// wrk, perf or pprof by hand (taskset -c 1 wrk ... keeps the layout).
func (b *bench) holdTargets(ctx context.Context, targets []*target) error {
	for _, t := range targets {
		pid := 0
		if t.p != nil {
			pid = t.p.Pid()
		}
		fmt.Printf("hold: target %-30s %s pid %d\n", t.name, t.addr, pid)
	}
	for _, be := range b.backends {
		fmt.Printf("hold: backend %s %s (tls %s) pid %d\n", be.name, be.addr, be.tlsAddr, be.p.Pid())
	}
	fmt.Printf("hold: fuge-manager grpc %s admin https://%s pid %d; certificates in %s; binaries in %s\n", b.mgrGRPC, b.mgrHTTP, b.mgr.Pid(), b.certs, b.bin)
	fmt.Println("hold: waiting for SIGINT or SIGTERM")
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
