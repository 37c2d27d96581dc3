// Package tlsflags gives the example programs the TLS flags every Fuge
// binary takes, under the same names: --tls-dir (default fuge-certs, as
// fugectl certs init writes it), --tls-ca, --tls-cert and --tls-key (single
// files instead), and --insecure (plaintext, for managers run with
// --insecure; tests only).
package tlsflags

import (
	"flag"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fuge-project/fuge/fugetls"
)

// Register adds the flags to fs and returns the options they set.
func Register(fs *flag.FlagSet) *fugetls.Options {
	o := &fugetls.Options{}
	fs.StringVar(&o.Dir, "tls-dir", fugetls.DefaultDir, "certificates as `fugectl certs init DIR` writes them (ca.crt and this program's .crt and .key)")
	fs.StringVar(&o.CA, "tls-ca", "", "the CA bundle (PEM) instead of --tls-dir; with --tls-cert and --tls-key")
	fs.StringVar(&o.Cert, "tls-cert", "", "this program's certificate instead of --tls-dir")
	fs.StringVar(&o.Key, "tls-key", "", "this program's private key instead of --tls-dir")
	fs.BoolVar(&o.Insecure, "insecure", false, "talk to the managers in plaintext with no certificate: only managers run with --insecure accept it (tests only)")
	return o
}

// Load loads the certificate of base (fugetls.OwnerBase, ProxyBase, ...);
// with --insecure it returns nil after writing a warning naming binary to
// w.
func Load(o *fugetls.Options, base, binary string, w io.Writer) (*fugetls.Source, error) {
	if o.Insecure {
		fmt.Fprintf(w, "WARNING: %s --insecure: plaintext to the managers, with no certificate; only managers run with --insecure accept it. For tests only.\n", binary)
		return nil, nil
	}
	return o.Source(base)
}

// DialOptions are the options of a gRPC client of the managers: mutual TLS
// with src's certificate, accepting only a manager's; plaintext when src
// is nil.
func DialOptions(src *fugetls.Source) []grpc.DialOption {
	if src == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig(fugetls.RoleManager)))}
}
