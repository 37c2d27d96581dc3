package fugetls

import "fmt"

// DefaultDir is where every binary looks for its certificates unless told
// otherwise: the directory `fugectl certs init` writes by default.
const DefaultDir = "fuge-certs"

// Options are the TLS settings every binary takes, under the same names:
//
//	--tls-dir DIR        a directory as fugectl certs init writes it (default fuge-certs)
//	--tls-ca, --tls-cert, --tls-key FILE   single files instead (all three)
//	--insecure           no TLS and no authentication (tests only; says so loudly)
type Options struct {
	Dir           string
	CA, Cert, Key string
	Insecure      bool
}

// Files resolves the files of a process whose certificate in Dir has the
// given base (ManagerBase, ProxyBase, AdminBase, OwnerBase(ns, name)).
func (o Options) Files(base string) (Files, error) {
	n := 0
	for _, f := range []string{o.CA, o.Cert, o.Key} {
		if f != "" {
			n++
		}
	}
	switch {
	case n == 3:
		return Files{CA: o.CA, Cert: o.Cert, Key: o.Key}, nil
	case n != 0:
		return Files{}, fmt.Errorf("%w: --tls-ca, --tls-cert and --tls-key go together", ErrFiles)
	}
	dir := o.Dir
	if dir == "" {
		dir = DefaultDir
	}
	return DirFiles(dir, base), nil
}

// Source loads the files for base; nil and no error when Insecure.
func (o Options) Source(base string) (*Source, error) {
	if o.Insecure {
		return nil, nil
	}
	f, err := o.Files(base)
	if err != nil {
		return nil, err
	}
	s, err := NewSource(f)
	if err != nil {
		return nil, fmt.Errorf("%w (or run with --insecure, for tests only)", err)
	}
	return s, nil
}

// InsecureWarning is what a binary prints to standard error when it runs
// with --insecure.
func InsecureWarning(binary string) string {
	return "WARNING: " + binary + " --insecure: no TLS and no authentication on any port: anyone who can reach them can take leases, read the table and change the cluster. For tests only."
}
