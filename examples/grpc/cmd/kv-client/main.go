// Command kv-client reads and writes the proxyless gRPC key-value example:
// it dials xds:///<namespace>, so grpc-go's xDS client, configured by the
// manager, sends each key straight to the server that holds its lease.
//
//	kv-client -manager 127.0.0.1:7401 put alice 'hello'
//	kv-client -manager 127.0.0.1:7401 get alice
//	kv-client -manager 127.0.0.1:7401 -print-bootstrap > bootstrap.json
//
// Its xDS stream to the managers is mutual TLS with the proxy certificate in
// --tls-dir (default fuge-certs, as fugectl certs init writes it), or
// --tls-ca, --tls-cert and --tls-key; --insecure for managers run with
// --insecure. The paths go into the bootstrap as absolute paths.
//
// It prints the value (get) and, on stderr, which server answered under
// which lease generation. A call refused as misdirected while a range
// changes hands is tried again until -timeout. Exit 1 means the call failed
// (a get of a missing key prints "not found"), 2 a bad command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/examples/grpc/kv"
	"github.com/fuge-project/fuge/examples/internal/tlsflags"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/ownerguard"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kv-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	managers := fs.String("manager", "127.0.0.1:7401", "comma-separated gRPC addresses of the managers (xDS servers)")
	namespace := fs.String("namespace", "default", "the namespace: the client dials xds:///<namespace>")
	node := fs.String("node", "kv-client", "the xDS node id")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	printBootstrap := fs.Bool("print-bootstrap", false, "print the grpc-go xDS bootstrap and exit")
	tlsOpts := tlsflags.Register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kv-client [flags] get KEY | put KEY VALUE | -print-bootstrap")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ms := strings.Split(*managers, ",")
	files, err := xdsFiles(tlsOpts, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "kv-client:", err)
		return 2
	}
	if *printBootstrap {
		b, err := kv.Bootstrap(ms, *namespace, *node, files)
		if err != nil {
			fmt.Fprintln(stderr, "kv-client:", err)
			return 2
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	a := fs.Args()
	if !(len(a) == 2 && a[0] == "get" || len(a) == 3 && a[0] == "put") {
		fs.Usage()
		return 2
	}
	cc, err := kv.Dial(ms, *namespace, *node, files)
	if err != nil {
		fmt.Fprintln(stderr, "kv-client:", err)
		return 1
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var hdr metadata.MD
	var val []byte
	err = retry(ctx, func() error {
		if a[0] == "get" {
			val, err = kv.Get(ctx, cc, a[1], grpc.Header(&hdr))
			return err
		}
		return kv.Put(ctx, cc, a[1], []byte(a[2]), grpc.Header(&hdr))
	})
	if status.Code(err) == codes.NotFound {
		fmt.Fprintln(stderr, "not found")
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "kv-client:", err)
		return 1
	}
	fmt.Fprintf(stderr, "served by %s under generation %s\n", first(hdr, "fuge-owner"), first(hdr, "fuge-generation"))
	if a[0] == "get" {
		fmt.Fprintf(stdout, "%s\n", val)
	}
	return 0
}

// xdsFiles are the proxy certificate's files for the xDS channel, as
// absolute paths, checked to load; nil with --insecure.
func xdsFiles(o *fugetls.Options, stderr io.Writer) (*fugetls.Files, error) {
	src, err := tlsflags.Load(o, fugetls.ProxyBase, "kv-client", stderr)
	if err != nil || src == nil {
		return nil, err
	}
	f, err := o.Files(fugetls.ProxyBase)
	if err != nil {
		return nil, err
	}
	for _, p := range []*string{&f.CA, &f.Cert, &f.Key} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	return &f, nil
}

// retry calls fn until it succeeds, fails with anything but a misdirected
// call (the route's retries did not outlast the handoff), or ctx ends.
func retry(ctx context.Context, fn func() error) error {
	backoff := 10 * time.Millisecond
	for {
		err := fn()
		if !ownerguard.IsMisdirected(err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return "?"
}
