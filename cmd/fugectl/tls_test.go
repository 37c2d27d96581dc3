package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuge-project/fuge/fugetls"
)

// TestTLSPresentsAdmin: every request goes over https with the admin
// certificate of --tls-dir, wherever the TLS settings come from.
func TestTLSPresentsAdmin(t *testing.T) {
	m := newFakeManager(t, cannedAPI())
	files := fugetls.DirFiles(testCerts, fugetls.AdminBase)
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"env dir", nil, nil},
		{"flag dir", map[string]string{tlsDirEnv: "/nonexistent"}, []string{"--tls-dir", testCerts}},
		{"flag dir after the command", map[string]string{tlsDirEnv: "/nonexistent"}, []string{"namespaces", "--tls-dir=" + testCerts}},
		{"files", map[string]string{tlsDirEnv: "/nonexistent"}, []string{"--tls-ca", files.CA, "--tls-cert", files.Cert, "--tls-key", files.Key}},
		{"env files", map[string]string{tlsDirEnv: "/nonexistent", tlsCAEnv: files.CA, tlsCertEnv: files.Cert, tlsKeyEnv: files.Key}, nil},
		{"https URL", nil, []string{"--manager", "https://" + m.addr()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(m.who())
			args := append([]string{"--manager", m.addr()}, c.args...)
			if !slices.Contains(args, "namespaces") {
				args = append(args, "namespaces")
			}
			code, out, errOut := fugectl(t, c.env, args...)
			if code != exitOK || errOut != "" || !strings.Contains(out, "default") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the namespaces", code, out, errOut)
			}
			if who := m.who()[before:]; !slices.Equal(who, []string{"spiffe://fuge/admin/fugectl"}) {
				t.Errorf("the manager saw callers %q, want the admin certificate", who)
			}
		})
	}
}

// TestTLSMissingFiles: without certificates fugectl says which file is
// missing and how to make a set, and sends nothing.
func TestTLSMissingFiles(t *testing.T) {
	m := newFakeManager(t, cannedAPI())
	empty := t.TempDir()
	partial := t.TempDir()
	for _, f := range []string{"ca.crt", "admin.crt"} {
		b, err := os.ReadFile(filepath.Join(testCerts, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(partial, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		env     map[string]string
		missing string
	}{
		{"empty dir", map[string]string{tlsDirEnv: empty}, filepath.Join(empty, "ca.crt")},
		{"no key", map[string]string{tlsDirEnv: partial}, filepath.Join(partial, "admin.key")},
		{"default dir", map[string]string{tlsDirEnv: ""}, filepath.Join(fugetls.DefaultDir, "ca.crt")},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := fugectl(t, c.env, "--manager", m.addr(), "status")
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", code, out, exitUsage)
			}
			for _, w := range []string{c.missing + " does not exist", "fugectl certs init", "admin certificate"} {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
	if n := len(m.requests()); n != 0 {
		t.Errorf("the manager saw %d requests, want none", n)
	}
}

// TestTLSInsecure: --insecure (or FUGECTL_INSECURE) speaks plain http to
// a manager run with --insecure, and warns.
func TestTLSInsecure(t *testing.T) {
	m := newPlainFakeManager(t, cannedAPI(), nil)
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", map[string]string{tlsDirEnv: "/nonexistent"}, []string{"--insecure"}},
		{"flag after", nil, []string{"namespaces", "--insecure"}},
		{"env", map[string]string{insecureEnv: "true"}, nil},
		{"http URL", map[string]string{insecureEnv: "true"}, []string{"--manager", "http://" + m.addr()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--manager", m.addr()}, c.args...)
			if !slices.Contains(args, "namespaces") {
				args = append(args, "namespaces")
			}
			code, out, errOut := fugectl(t, c.env, args...)
			if code != exitOK || !strings.Contains(out, "default") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the namespaces", code, out, errOut)
			}
			if errOut != insecureWarning+"\n" {
				t.Errorf("stderr %q, want the warning", errOut)
			}
		})
	}
}

// TestTLSMismatch: the errors a person sees when fugectl and the manager
// disagree about TLS, or the settings do not make sense.
func TestTLSMismatch(t *testing.T) {
	tlsM := newFakeManager(t, cannedAPI())
	plainM := newPlainFakeManager(t, cannedAPI(), nil)
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want []string
	}{
		{"TLS to plain", nil, []string{"--manager", plainM.addr(), "namespaces"}, exitError,
			[]string{"no manager reachable", "server gave HTTP response to HTTPS client"}},
		{"plain to TLS", nil, []string{"--insecure", "--manager", tlsM.addr(), "namespaces"}, exitError,
			[]string{"HTTP request to an HTTPS server"}},
		{"http URL with TLS", nil, []string{"--manager", "http://" + tlsM.addr(), "namespaces"}, exitUsage,
			[]string{"--manager", "speaks https", "--insecure"}},
		{"https URL without", nil, []string{"--insecure", "--manager", "https://" + tlsM.addr(), "namespaces"}, exitUsage,
			[]string{"--manager", "speaks http"}},
		{"some files", nil, []string{"--manager", tlsM.addr(), "--tls-cert", "x.crt", "namespaces"}, exitUsage,
			[]string{"--tls-ca, --tls-cert and --tls-key go together"}},
		{"bad env", map[string]string{insecureEnv: "yes please"}, []string{"--manager", tlsM.addr(), "namespaces"}, exitUsage,
			[]string{insecureEnv, "true or false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := fugectl(t, c.env, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", code, c.code, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
	if n := len(plainM.requests()); n != 0 {
		t.Errorf("the plain manager saw %d requests, want none", n)
	}
}

// TestUnauthorized: the manager's 401 and 403 messages reach the person.
func TestUnauthorized(t *testing.T) {
	m := newFakeManager(t, map[string]answer{
		"GET /v1/namespaces":  {401, `{"error":"manager: this request needs a client certificate issued by the cluster's CA (fugectl --tls-dir DIR; make one with fugectl certs init DIR)"}`},
		"POST /v1/namespaces": {403, `{"error":"manager: spiffe://fuge/proxy/proxy may not change the cluster: this request needs an admin certificate"}`},
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"namespaces"}, "fugectl: manager: this request needs a client certificate issued by the cluster's CA (fugectl --tls-dir DIR; make one with fugectl certs init DIR)\n"},
		{[]string{"namespaces", "create", "x"}, "fugectl: manager: spiffe://fuge/proxy/proxy may not change the cluster: this request needs an admin certificate\n"},
	} {
		code, out, errOut := fugectl(t, nil, append([]string{"--manager", m.addr()}, c.args...)...)
		if code != exitError || out != "" || errOut != c.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1, nothing, %q", c.args, code, out, errOut, c.want)
		}
	}
}
