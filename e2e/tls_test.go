package e2e

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/manager"
)

// TestClusterOverTLS: three managers with mutual TLS on raft, gRPC and the
// admin API join (the leader probes each joining node over HTTPS), elect,
// and elect again when the leader dies; raft refuses a peer whose
// certificate is not a manager's.
func TestClusterOverTLS(t *testing.T) {
	certs := t.TempDir()
	if err := fugetls.InitDir(certs, fugetls.InitOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	src, err := fugetls.NewSource(fugetls.DirFiles(certs, fugetls.ManagerBase))
	if err != nil {
		t.Fatal(err)
	}
	c := newClusterWith(t, 3, 2*time.Second, func(cfg *manager.ServerConfig) {
		cfg.TLS = src
		// A TLS handshake under the race detector takes a good part of the
		// other tests' 200 ms election timeout.
		cfg.RaftHeartbeatTimeout, cfg.RaftElectionTimeout, cfg.RaftLeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	})
	first := c.waitLeader()
	c.kill(first)
	eventually(t, "a new leader", func() bool { l := c.leader(); return l != nil && l != first })

	if err := fugetls.Issue(certs, fugetls.ProxyBase, fugetls.ProxyID("intruder"), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	intruder, err := fugetls.NewSource(fugetls.DirFiles(certs, fugetls.ProxyBase))
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes[1:] {
		conn, err := tls.Dial("tcp", nd.cfg.RaftAddr, intruder.ClientConfig(fugetls.RoleManager))
		if err == nil {
			// TLS 1.3: the server's verdict on the client arrives with the
			// first read.
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil {
			t.Fatalf("raft at %s accepted a router's certificate", nd.cfg.RaftAddr)
		}
		t.Logf("raft at %s refused a router's certificate: %v", nd.cfg.RaftAddr, err)
	}
}
