package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
)

// loadID loads the set of base in dir as a process would, and returns
// the identity it presents.
func loadID(t *testing.T, dir, base string) fugetls.ID {
	t.Helper()
	s, err := fugetls.NewSource(fugetls.DirFiles(dir, base))
	if err != nil {
		t.Fatalf("%s in %s does not load: %v", base, dir, err)
	}
	return s.ID()
}

func TestCertsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "certs")
	code, out, errOut := fugectl(t, nil, "certs", "init", dir, "--owner", "default/p1", "--owner=default/p2,carts/c-1", "--host", "m1.example", "--host", "10.0.0.7")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for base, want := range map[string]fugetls.ID{
		fugetls.ManagerBase:                fugetls.ManagerID("manager"),
		fugetls.ProxyBase:                  fugetls.ProxyID("proxy"),
		fugetls.AdminBase:                  fugetls.AdminID("fugectl"),
		fugetls.OwnerBase("default", "p1"): fugetls.OwnerID("default", "p1"),
		fugetls.OwnerBase("default", "p2"): fugetls.OwnerID("default", "p2"),
		fugetls.OwnerBase("carts", "c-1"):  fugetls.OwnerID("carts", "c-1"),
	} {
		if got := loadID(t, dir, base); got != want {
			t.Errorf("%s.crt names %v, want %v", base, got, want)
		}
		if !strings.Contains(out, filepath.Join(dir, base+".crt")) || !strings.Contains(out, want.String()) {
			t.Errorf("the listing does not show %s as %v:\n%s", base, want, out)
		}
	}
	m, err := readCert(filepath.Join(dir, "manager.crt"))
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range m.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Contains(m.DNSNames, "m1.example") || !slices.Contains(ips, "10.0.0.7") || !slices.Contains(ips, "127.0.0.1") {
		t.Errorf("manager.crt hosts %v %v, want m1.example and 10.0.0.7", m.DNSNames, m.IPAddresses)
	}
	if !strings.Contains(out, "--tls-dir "+dir) {
		t.Errorf("the listing does not say how to use the directory:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v, %v; want mode 0600", fi, err)
	}

	// Never over an existing set, nor over a single file of another.
	before, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	code, _, errOut = fugectl(t, nil, "certs", "init", dir)
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); code != exitError || !strings.Contains(errOut, "never overwrites") || string(after) != string(before) {
		t.Errorf("init over a set: exit %d, stderr %q, CA changed %v; want 1, a refusal, the CA kept", code, errOut, string(after) != string(before))
	}
	stray := t.TempDir()
	if err := os.WriteFile(filepath.Join(stray, "owner-default-p1.key"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = fugectl(t, nil, "certs", "init", stray, "--owner", "default/p1")
	if code != exitError || !strings.Contains(errOut, "owner-default-p1.key exists") {
		t.Errorf("init over a stray key: exit %d, stderr %q; want 1 naming the file", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(stray, "ca.crt")); err == nil {
		t.Error("a refused init wrote a CA")
	}
}

func TestCertsIssue(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := fugectl(t, nil, "certs", "init", dir); code != exitOK {
		t.Fatalf("init: exit %d, stderr %q", code, errOut)
	}
	for _, c := range []struct {
		args     []string
		base     string
		want     fugetls.ID
		replaced string // the old ID, when a file is replaced
	}{
		{[]string{"--owner", "default/p9"}, "owner-default-p9", fugetls.OwnerID("default", "p9"), ""},
		{[]string{"--proxy", "edge-1"}, "proxy", fugetls.ProxyID("edge-1"), "spiffe://fuge/proxy/proxy"},
		{[]string{"--admin", "alice"}, "admin", fugetls.AdminID("alice"), "spiffe://fuge/admin/fugectl"},
		{[]string{"--manager", "n2", "--host", "n2.example"}, "manager", fugetls.ManagerID("n2"), "spiffe://fuge/manager/manager"},
	} {
		t.Run(c.base, func(t *testing.T) {
			code, out, errOut := fugectl(t, nil, append([]string{"certs", "issue", dir}, c.args...)...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if got := loadID(t, dir, c.base); got != c.want {
				t.Errorf("%s.crt names %v, want %v", c.base, got, c.want)
			}
			first, _, _ := strings.Cut(out, "\n")
			if c.replaced == "" && first != "wrote "+c.want.String()+":" ||
				c.replaced != "" && first != "replaced "+c.replaced+" with "+c.want.String()+":" {
				t.Errorf("first line %q, want wrote or replaced %s", first, c.want)
			}
		})
	}
	m, err := readCert(filepath.Join(dir, "manager.crt"))
	if err != nil || !slices.Contains(m.DNSNames, "n2.example") || !slices.Contains(m.DNSNames, "localhost") {
		t.Errorf("manager.crt hosts %v (%v), want n2.example and localhost", m.DNSNames, err)
	}
}

func TestCertsErrors(t *testing.T) {
	dir, noCA := t.TempDir(), t.TempDir()
	if code, _, errOut := fugectl(t, nil, "certs", "init", dir); code != exitOK {
		t.Fatalf("init: exit %d, stderr %q", code, errOut)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"certs"}, exitUsage, "certs needs one of: init, issue"},
		{"no dir", []string{"certs", "init"}, exitUsage, "usage: fugectl certs init DIR"},
		{"owner without name", []string{"certs", "init", t.TempDir(), "--owner", "default"}, exitUsage, "NAMESPACE/NAME"},
		{"owner with two slashes", []string{"certs", "init", t.TempDir(), "--owner", "a/b/c"}, exitUsage, "NAMESPACE/NAME"},
		{"owner bad name", []string{"certs", "init", t.TempDir(), "--owner", "a/b c"}, exitUsage, `"a/b c"`},
		{"host with port", []string{"certs", "init", t.TempDir(), "--host", "m1:7401"}, exitUsage, "no port"},
		{"init proxy", []string{"certs", "init", t.TempDir(), "--proxy", "x"}, exitUsage, "certs issue"},
		{"issue nothing", []string{"certs", "issue", dir}, exitUsage, "exactly one"},
		{"issue two", []string{"certs", "issue", dir, "--proxy", "a", "--admin", "b"}, exitUsage, "exactly one"},
		{"issue two owners", []string{"certs", "issue", dir, "--owner", "a/b", "--owner", "a/c"}, exitUsage, "exactly one"},
		{"issue host for owner", []string{"certs", "issue", dir, "--owner", "a/b", "--host", "x"}, exitUsage, "--host is for --manager"},
		{"issue bad name", []string{"certs", "issue", dir, "--admin", "a/b"}, exitUsage, "admin name"},
		{"issue without CA", []string{"certs", "issue", noCA, "--proxy", "p"}, exitError, "fugectl certs init " + noCA},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := fugectl(t, nil, c.args...)
			if code != c.code || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errOut, c.code, c.want)
			}
		})
	}
}

// TestCertsNeedNoCertificates: certs commands run where no certificate
// exists yet, and talk to no manager.
func TestCertsNeedNoCertificates(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{tlsDirEnv: filepath.Join(dir, "missing"), "FUGE_MANAGER": fugetest.RefusedAddr(t)}
	if code, _, errOut := fugectl(t, env, "certs", "init", filepath.Join(dir, "c")); code != exitOK || errOut != "" {
		t.Errorf("init: exit %d, stderr %q", code, errOut)
	}
}
