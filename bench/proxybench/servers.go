package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// The harness runs its servers as processes of its own binary, so that they
// are pinned, measured and killed like the proxies:
//
//	proxybench backend  -listen A [-tls-listen B -certs DIR -owner NS/NAME]
//	proxybench presence -name N -listen A -history FILE
//
// backend is the throughput target: a fasthttp server answering every
// request with the same 64-byte body, plain on -listen and, with
// -tls-listen, mutual TLS with an owner's certificate (what fuge-proxy
// --backend-tls dials). It holds no lease itself: the harness's Owner
// sessions hold the leases for its address.
//
// presence is the presence example without Fuge: examples/presence's
// Server behind a guard whose Checker says every key is held, under one
// generation, for ever. That is how an in-memory service runs behind
// HAProxy, nginx or a round-robin balancer; the guard only stamps
// Fuge-Owner on answers and hands the server its handle. It writes the
// same history file as presence-server --history.

// body is the backend's answer: 64 bytes.
var body = []byte(strings.Repeat("0123456789abcdef", 3) + "fuge-proxybench\n")

func runBackend(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "plain HTTP address")
	tlsListen := fs.String("tls-listen", "", "mutual TLS address (empty: none)")
	certs := fs.String("certs", "", "certificate directory (with -tls-listen)")
	owner := fs.String("owner", "", "NS/NAME whose owner certificate the TLS port presents")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h := func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentTypeBytes(textPlain)
		ctx.Response.SetBodyRaw(body)
	}
	newServer := func() *fasthttp.Server {
		return &fasthttp.Server{Handler: h, NoDefaultServerHeader: true, NoDefaultDate: true, ReadTimeout: time.Minute, IdleTimeout: time.Minute}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- newServer().Serve(ln) }()
	if *tlsListen != "" {
		ns, name, ok := strings.Cut(*owner, "/")
		if !ok {
			return fmt.Errorf("-owner %q: want NS/NAME", *owner)
		}
		cfg, err := backendServerTLS(*certs, ns, name)
		if err != nil {
			return err
		}
		cfg.NextProtos = []string{"http/1.1"}
		tln, err := net.Listen("tcp", *tlsListen)
		if err != nil {
			return err
		}
		go func() { errc <- newServer().Serve(tls.NewListener(tln, cfg)) }()
	}
	return <-errc
}

var textPlain = []byte("text/plain")

// everything is a Checker under which every key is held, always, under
// generation 1: a server that knows of no lease.
type everything struct{}

func (everything) GetOwnershipHandle(k uint64) (ownerguard.Handle, bool) {
	return ownerguard.Handle{Key: k, Range: ring.Full(), Gen: 1}, true
}
func (everything) CheckContinuousOwnership(ownerguard.Handle) bool { return true }

func runPresence(args []string) error {
	fs := flag.NewFlagSet("presence", flag.ContinueOnError)
	name := fs.String("name", "", "server name, stamped as Fuge-Owner")
	listen := fs.String("listen", "127.0.0.1:0", "HTTP address")
	history := fs.String("history", "", "file to append served requests to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv := presence.NewServer(everything{})
	guard, err := ownerguard.NewGuard(everything{}, ownerguard.GuardConfig{Name: *name, Header: ownerguard.DefaultKeyHeader})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*history, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: presence.RecordHistory(f, guard, srv), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); hs.Close() }()
	if err := hs.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
