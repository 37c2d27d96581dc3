package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/fuge-project/fuge/fugetls"
)

// The environment variables of the TLS flags, which the flags override.
const (
	tlsDirEnv   = "FUGECTL_TLS_DIR"
	tlsCAEnv    = "FUGECTL_TLS_CA"
	tlsCertEnv  = "FUGECTL_TLS_CERT"
	tlsKeyEnv   = "FUGECTL_TLS_KEY"
	insecureEnv = "FUGECTL_INSECURE"
)

// insecureWarning is printed to standard error by every command that talks
// to a manager with --insecure.
const insecureWarning = "fugectl: warning: --insecure: plain http and no certificate; only a manager run with --insecure answers (tests only)"

// tlsFromEnv reads the TLS options' defaults from the environment; an
// empty variable counts as unset.
func tlsFromEnv(getenv func(string) string) (fugetls.Options, error) {
	o := fugetls.Options{Dir: getenv(tlsDirEnv), CA: getenv(tlsCAEnv), Cert: getenv(tlsCertEnv), Key: getenv(tlsKeyEnv)}
	if o.Dir == "" {
		o.Dir = fugetls.DefaultDir
	}
	if v := getenv(insecureEnv); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, usagef("%s=%q: want true or false", insecureEnv, v)
		}
		o.Insecure = b
	}
	return o, nil
}

// registerTLS adds --tls-dir, --tls-ca, --tls-cert, --tls-key and
// --insecure, the names every Fuge binary uses.
func registerTLS(fs *flag.FlagSet, o *fugetls.Options) {
	fs.StringVar(&o.Dir, "tls-dir", o.Dir, "")
	fs.StringVar(&o.CA, "tls-ca", o.CA, "")
	fs.StringVar(&o.Cert, "tls-cert", o.Cert, "")
	fs.StringVar(&o.Key, "tls-key", o.Key, "")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "")
}

// certError is a certificate set that does not load: a bad setup rather
// than a bad command line, so fugectl prints it without pointing at
// --help.
type certError struct{ error }

func (e certError) Unwrap() error { return e.error }

// tlsFiles resolves the files of base, checking that --tls-ca, --tls-cert
// and --tls-key come together.
func tlsFiles(o fugetls.Options, base string) (fugetls.Files, error) {
	f, err := o.Files(base)
	if err != nil {
		return f, usagef("%v", strings.TrimPrefix(err.Error(), fugetls.ErrFiles.Error()+": "))
	}
	return f, nil
}

// loadTLS loads the certificate of base (what names it for a person); nil
// with --insecure. A missing file is named, with how to make one.
func loadTLS(o fugetls.Options, base, what string) (*fugetls.Source, error) {
	if o.Insecure {
		return nil, nil
	}
	f, err := tlsFiles(o, base)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return nil, certError{fmt.Errorf("%[1]s does not exist: fugectl needs the cluster's CA and %[2]s (%[3]s, %[4]s, %[5]s).\n"+
				"  Make a set with 'fugectl certs init %[6]s' (and start the managers with --tls-dir %[6]s),\n"+
				"  or name yours with --tls-dir DIR (env %[7]s) or --tls-ca, --tls-cert and --tls-key;\n"+
				"  --insecure only reaches a manager run with --insecure", p, what, f.CA, f.Cert, f.Key, dirOf(o), tlsDirEnv)}
		}
	}
	src, err := fugetls.NewSource(f)
	if err != nil {
		return nil, certError{err}
	}
	return src, nil
}

// dirOf is the certificate directory the options name.
func dirOf(o fugetls.Options) string {
	if o.Dir == "" {
		return fugetls.DefaultDir
	}
	return o.Dir
}

// listFlag is a repeatable flag; each use may also hold a comma-separated
// list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
