// Command demo is Fuge's demo (make demo). On 127.0.0.1 it starts a
// single-node fuge-manager (data in a temporary directory), three presence
// servers (examples/presence) and fuge-proxy, and drives steady load through
// the proxy: a set of devices publish their addresses and read them back.
// Then it kills one server (kill -9) and waits until its ranges are granted
// to the others and the devices republished; then starts a fourth server and
// waits again. It shows the lease table moving, the loss notifications, the
// republished devices and the requests, with a progress line every second,
// and ends with a summary table.
//
// Every manager port is mutual TLS: the demo first makes a development CA
// and the certificates of every process with fugectl certs init, in the
// work directory, and gives each process --tls-dir (--insecure runs
// everything without TLS).
//
// Every read is checked: it must return the latest address the client wrote
// for the device, or a 404 that a loss notification explains. A read that
// returns an older address is a STALE READ. The demo exits 0 only if the
// run completed with no stale read and every 404 explained. It stops every
// process it started, by PID, also on Ctrl-C and on error.
//
//	demo --bin DIR    (DIR holds fuge-manager, fuge-proxy, presence-server and fugectl)
//
// Without --bin it builds them with the go command, from the module root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/internal/procs"
	"github.com/fuge-project/fuge/lb"
)

type options struct {
	bin, work string
	devices   int
	rate      int
	lease     time.Duration
	steady    time.Duration
	ringSize  int
	insecure  bool
}

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

func run(args []string, out io.Writer) int {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "", "directory holding fuge-manager, fuge-proxy, presence-server and fugectl (default: build them)")
	fs.StringVar(&o.work, "work", "", "directory for logs and the manager's data (default: a new temporary directory)")
	fs.IntVar(&o.devices, "devices", 240, "devices publishing and reading their addresses")
	fs.IntVar(&o.rate, "rate", 400, "operations per second, in total")
	fs.DurationVar(&o.lease, "lease", 3*time.Second, "lease duration T: a crashed server's ranges are granted again after T·65/60")
	fs.DurationVar(&o.steady, "steady", 5*time.Second, "length of each steady phase")
	fs.IntVar(&o.ringSize, "ring-size", 1024, "ring size R of the namespace")
	fs.BoolVar(&o.insecure, "insecure", false, "run every process without TLS (default: mutual TLS, certificates from fugectl certs init)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.devices < 1 || o.rate < 1 || o.rate > 100000 || o.lease <= 0 || o.steady <= 0 {
		fmt.Fprintln(os.Stderr, "demo: need devices >= 1, 1 <= rate <= 100000, positive durations")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	d := &demo{opt: o, out: out, start: time.Now(), checker: NewChecker(), alive: map[string]*procs.Proc{}}
	err := d.run(ctx)
	if err != nil {
		d.logf("demo stopped: %v", err)
	}
	return d.finish(err)
}

// demo is one run.
type demo struct {
	opt   options
	out   io.Writer
	start time.Time
	outMu sync.Mutex

	procs   procs.Group
	aliveMu sync.Mutex
	alive   map[string]*procs.Proc // processes that must stay up

	managerGRPC, managerHTTP string
	proxyURL, proxyAdmin     string
	serverAddrs              []string // free ports for p1..p4

	certs       string            // the certificate directory ("" with --insecure)
	tlsArgs     []string          // every process's TLS flags
	adminHTTP   *http.Client      // the manager's admin API, with an admin certificate
	managerDial []grpc.DialOption // the demo's Lookup, with the proxy certificate

	lookup    *lb.Lookup
	client    *presence.Client
	upcallCtx context.Context
	checker   *Checker
	stats     opStats

	phases    []phase
	notes     []string
	completed atomic.Bool
}

// phase is one row of the summary.
type phase struct {
	name  string
	stats snapshot // counts during the phase
	took  time.Duration
}

// logf prints one line stamped with the time since the start.
func (d *demo) logf(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// say prints a line without a time stamp.
func (d *demo) say(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *demo) run(ctx context.Context) error {
	o := d.opt
	if o.work == "" {
		dir, err := os.MkdirTemp("", "fuge-demo-")
		if err != nil {
			return err
		}
		d.opt.work = dir
	} else if err := os.MkdirAll(o.work, 0o755); err != nil {
		return err
	}
	d.procs.Dir = d.opt.work
	d.say("Fuge demo: a manager, three presence servers and fuge-proxy on 127.0.0.1; %d devices", o.devices)
	d.say("publish and read their addresses through the proxy, %d operations a second.", o.rate)
	d.say("Logs and data: %s", d.opt.work)
	d.say("")
	if d.opt.bin == "" {
		if err := d.build(ctx); err != nil {
			return err
		}
	}
	if err := d.makeCerts(ctx); err != nil {
		return err
	}
	ports, err := procs.FreePorts(5 + servers)
	if err != nil {
		return err
	}
	d.managerGRPC, d.managerHTTP = ports[1], ports[2]
	d.proxyURL, d.proxyAdmin = "http://"+ports[3], ports[4]
	d.serverAddrs = ports[5:]

	if err := d.startManager(ctx, ports[0]); err != nil {
		return err
	}
	client, err := presence.NewClient(presence.ClientConfig{
		BaseURL:     d.proxyURL,
		OnWrite:     func(id, addr string, a presence.Answer) { d.checker.Acked(id, addr, a.Gen) },
		OnRepublish: d.onRepublish,
	})
	if err != nil {
		return err
	}
	d.client = client
	// Republishing in the loss upcall ends with the run, before the Lookup
	// closes (Close waits for the upcalls).
	upcallCtx, stopUpcalls := context.WithCancel(ctx)
	d.upcallCtx = upcallCtx
	if err := d.startLookup(ctx); err != nil {
		stopUpcalls()
		return err
	}
	defer d.lookup.Close()
	defer stopUpcalls()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go d.watch(watchCtx)

	for i := 1; i <= 3; i++ {
		if err := d.startServer(i); err != nil {
			return err
		}
	}
	if err := d.startProxy(); err != nil {
		return err
	}
	if err := d.waitFor(ctx, "the pool to settle", 30*time.Second, func() bool {
		return d.holdersAre("p1", "p2", "p3") && d.proxyHealthy()
	}); err != nil {
		return err
	}
	d.say("")
	d.say("Watch the lease table yourself while it runs:")
	d.say("  go run ./cmd/fugectl --manager %s %s leases default", d.managerHTTP, strings.Join(d.tlsArgs, " "))
	d.say("")

	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	defer func() { stopLoad(); load.Wait() }()
	d.startLoad(loadCtx, &load)
	go d.progress(loadCtx)

	// 1. Steady load.
	if err := d.phase(ctx, "steady: p1 p2 p3", func(ctx context.Context) error {
		d.logf("== steady load on p1 p2 p3 for %v", o.steady)
		return d.sleep(ctx, o.steady)
	}); err != nil {
		return err
	}
	// 2. A crash.
	if err := d.phase(ctx, "kill -9 p2 until republished", d.crash); err != nil {
		return err
	}
	if err := d.phase(ctx, "steady: p1 p3", func(ctx context.Context) error {
		d.logf("== steady load on p1 p3 for %v", o.steady)
		return d.sleep(ctx, o.steady)
	}); err != nil {
		return err
	}
	// 3. A new server.
	if err := d.phase(ctx, "start p4 until republished", d.join); err != nil {
		return err
	}
	if err := d.phase(ctx, "steady: p1 p3 p4", func(ctx context.Context) error {
		d.logf("== steady load on p1 p3 p4 for %v", o.steady)
		return d.sleep(ctx, o.steady)
	}); err != nil {
		return err
	}
	stopLoad()
	load.Wait()
	// Reads that found nothing wait for the loss notification that explains
	// them; it is normally there already.
	d.waitFor(ctx, "every 404 to be explained", 2*d.opt.lease, func() bool {
		_, u := d.checker.Counts()
		return u == 0
	})
	d.completed.Store(true)
	return nil
}

// build compiles the binaries into the work directory.
func (d *demo) build(ctx context.Context) error {
	d.opt.bin = filepath.Join(d.opt.work, "bin")
	d.logf("building fuge-manager, fuge-proxy, presence-server and fugectl into %s", d.opt.bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", d.opt.bin+string(filepath.Separator),
		"./cmd/fuge-manager", "./cmd/fuge-proxy", "./examples/presence/cmd/presence-server", "./cmd/fugectl")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build (run the demo from the module root, or pass --bin): %w", err)
	}
	return nil
}

// startProc starts a process that must stay up, and prints where it logs.
func (d *demo) startProc(name, bin, what string, args ...string) (*procs.Proc, error) {
	p, err := d.procs.Start(name, filepath.Join(d.opt.bin, bin), args...)
	if err != nil {
		return nil, err
	}
	d.aliveMu.Lock()
	d.alive[name] = p
	d.aliveMu.Unlock()
	d.logf("started %-7s pid %-7d %-40s log %s", name, p.Pid(), what, p.Log)
	return p, nil
}

func (d *demo) startManager(ctx context.Context, raftAddr string) error {
	_, err := d.startProc("manager", "fuge-manager", "grpc "+d.managerGRPC+"  admin "+d.managerHTTP,
		append([]string{"--node-id", "demo", "--data-dir", filepath.Join(d.opt.work, "manager-data"),
			"--raft-addr", raftAddr, "--grpc-addr", d.managerGRPC, "--http-addr", d.managerHTTP,
			"--lease-duration", d.opt.lease.String(), "--namespace", "default:" + strconv.Itoa(d.opt.ringSize)},
			d.tlsArgs...)...)
	if err != nil {
		return err
	}
	return d.waitFor(ctx, "the manager to lead", 30*time.Second, func() bool {
		return httpOK(d.adminHTTP, d.managerURL("/readyz"))
	})
}

func (d *demo) startLookup(ctx context.Context) error {
	l, err := lb.NewLookup(lb.LookupConfig{
		Managers: []string{d.managerGRPC}, Namespace: "default", Name: "demo",
		StalenessBound: d.opt.lease, OnLoss: d.onLoss, DialOptions: d.managerDial,
	})
	if err != nil {
		return err
	}
	d.lookup = l
	if err := l.Start(ctx); err != nil {
		return err
	}
	return d.waitFor(ctx, "the lease table", 30*time.Second, func() bool {
		select {
		case <-l.Ready():
			return true
		default:
			return false
		}
	})
}

// startServer starts presence server p<i>.
func (d *demo) startServer(i int) error {
	name, addr := "p"+strconv.Itoa(i), d.serverAddrs[i-1]
	_, err := d.startProc(name, "presence-server", "http "+addr,
		append([]string{"--name", name, "--listen", addr, "--managers", d.managerGRPC,
			"--namespace", "default", "--lease-duration", d.opt.lease.String()}, d.tlsArgs...)...)
	return err
}

func (d *demo) startProxy() error {
	_, err := d.startProc("proxy", "fuge-proxy", "http "+strings.TrimPrefix(d.proxyURL, "http://")+"  admin "+d.proxyAdmin,
		append([]string{"--listen", strings.TrimPrefix(d.proxyURL, "http://"), "--admin", d.proxyAdmin,
			"--managers", d.managerGRPC, "--namespace", "default",
			"--staleness-bound", d.opt.lease.String(), "--shutdown-timeout", "3s"}, d.tlsArgs...)...)
	return err
}

// startLoad starts the load on every device.
func (d *demo) startLoad(ctx context.Context, wg *sync.WaitGroup) {
	devs := make([]*device, d.opt.devices)
	for i := range devs {
		devs[i] = &device{id: fmt.Sprintf("dev-%03d", i)}
	}
	interval := time.Second / time.Duration(d.opt.rate)
	d.logf("load: %d devices, %d operations a second; an operation waits for the previous one on its device", d.opt.devices, d.opt.rate)
	wg.Go(func() { d.load(ctx, devs, interval, wg) })
}

// proxyHealthy asks the proxy's admin listener, which is plain http.
func (d *demo) proxyHealthy() bool {
	return httpOK(&http.Client{Timeout: time.Second}, "http://"+d.proxyAdmin+"/healthz")
}

func httpOK(c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// checkAlive returns an error if a process that must be up has exited.
func (d *demo) checkAlive() error {
	d.aliveMu.Lock()
	defer d.aliveMu.Unlock()
	for name, p := range d.alive {
		if p.Exited() {
			return fmt.Errorf("%s %w (%v): see %s", name, procs.ErrExited, p.Err(), p.Log)
		}
	}
	return nil
}

// waitFor polls cond until it holds, a process dies, ctx ends or timeout
// passes.
func (d *demo) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if err := d.checkAlive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		if err := d.sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits for dur, watching ctx and the processes.
func (d *demo) sleep(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-t.C:
			return d.checkAlive()
		case <-tick.C:
			if err := d.checkAlive(); err != nil {
				return err
			}
		}
	}
}
