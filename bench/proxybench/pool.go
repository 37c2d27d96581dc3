package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ownerguard"
)

// The pool: one fuge-manager process, plain fasthttp backends, and in the
// harness the Owner sessions that hold the backends' addresses' leases.

// Namespaces of the manager: default routes to the backends' plain ports,
// tls to their TLS ports (fuge-proxy --backend-tls), presence to the
// presence servers of the churn test.
//
// default and tls, which the throughput, latency and ring-move sections
// measure, have fuge-manager's default lease duration: the renewals and
// heartbeats of the harness's owners and the proxies' lookups run every
// T/4 and T/6 on the client's CPU and on the proxies', as in a deployment
// with the defaults. presence has a short one, so that a restarted
// server's arcs move within the churn section's seconds.
const (
	nsPlain    = "default"
	nsTLS      = "tls"
	nsPresence = "presence"
	poolT      = manager.DefaultLeaseDuration
	churnT     = 2 * time.Second
)

// backend is one backend process.
type backend struct {
	name, addr, tlsAddr string
	p                   *proc
}

// startManager starts a single-node fuge-manager with mutual TLS.
func (b *bench) startManager() error {
	raft, grpcAddr, httpAddr := freePort(), freePort(), freePort()
	p, err := b.ps.start("fuge-manager", clientCPU, nil, filepath.Join(b.bin, "fuge-manager"),
		"--node-id", "m1", "--data-dir", filepath.Join(b.dir, "manager"),
		"--raft-addr", raft, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--lease-duration", poolT.String(), "--raft-timeout", "500ms",
		"--namespace", nsPlain+":4096,"+nsTLS+":4096",
		"--tls-dir", b.certs, "--log-level", "warn")
	if err != nil {
		return err
	}
	b.mgr, b.mgrGRPC, b.mgrHTTP = p, grpcAddr, httpAddr
	if err := waitHTTP(b.admin, "https://"+httpAddr+"/v1/namespaces/"+nsPlain+"/leases", nil, 30*time.Second); err != nil {
		return err
	}
	body := fmt.Sprintf(`{"name":%q,"ring_size":4096,"lease_duration":%q}`, nsPresence, churnT.String())
	resp, err := b.admin.Post("https://"+httpAddr+"/v1/namespaces", "application/json", strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", nsPresence, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("create namespace %s: %s: %s", nsPresence, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// startBackends starts n backends b1..bn on the client CPU; b1-b3 also
// serve TLS.
func (b *bench) startBackends(n int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for i := range n {
		be := &backend{name: fmt.Sprintf("b%d", i+1), addr: freePort()}
		args := []string{"backend", "-listen", be.addr}
		if i < 3 { // b4 joins the plain namespace only (the ring move)
			be.tlsAddr = freePort()
			args = append(args, "-tls-listen", be.tlsAddr, "-certs", b.certs, "-owner", nsTLS+"/"+be.name)
		}
		be.p, err = b.ps.start(be.name, clientCPU, []string{"GOMAXPROCS=1"}, self, args...)
		if err != nil {
			return err
		}
		if err := waitTCP(be.addr, 10*time.Second); err != nil {
			return err
		}
		b.backends = append(b.backends, be)
	}
	return nil
}

// startOwner opens an Owner session in the harness for ns/name at addr and
// waits until the manager has answered it.
func (b *bench) startOwner(ctx context.Context, ns, name, addr string) (*ownerguard.Owner, error) {
	dial, err := ownerDialOptions(b.certs, ns, name)
	if err != nil {
		return nil, err
	}
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: []string{b.mgrGRPC}, Namespace: ns, Name: name, Addr: addr,
		LeaseDuration: poolT, DialOptions: dial,
	})
	if err != nil {
		return nil, err
	}
	if err := o.Start(ctx); err != nil {
		return nil, err
	}
	select {
	case <-o.Ready():
		return o, nil
	case <-time.After(30 * time.Second):
		o.Close()
		return nil, fmt.Errorf("owner %s/%s: no answer from the manager in 30s: %v", ns, name, o.Err())
	}
}

// arc is one arc of the lease table, as the admin API shows it.
type arc struct {
	Start, End string // 16 hex digits: the arc (Start, End]
	Owner      string
	State      string
}

// share is the fraction of the key space in the arc.
func (a arc) share() float64 {
	s, err1 := strconv.ParseUint(a.Start, 16, 64)
	e, err2 := strconv.ParseUint(a.End, 16, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return float64(e-s) / (1 << 64) // wraps for the arc across zero
}

func (b *bench) arcs(ns string) ([]arc, error) {
	resp, err := b.admin.Get("https://" + b.mgrHTTP + "/v1/namespaces/" + ns + "/leases")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("leases of %s: %s", ns, resp.Status)
	}
	var out struct{ Arcs []arc }
	return out.Arcs, json.NewDecoder(resp.Body).Decode(&out)
}

// settled reports whether every arc of ns is granted, to exactly the
// owners named.
func (b *bench) settled(ns string, owners ...string) bool {
	arcs, err := b.arcs(ns)
	if err != nil || len(arcs) == 0 {
		return false
	}
	want := map[string]bool{}
	for _, o := range owners {
		want[o] = true
	}
	seen := map[string]bool{}
	for _, a := range arcs {
		if a.State != "granted" || !want[a.Owner] {
			return false
		}
		seen[a.Owner] = true
	}
	return len(seen) == len(want)
}

// waitSettled waits until settled(ns, owners...) holds.
func (b *bench) waitSettled(ns string, d time.Duration, owners ...string) error {
	deadline := time.Now().Add(d)
	for !b.settled(ns, owners...) {
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: not every arc granted to %s within %v", ns, strings.Join(owners, ", "), d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// drain takes owner out of ns's ring through the admin API.
func (b *bench) drain(ns, owner string) error {
	resp, err := b.admin.Post("https://"+b.mgrHTTP+"/v1/namespaces/"+ns+"/owners/"+owner+"/drain", "application/json", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("drain %s/%s: %s", ns, owner, resp.Status)
	}
	return nil
}

// target is one way to the backends: a proxy, or none (direct).
type target struct {
	name string
	addr string
	p    *proc // the proxy process; nil for direct
}

// startFugeProxy starts fuge-proxy on the proxy CPU with one P.
func (b *bench) startFugeProxy(name, ns string, extra ...string) (*target, error) {
	addr := freePort()
	args := append([]string{"--listen", addr, "--admin", freePort(), "--managers", b.mgrGRPC,
		"--namespace", ns, "--tls-dir", b.certs, "--log-level", "warn"}, extra...)
	p, err := b.ps.start(name, proxyCPU, []string{"GOMAXPROCS=1"}, filepath.Join(b.bin, "fuge-proxy"), args...)
	if err != nil {
		return nil, err
	}
	return &target{name: name, addr: addr, p: p}, nil
}

// haproxyConfig is HAProxy with one thread, keep-alive both sides,
// connection reuse to servers, no logs. balance is "hdr(X-Fuge-Key)"
// (with hash-type consistent) or "roundrobin". With checks, servers are
// health-checked every 250 ms and a failed connection is retried on
// another server (what one runs in front of servers that restart).
func haproxyConfig(listen, balance string, servers []string, checks bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, "global\n  nbthread 1\n  maxconn 4096\n\n")
	fmt.Fprintf(&s, "defaults\n  mode http\n  option http-keep-alive\n  http-reuse always\n")
	fmt.Fprintf(&s, "  timeout connect 1s\n  timeout client 60s\n  timeout server 60s\n")
	if checks {
		fmt.Fprintf(&s, "  retries 2\n  option redispatch 1\n  retry-on conn-failure empty-response response-timeout\n")
	}
	fmt.Fprintf(&s, "\nfrontend f\n  bind %s\n  default_backend pool\n\nbackend pool\n  balance %s\n", listen, balance)
	if strings.HasPrefix(balance, "hdr(") {
		fmt.Fprintf(&s, "  hash-type consistent\n")
	}
	for i, a := range servers {
		fmt.Fprintf(&s, "  server s%d %s", i+1, a)
		if checks {
			fmt.Fprintf(&s, " check inter 250ms fall 1 rise 1")
		}
		fmt.Fprintln(&s)
	}
	return s.String()
}

// nginxConfig is nginx with one process, consistent hashing on the
// routing header, keep-alive both sides, no access log. With checks, a
// failed server is passed over for 1 s and the request retried on the next.
func nginxConfig(dir, listen string, servers []string, checks bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, "daemon off;\nmaster_process off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n", dir, dir)
	fmt.Fprintf(&s, "events { worker_connections 4096; }\n")
	fmt.Fprintf(&s, "http {\n  access_log off;\n  keepalive_requests 10000000;\n  keepalive_timeout 60s;\n")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&s, "  %s_temp_path %s/%s_temp;\n", t, dir, t)
	}
	fmt.Fprintf(&s, "  upstream pool {\n    hash $http_x_fuge_key consistent;\n")
	for _, a := range servers {
		if checks {
			fmt.Fprintf(&s, "    server %s max_fails=1 fail_timeout=1s;\n", a)
		} else {
			fmt.Fprintf(&s, "    server %s;\n", a)
		}
	}
	fmt.Fprintf(&s, "    keepalive 256;\n    keepalive_requests 10000000;\n  }\n")
	fmt.Fprintf(&s, "  server {\n    listen %s;\n    location / {\n      proxy_pass http://pool;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n", listen)
	if checks {
		fmt.Fprintf(&s, "      proxy_next_upstream error timeout;\n      proxy_connect_timeout 1s;\n")
	}
	fmt.Fprintf(&s, "    }\n  }\n}\n")
	return s.String()
}

// startHAProxy writes the configuration and runs haproxy in the
// foreground on the proxy CPU.
func (b *bench) startHAProxy(name, balance string, servers []string, checks bool) (*target, error) {
	addr := freePort()
	cfg := filepath.Join(b.dir, name+".cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(addr, balance, servers, checks)), 0o644); err != nil {
		return nil, err
	}
	p, err := b.ps.start(name, proxyCPU, nil, "haproxy", "-db", "-f", cfg)
	if err != nil {
		return nil, err
	}
	return &target{name: name, addr: addr, p: p}, nil
}

// startNginx writes the configuration and runs nginx as one process in the
// foreground on the proxy CPU.
func (b *bench) startNginx(name string, servers []string, checks bool) (*target, error) {
	addr := freePort()
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cfg, []byte(nginxConfig(dir, addr, servers, checks)), 0o644); err != nil {
		return nil, err
	}
	p, err := b.ps.start(name, proxyCPU, nil, "nginx", "-p", dir, "-c", cfg, "-e", filepath.Join(dir, "error.log"))
	if err != nil {
		return nil, err
	}
	return &target{name: name, addr: addr, p: p}, nil
}

// waitTarget waits until t answers a keyed GET with 2xx.
func waitTarget(t *target) error {
	c := &http.Client{Timeout: 2 * time.Second}
	return waitHTTP(c, "http://"+t.addr+"/", map[string]string{"X-Fuge-Key": "warm-up"}, 30*time.Second)
}
