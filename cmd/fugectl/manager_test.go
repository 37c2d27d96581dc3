package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/manager"
)

// insecure is the environment of fugectl for a manager without TLS.
var insecure = map[string]string{insecureEnv: "true"}

// startManager starts a real single-node manager on 127.0.0.1 with fast raft
// timers and waits until its admin API lists the namespace "default". With
// env[FUGECTL_TLS_DIR] it runs with mutual TLS and that directory's
// manager certificate; with env[FUGECTL_INSECURE], without TLS.
func startManager(t *testing.T, env map[string]string) string {
	t.Helper()
	cfg := manager.DefaultServerConfig()
	if dir := env[tlsDirEnv]; dir != "" {
		src, err := fugetls.NewSource(fugetls.DirFiles(dir, fugetls.ManagerBase))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = src
	}
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr, cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.LeaseDuration = 3 * time.Second
	cfg.RaftHeartbeatTimeout, cfg.RaftElectionTimeout, cfg.RaftLeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	cfg.Namespaces = []manager.NamespaceConfig{{Name: "default", RingSize: 64}}
	s, err := manager.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	})
	_, _, addr := s.Addrs()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond) // polling interval, not a guess at how long
	defer tick.Stop()
	for {
		code, out, _ := fugectl(t, env, "--manager", addr, "namespaces")
		if code == exitOK && strings.Contains(out, "default") {
			return addr
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the manager at %s never listed namespace default (last: exit %d, %q)", addr, code, out)
		case <-tick.C:
		}
	}
}

// TestAgainstManager runs the commands against a real manager.Server, so
// that the JSON shapes fugectl expects are the ones the manager sends:
// over mutual TLS with the admin certificate, and with --insecure.
func TestAgainstManager(t *testing.T) {
	t.Run("TLS", func(t *testing.T) { againstManager(t, map[string]string{tlsDirEnv: testCerts}) })
	t.Run("insecure", func(t *testing.T) { againstManager(t, insecure) })
}

func againstManager(t *testing.T, env map[string]string) {
	addr := startManager(t, env)
	for _, c := range []struct {
		args     []string
		wantCode int
		want     []string // lines (after collapsing spaces) the output must contain
	}{
		{[]string{"cluster"}, exitOK, []string{"role leader", "leader node1", "ID ADDRESS SUFFRAGE LEADER", "Voter yes"}},
		{[]string{"namespaces", "create", "carts", "--ring-size", "8", "--header", "X-Cart", "--lease-duration", "2s"}, exitOK,
			[]string{"NAME RING SIZE HEADER LEASE", "carts 8 X-Cart 2s"}},
		{[]string{"namespaces"}, exitOK, []string{"carts 8 X-Cart 2s", "default 64 X-Fuge-Key 3s"}},
		{[]string{"status"}, exitOK, []string{"NODE ROLE LEADER TERM LAST INDEX COMMIT INDEX",
			"NAMESPACE RING SIZE LEASE OWNERS GRANTED RECALLING FREE", "carts 8 2s 0 0 0 1", "default 64 3s 0 0 0 1"}},
		{[]string{"owners", "default"}, exitOK, []string{"NAME ADDRESS VNODES DRAINING LAST HEARD"}},
		{[]string{"leases", "default"}, exitOK, []string{"START END OWNER GENERATION STATE EXPIRES"}},
		{[]string{"ring", "default"}, exitOK, []string{"POSITION OWNER INDEX"}},
		{[]string{"namespaces", "create", "carts"}, exitError, []string{"fugectl: manager: namespace exists"}},
		{[]string{"drain", "default", "nobody"}, exitError, []string{"fugectl: manager: unknown owner"}},
		{[]string{"leases", "nope"}, exitError, []string{"fugectl: manager: unknown namespace"}},
		{[]string{"namespaces", "create", "odd", "--ring-size", "12"}, exitError, []string{"fugectl: manager: bad request"}},
		{[]string{"namespaces", "delete", "carts"}, exitOK, []string{"namespace carts deleted"}},
		{[]string{"namespaces", "delete", "carts"}, exitError, []string{"fugectl: manager: unknown namespace"}},
		{[]string{"-o", "json", "namespaces"}, exitOK, []string{`"name": "default",`, `"ring_size": 64,`}},
	} {
		code, out, errOut := fugectl(t, env, append([]string{"--manager", addr}, c.args...)...)
		all := collapse(out + errOut)
		if code != c.wantCode {
			t.Errorf("%q: exit %d, want %d; output:\n%s%s", c.args, code, c.wantCode, out, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(all, w) {
				t.Errorf("%q: output does not contain %q:\n%s%s", c.args, w, out, errOut)
			}
		}
	}
}

// collapse turns runs of spaces into one, so that checks do not depend on
// column widths.
func collapse(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// TestManagerRefusals: what a real manager with mutual TLS answers a
// certificate that may read but not write, and what fugectl shows of it.
func TestManagerRefusals(t *testing.T) {
	addr := startManager(t, map[string]string{tlsDirEnv: testCerts})
	proxy := fugetls.DirFiles(testCerts, fugetls.ProxyBase)
	asProxy := []string{"--manager", addr, "--tls-ca", proxy.CA, "--tls-cert", proxy.Cert, "--tls-key", proxy.Key}
	if code, out, errOut := fugectl(t, nil, append(asProxy, "namespaces")...); code != exitOK || !strings.Contains(out, "default") {
		t.Errorf("a read with a proxy certificate: exit %d, stdout %q, stderr %q; want the namespaces", code, out, errOut)
	}
	code, out, errOut := fugectl(t, nil, append(asProxy, "namespaces", "create", "carts")...)
	if code != exitError || out != "" || !strings.Contains(errOut, "spiffe://fuge/proxy/proxy") || !strings.Contains(errOut, "admin certificate") {
		t.Errorf("a write with a proxy certificate: exit %d, stdout %q, stderr %q; want 1 and the manager's refusal", code, out, errOut)
	}
	code, _, errOut = fugectl(t, nil, "--insecure", "--manager", addr, "namespaces")
	if code != exitError || !strings.Contains(errOut, "HTTPS server") {
		t.Errorf("--insecure against TLS: exit %d, stderr %q; want 1 and why", code, errOut)
	}
}
