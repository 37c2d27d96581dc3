package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fuge-project/fuge/internal/procs"
	"github.com/fuge-project/fuge/ownerguard"
)

// The namespace, its lease T, and the proxies' gossip epoch.
const (
	namespace = "default"
	leaseT    = 3 * time.Second
)

type managerProc struct {
	id, raft, grpc, http string
	p                    *procs.Proc
	dead                 bool
}

type proxyProc struct {
	name, listen, admin string
	p                   *procs.Proc
	down                atomic.Bool // SIGSTOPped: the load goes to the others
}

// cluster is the processes of one run: managers, proxies, and in the
// harness the sink and the Owner session that holds the sink's leases.
type cluster struct {
	dir, bin string
	ps       *procs.Group
	mgrs     []*managerProc
	proxies  []*proxyProc
	sink     *sink
	sinkSrv  *fasthttp.Server
	owner    *ownerguard.Owner
}

// build compiles fuge-manager and fuge-proxy into dir/bin.
func build(dir string) (string, error) {
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-o", bin+"/", "./cmd/fuge-manager", "./cmd/fuge-proxy")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// startManagers starts n manager nodes, m1 bootstrapping and the others
// joining it, and waits until all are voters.
func (c *cluster) startManagers(n int) error {
	for i := range n {
		m := &managerProc{id: fmt.Sprintf("m%d", i+1), raft: freePort(), grpc: freePort(), http: freePort()}
		args := []string{"--node-id", m.id, "--data-dir", filepath.Join(c.dir, m.id),
			"--raft-addr", m.raft, "--grpc-addr", m.grpc, "--http-addr", m.http,
			"--lease-duration", leaseT.String(), "--raft-timeout", "500ms", "--insecure", "--log-level", "info",
			"--namespace", namespace + ":1024"}
		if i > 0 {
			args = append(args, "--join", c.mgrs[0].http)
		}
		p, err := c.ps.Start("fuge-manager-"+m.id, filepath.Join(c.bin, "fuge-manager"), args...)
		if err != nil {
			return err
		}
		m.p = p
		c.mgrs = append(c.mgrs, m)
		if i == 0 {
			if err := waitFor("m1 to lead", 30*time.Second, func() bool { return c.leader() == m }); err != nil {
				return err
			}
		}
	}
	return waitFor(fmt.Sprintf("%d voters", n), 60*time.Second, func() bool {
		var cl struct {
			Servers []struct{ Suffrage string } `json:"servers"`
		}
		l := c.leader()
		if l == nil || getJSON("http://"+l.http+"/v1/cluster", &cl) != nil {
			return false
		}
		voters := 0
		for _, s := range cl.Servers {
			if s.Suffrage == "Voter" {
				voters++
			}
		}
		return voters == n
	})
}

// leader returns the manager that says it leads, or nil.
func (c *cluster) leader() *managerProc {
	for _, m := range c.mgrs {
		if m.dead {
			continue
		}
		var cl struct {
			Role string `json:"role"`
		}
		if getJSON("http://"+m.http+"/v1/cluster", &cl) == nil && cl.Role == "leader" {
			return m
		}
	}
	return nil
}

func (c *cluster) grpcAddrs() string {
	var a []string
	for _, m := range c.mgrs {
		a = append(a, m.grpc)
	}
	return strings.Join(a, ",")
}

// setLimits writes the namespace's limit through the leader.
func (c *cluster) setLimits(limit, burst float64) error {
	l := c.leader()
	if l == nil {
		return fmt.Errorf("no leader")
	}
	body := map[string]any{"limits": []map[string]any{{
		"name": "tenant", "route_prefix": "/", "header": "X-Tenant", "requests": limit, "period": "1s", "burst": burst,
	}}}
	return putJSON("http://"+l.http+"/v1/namespaces/"+namespace+"/ratelimits", body)
}

// startSink serves the sink and registers it as the namespace's one owner.
func (c *cluster) startSink(s *sink) error {
	addr := freePort()
	c.sink = s
	c.sinkSrv = &fasthttp.Server{Handler: s.handle, NoDefaultServerHeader: true, NoDefaultDate: true}
	go c.sinkSrv.ListenAndServe(addr)
	var managers []string
	for _, m := range c.mgrs {
		managers = append(managers, m.grpc)
	}
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{Managers: managers, Namespace: namespace, Name: "sink", Addr: addr,
		LeaseDuration: leaseT, DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
	if err != nil {
		return err
	}
	if err := o.Start(context.Background()); err != nil {
		return err
	}
	c.owner = o
	select {
	case <-o.Ready():
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the sink's owner session: no answer in 30s: %v", o.Err())
	}
}

// startProxies starts n fuge-proxy processes with --ratelimit, the
// gossip loss given, and waits until every one is in a view of n.
func (c *cluster) startProxies(n int, epoch time.Duration, loss float64) error {
	for i := range n {
		pp := &proxyProc{name: fmt.Sprintf("p%02d", i+1), listen: freePort(), admin: freePort()}
		p, err := c.ps.Start("fuge-proxy-"+pp.name, filepath.Join(c.bin, "fuge-proxy"),
			"--listen", pp.listen, "--admin", pp.admin, "--managers", c.grpcAddrs(), "--namespace", namespace,
			"--insecure", "--max-conns-per-ip", "-1", "--log-level", "info",
			"--ratelimit", "--ratelimit-name", pp.name, "--gossip-epoch", epoch.String(), "--gossip-fanout", "2",
			"--gossip-loss", fmt.Sprint(loss))
		if err != nil {
			return err
		}
		pp.p = p
		c.proxies = append(c.proxies, pp)
	}
	return waitFor(fmt.Sprintf("%d proxies in one view", n), 60*time.Second, func() bool {
		var id uint64
		for _, pp := range c.proxies {
			st, err := pp.status()
			if err != nil || !st.Node.InView || st.Node.Members != n || (id != 0 && st.Node.View != id) {
				return false
			}
			id = st.Node.View
		}
		return true
	})
}

// proxyStatus is fuge-proxy's GET /ratelimit.
type proxyStatus struct {
	Node struct {
		View       uint64
		InView     bool
		Members    int
		Registered int
	} `json:"node"`
	Keys []struct {
		Limit, Key string
		Demand     float64
		Share      float64
		Estimate   float64
	} `json:"keys"`
}

func (pp *proxyProc) status() (proxyStatus, error) {
	var st proxyStatus
	err := getJSON("http://"+pp.admin+"/ratelimit", &st)
	return st, err
}

func (pp *proxyProc) stop(s syscall.Signal) { pp.p.Signal(s) }

// close stops the sink and the owner; the processes are stopped by ps.
func (c *cluster) close() {
	if c.owner != nil {
		c.owner.Close()
	}
	if c.sinkSrv != nil {
		c.sinkSrv.Shutdown()
	}
}
