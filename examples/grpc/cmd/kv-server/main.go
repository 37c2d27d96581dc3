// Command kv-server runs one server of the proxyless gRPC key-value example:
// the kv service behind ownerguard's gRPC interceptor, holding the leases of
// its share of the keys.
//
//	kv-server -name s1 -listen 127.0.0.1:9101 -manager 127.0.0.1:7401
//
// It dials the managers with its owner certificate, owner-<namespace>-<name>
// in --tls-dir (default fuge-certs; fugectl certs init --owner NS/NAME makes
// it), since the manager gives a name's leases only to the holder of that
// name's certificate; --insecure for managers run with --insecure. Clients
// reach it in plaintext.
//
// It stops on SIGINT or SIGTERM: it stops serving, then ends its lease
// session so the manager can hand its ranges on at once. Exit 2 means a bad
// command line, 1 a failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/examples/grpc/kv"
	"github.com/fuge-project/fuge/examples/internal/tlsflags"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("kv-server", flag.ContinueOnError)
	name := fs.String("name", "", "the owner's stable name (its ring hash_key); required")
	listen := fs.String("listen", "127.0.0.1:9101", "gRPC address to serve on, advertised to clients")
	managers := fs.String("manager", "127.0.0.1:7401", "comma-separated gRPC addresses of the managers")
	namespace := fs.String("namespace", "default", "the namespace (pool) to join")
	leaseDur := fs.Duration("lease-duration", ownerguard.DefaultLeaseDuration, "lease T; must equal the namespace's")
	tlsOpts := tlsflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *name == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "kv-server: -name is required and there are no arguments")
		return 2
	}
	src, err := tlsflags.Load(tlsOpts, fugetls.OwnerBase(*namespace, *name), "kv-server", os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kv-server: owner %s/%s: %v\n", *namespace, *name, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("server", *name)
	if err := serve(log, *name, *listen, strings.Split(*managers, ","), *namespace, *leaseDur, tlsflags.DialOptions(src)); err != nil {
		log.Error("kv-server failed", "err", err)
		return 1
	}
	return 0
}

func serve(log *slog.Logger, name, listen string, managers []string, ns string, leaseDur time.Duration, dialOpts []grpc.DialOption) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var srv *kv.Server
	owner, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: managers, Namespace: ns, Name: name, Addr: ln.Addr().String(),
		LeaseDuration: leaseDur, Logger: log, DialOptions: dialOpts,
		OnOwnership: func(granted, revoked []ring.Range) {
			dropped := srv.Drop(revoked)
			log.Info("ownership changed", "granted", len(granted), "revoked", len(revoked),
				"values_dropped", dropped, "values_held", srv.Len())
		},
	})
	if err != nil {
		ln.Close()
		return err
	}
	srv = kv.NewServer(owner)
	guard, err := ownerguard.NewGuard(owner, ownerguard.GuardConfig{Name: name})
	if err != nil {
		ln.Close()
		return err
	}
	if err := owner.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(guard.UnaryServerInterceptor()))
	srv.Register(gs)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "managers", strings.Join(managers, ","), "namespace", ns)

	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("stopping")
		gs.GracefulStop()
	}
	owner.Close()
	return err
}
