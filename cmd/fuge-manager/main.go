// Command fuge-manager runs one Fuge manager node: the raft-replicated
// lease table, the owner protocol and xDS over gRPC, and the admin API over
// HTTP. This is the only place that wires package manager to package xds.
//
// Run fuge-manager --help for the settings; cmd/README.md has examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/fuge-project/fuge/cmd/fuge-manager/internal/config"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/xds"
)

// UnsafeReplaceEnv, set to UnsafeReplaceValue, plants the bug of issue 10
// (manager.Config.UnsafeReplace) for the fault harness's negative control.
const (
	UnsafeReplaceEnv   = "FUGE_UNSAFE_REPLACE_INCARNATION"
	UnsafeReplaceValue = "break-single-copy"
)

// stopTimeout bounds a clean stop, which hands leadership to another voter.
const stopTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run starts a node and serves until ctx ends, then stops it cleanly. It
// returns the exit code: 0 after a clean stop or --help, 1 when the node
// fails, 2 for a bad configuration.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c, err := config.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "fuge-manager: %v\nRun 'fuge-manager --help' for usage.\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	if c.MemoryLimit > 0 {
		debug.SetMemoryLimit(c.MemoryLimit)
	}
	startGCGoal(ctx, getenv, log)
	if c.File != "" {
		log.Info("read configuration", "file", c.File)
	}

	cfg := c.Server
	cfg.Logger = log
	if c.TLS.Insecure {
		fmt.Fprintln(stderr, fugetls.InsecureWarning("fuge-manager"))
	} else if cfg.TLS, err = c.TLS.Source(fugetls.ManagerBase); err != nil {
		fmt.Fprintf(stderr, "fuge-manager: %v\n", err)
		return 2
	}
	// The fault harness's negative control (bench/chaos): not a setting.
	if getenv(UnsafeReplaceEnv) == UnsafeReplaceValue {
		cfg.UnsafeReplace = true
		log.Warn("UNSAFE: a new incarnation of an owner name takes over at once; single copy is broken", "env", UnsafeReplaceEnv)
	}
	if c.ClockRate != 1 {
		cfg.Clock = clientshell.NewRateClock(c.ClockRate)
		log.Warn("the lease clock runs at a test rate", "rate", c.ClockRate)
	}
	// The lease table gates lookup streams (standbys in contact with the
	// leader serve them, the leader only without such standbys, or with
	// --leader-serves-lookups), so it needs the server, which needs
	// the table as its observer. The gate is only called from streams the
	// server serves, after Start, when server is set.
	var server *manager.Server
	lt := xds.NewLeaseTable(xds.LeaseTableConfig{
		Logger:        log.With("component", "xds"),
		Gate:          func(ctx context.Context) error { return server.CheckLookup(ctx) },
		EnvoyListener: c.EnvoyListener,
	})
	cfg.Observer = lt // a manager.RingObserver: it also serves Envoy and gRPC
	cfg.Heartbeat = lt.Heartbeat
	cfg.LookupStreams = func() int { return lt.Stats().Streams }
	cfg.RecheckLookups = lt.RecheckLookups
	cfg.XDSNACKs = func() uint64 { return lt.Stats().NACKs }
	cfg.XDSWholeTables = func() (uint64, uint64) { st := lt.Stats(); return st.WholeWaits, st.WholeBypasses }
	cfg.GRPCOptions = lt.ServerOptions()
	server, err = manager.NewServer(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fuge-manager: %v\n", err)
		return 2
	}
	if err := server.Start(lt.Register); err != nil {
		log.Error("start failed", "err", err)
		return 1 // exiting releases whatever Start had opened
	}
	go server.RunStandbyHeartbeats(ctx, lt.Namespaces, lt.Heartbeat, lt.ChangedWithin)
	raftAddr, grpcAddr, httpAddr := server.Addrs()
	fmt.Fprintf(stdout, "fuge-manager %s: raft %s, grpc %s, http %s\n", cfg.NodeID, raftAddr, grpcAddr, httpAddr)

	<-ctx.Done()
	log.Info("stopping", "timeout", stopTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := server.Stop(sctx); err != nil {
		log.Error("stop failed", "err", err)
		// What did not end in time, for whoever reads the log: the
		// goroutines grouped by stack, as SIGQUIT prints them.
		fmt.Fprintln(stderr, "fuge-manager: goroutines still running:")
		_ = pprof.Lookup("goroutine").WriteTo(stderr, 1)
		return 1
	}
	log.Info("stopped")
	return 0
}
