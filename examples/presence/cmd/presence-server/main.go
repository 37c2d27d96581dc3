// Command presence-server runs one server of the presence example: the
// presence service behind ownerguard, holding the leases of its share of the
// device ids.
//
//	presence-server --name p1 --listen 127.0.0.1:9001 --managers 127.0.0.1:7401
//
// It dials the managers over mutual TLS with its owner certificate,
// owner-<namespace>-<name>.crt and .key in --tls-dir (default fuge-certs;
// make it with fugectl certs init DIR --owner NS/NAME), since the manager
// gives a name's leases only to the holder of that name's certificate;
// --tls-ca, --tls-cert and --tls-key name single files instead, and
// --insecure talks plaintext to a manager run with --insecure. Its own HTTP
// port is plaintext.
//
// With --migration-listen ADDR it serves ownerguard's MigrationService
// there (mutual TLS with its owner certificate unless --insecure): on a
// drain, a rebalancing move or its own clean stop, its devices move to the
// new owner of their range, and the devices need not publish again.
//
// It stops on SIGINT or SIGTERM: it stops serving, then ends its lease session
// so the manager can hand its ranges on at once. Exit 2 means a bad command
// line, 1 a failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/examples/internal/tlsflags"
	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/clientshell"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("presence-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the owner's stable name (its ring hash_key); required")
	listen := fs.String("listen", "127.0.0.1:9001", "HTTP address to serve on, advertised to routers")
	managers := fs.String("managers", "127.0.0.1:7401", "comma-separated gRPC addresses of the managers")
	namespace := fs.String("namespace", "default", "the namespace (pool) to join")
	leaseDur := fs.Duration("lease-duration", ownerguard.DefaultLeaseDuration, "lease T; must equal the namespace's")
	history := fs.String("history", "", "for fault testing: append one line per answered request to this file\n(CLOCK_MONOTONIC ns inside the lease check, device id, generation, status)")
	clockRate := fs.Float64("clock-rate", 1, "for fault testing only: run the lease clock at this rate of real time (0 freezes it)")
	migListen := fs.String("migration-listen", "", "address to serve state migration on (MigrationService), reachable by the other servers;\nempty: off (a drain or stop makes its devices publish again)")
	tlsOpts := tlsflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *name == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "presence-server: --name is required and there are no arguments")
		return 2
	}
	if *clockRate < 0 || *clockRate > 10 {
		fmt.Fprintln(stderr, "presence-server: --clock-rate must be from 0 to 10")
		return 2
	}
	src, err := tlsflags.Load(tlsOpts, fugetls.OwnerBase(*namespace, *name), "presence-server", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "presence-server: owner %s/%s: %v\n", *namespace, *name, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("server", *name)
	opts := options{history: *history, dial: tlsflags.DialOptions(src), migListen: *migListen, tls: src}
	if *clockRate != 1 {
		opts.clock = clientshell.NewRateClock(*clockRate)
		log.Warn("the lease clock runs at a test rate", "rate", *clockRate)
	}
	if err := serve(ctx, log, *name, *listen, strings.Split(*managers, ","), *namespace, *leaseDur, opts); err != nil {
		log.Error("presence-server failed", "err", err)
		return 1
	}
	return 0
}

// options are the connection and fault-testing settings.
type options struct {
	dial    []grpc.DialOption // to the managers (TLS)
	history string            // file to append served requests to
	clock   ownerguard.Clock  // nil: the default clock
	// migListen is where to serve MigrationService ("" off), with tls
	// (nil: plaintext, as with --insecure).
	migListen string
	tls       *fugetls.Source
}

func serve(ctx context.Context, log *slog.Logger, name, listen string, managers []string, ns string, leaseDur time.Duration, opts options) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var srv *presence.Server
	var mig *ownerguard.MigrationConfig
	if opts.migListen != "" {
		mln, err := net.Listen("tcp", opts.migListen)
		if err != nil {
			ln.Close()
			return err
		}
		// srv is set before Start: nothing migrates earlier.
		mig = &ownerguard.MigrationConfig{Migrator: migrator{&srv}, Listener: mln, TLS: opts.tls}
	}
	owner, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Migration: mig,
		Managers:  managers, Namespace: ns, Name: name, Addr: ln.Addr().String(),
		LeaseDuration: leaseDur, Logger: log, Clock: opts.clock, DialOptions: opts.dial,
		OnOwnership: func(granted, revoked []ring.Range) {
			dropped := srv.Drop(revoked)
			log.Info("ownership changed", "granted", len(granted), "revoked", len(revoked),
				"devices_dropped", dropped, "devices_held", srv.Len())
		},
	})
	if err != nil {
		ln.Close()
		if mig != nil {
			mig.Listener.Close()
		}
		return err
	}
	srv = presence.NewServer(owner)
	guard, err := ownerguard.NewGuard(owner, ownerguard.GuardConfig{Name: name})
	if err != nil {
		ln.Close()
		return err
	}
	if err := owner.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	var h http.Handler
	if opts.history != "" {
		f, err := os.OpenFile(opts.history, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			ln.Close()
			owner.Close()
			return err
		}
		defer f.Close()
		h = presence.RecordHistory(f, guard, srv)
	} else {
		h = guard.HTTP(srv)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "managers", strings.Join(managers, ","), "namespace", ns)

	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("stopping")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = hs.Shutdown(sctx)
		cancel()
	}
	owner.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// migrator hands the Owner's migration upcalls to the server, which is
// made after the Owner.
type migrator struct{ srv **presence.Server }

func (m migrator) Export(ctx context.Context, r ring.Range, g lease.Gen, w io.Writer) error {
	return (*m.srv).Export(ctx, r, g, w)
}

func (m migrator) Import(ctx context.Context, r ring.Range, g lease.Gen, rd io.Reader) error {
	return (*m.srv).Import(ctx, r, g, rd)
}
