package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fuge-project/fuge/fugetls"
)

// certsFlagSet registers the flags of certs init and certs issue.
func certsFlagSet(fs *flag.FlagSet, f *cmdFlags) {
	fs.Var(&f.hosts, "host", "")
	fs.Var(&f.owners, "owner", "")
	fs.StringVar(&f.proxyName, "proxy", "", "")
	fs.StringVar(&f.adminName, "admin", "", "")
	fs.StringVar(&f.managerName, "manager", "", "")
}

// certsInit writes a development CA and the certificates of a cluster on
// one trust domain (fugetls.InitDir), and lists them.
func (c *cli) certsInit(_ context.Context, args []string) error {
	dir := args[0]
	if c.flags.proxyName != "" || c.flags.adminName != "" || c.flags.managerName != "" {
		return usagef("certs init writes one proxy, admin and manager certificate of its own; issue others with certs issue")
	}
	hosts, err := checkHosts(c.flags.hosts)
	if err != nil {
		return err
	}
	var owners []fugetls.ID
	bases := []string{fugetls.ManagerBase, fugetls.ProxyBase, fugetls.AdminBase}
	for _, o := range c.flags.owners {
		id, err := parseOwner(o)
		if err != nil {
			return err
		}
		owners = append(owners, id)
		bases = append(bases, fugetls.OwnerBase(id.Namespace, id.Name))
	}
	// fugetls.InitDir refuses an existing CA; refuse any file it would
	// replace, so that a directory is never half from another CA.
	for _, b := range append([]string{"ca"}, bases...) {
		for _, ext := range []string{".crt", ".key"} {
			if p := filepath.Join(dir, b+ext); exists(p) {
				return fmt.Errorf("%s exists: certs init never overwrites (issue single certificates with fugectl certs issue %s)", p, dir)
			}
		}
	}
	if err := fugetls.InitDir(dir, fugetls.InitOptions{Hosts: hosts, Owners: owners, Now: c.now()}); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "wrote a development CA and %d certificates into %s:\n\n", len(bases), dir)
	if err := c.certTable(dir, bases); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\nca.key issues identities (certs issue): keep it away from the servers in production.\n"+
		"Give every process the directory: fuge-manager, fuge-proxy, owners and fugectl take --tls-dir %s\n"+
		"(fugectl also FUGECTL_TLS_DIR); each owner loads owner-<namespace>-<name>.crt.\n", dir)
	return nil
}

// certsIssue signs one certificate with the CA in DIR.
func (c *cli) certsIssue(_ context.Context, args []string) error {
	dir := args[0]
	f := c.flags
	var id fugetls.ID
	var base string
	n := 0
	if len(f.owners) > 0 {
		n += len(f.owners)
		if len(f.owners) == 1 {
			var err error
			if id, err = parseOwner(f.owners[0]); err != nil {
				return err
			}
			base = fugetls.OwnerBase(id.Namespace, id.Name)
		}
	}
	for _, r := range []struct {
		name, base string
		id         func(string) fugetls.ID
	}{
		{f.proxyName, fugetls.ProxyBase, fugetls.ProxyID},
		{f.adminName, fugetls.AdminBase, fugetls.AdminID},
		{f.managerName, fugetls.ManagerBase, fugetls.ManagerID},
	} {
		if r.name != "" {
			n++
			id, base = r.id(r.name), r.base
		}
	}
	if n != 1 {
		return usagef("certs issue: give exactly one of --owner NS/NAME, --proxy NAME, --admin NAME, --manager NAME")
	}
	if err := id.Validate(); err != nil {
		return usagef("certs issue: %v", err)
	}
	if len(f.hosts) > 0 && id.Role != fugetls.RoleManager {
		return usagef("certs issue: --host is for --manager (only managers' certificates carry host names)")
	}
	hosts, err := checkHosts(f.hosts)
	if err != nil {
		return err
	}
	crt := filepath.Join(dir, base+".crt")
	old, _ := readCert(crt)
	if err := fugetls.Issue(dir, base, id, hosts, c.now()); err != nil {
		if errors.Is(err, fugetls.ErrFiles) && !exists(filepath.Join(dir, "ca.key")) {
			return fmt.Errorf("%s holds no CA (ca.crt and ca.key): make one with fugectl certs init %[1]s", dir)
		}
		return err
	}
	verb := "wrote"
	if old != nil {
		verb = "replaced " + certID(old) + " with"
	}
	fmt.Fprintf(c.out, "%s %s:\n\n", verb, id)
	if err := c.certTable(dir, []string{base}); err != nil {
		return err
	}
	if old != nil {
		fmt.Fprintln(c.out, "\nProcesses using the old files load the new ones at their next TLS handshake.")
	}
	return nil
}

// certTable lists the certificates of bases in dir, read back from the
// files.
func (c *cli) certTable(dir string, bases []string) error {
	t := c.table("CERTIFICATE", "KEY", "IDENTITY", "HOSTS", "EXPIRES")
	for _, b := range append([]string{"ca"}, bases...) {
		crt := filepath.Join(dir, b+".crt")
		cert, err := readCert(crt)
		if err != nil {
			return err
		}
		id, hosts := certID(cert), strings.Join(cert.DNSNames, ",")
		for _, ip := range cert.IPAddresses {
			hosts = strings.TrimPrefix(hosts+","+ip.String(), ",")
		}
		if cert.IsCA {
			id = "the CA: " + cert.Subject.CommonName
		}
		t.row(crt, filepath.Join(dir, b+".key"), id, hosts, cert.NotAfter.UTC().Format(time.DateOnly))
	}
	return t.flush()
}

// readCert reads the first certificate of a PEM file.
func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return x509.ParseCertificate(blk.Bytes)
}

// certID is a certificate's Fuge ID, or its subject if it names none.
func certID(cert *x509.Certificate) string {
	if len(cert.URIs) == 1 {
		return cert.URIs[0].String()
	}
	return cert.Subject.String()
}

// parseOwner reads NS/NAME.
func parseOwner(s string) (fugetls.ID, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return fugetls.ID{}, usagef("--owner %q: want NAMESPACE/NAME", s)
	}
	id := fugetls.OwnerID(ns, name)
	if err := id.Validate(); err != nil {
		return id, usagef("--owner %q: %v", s, err)
	}
	return id, nil
}

// checkHosts checks --host values: IP addresses or DNS names (a leading
// "*." allowed), not HOST:PORT.
func checkHosts(hosts []string) ([]string, error) {
	for _, h := range hosts {
		if net.ParseIP(h) != nil {
			continue
		}
		if !validDNSName(strings.TrimPrefix(h, "*.")) {
			return nil, usagef("--host %q: want a DNS name or an IP address (no port)", h)
		}
	}
	return hosts, nil
}

func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
