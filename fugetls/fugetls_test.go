package fugetls

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ID
		ok   bool
	}{
		{"spiffe://fuge/ns/default/owner/p1", OwnerID("default", "p1"), true},
		{"spiffe://fuge/manager/n1", ManagerID("n1"), true},
		{"spiffe://fuge/proxy/x", ProxyID("x"), true},
		{"spiffe://fuge/admin/ops", AdminID("ops"), true},
		{"spiffe://other/admin/ops", ID{}, false},
		{"https://fuge/admin/ops", ID{}, false},
		{"spiffe://fuge/root/ops", ID{}, false},
		{"spiffe://fuge/ns/default/owner/p1/x", ID{}, false},
		{"spiffe://fuge/ns/de fault/owner/p1", ID{}, false},
		{"spiffe://fuge/admin/", ID{}, false},
		{"spiffe://fuge/admin/ops?x=1", ID{}, false},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseID(u)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseID(%s) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v.String() = %s, want %s", got, got.String(), tc.in)
		}
	}
}

// handshake runs one TLS handshake over a real loopback connection and
// returns each side's error and the ID the server saw.
func handshake(t *testing.T, srv, cli *tls.Config) (srvErr, cliErr error, seen ID) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			srvErr = err
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		if srvErr = tc.Handshake(); srvErr == nil {
			seen, _ = PeerID(tc.ConnectionState())
			_, _ = tc.Write([]byte("x"))
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, cli)
	if cliErr = tc.Handshake(); cliErr == nil {
		// TLS 1.3: the server verifies the client after the client's
		// handshake returns; a read sees its verdict.
		_, cliErr = io.ReadFull(tc, make([]byte, 1))
	}
	c.Close()
	<-done
	return
}

func source(t *testing.T, dir, base string) *Source {
	t.Helper()
	s, err := NewSource(DirFiles(dir, base))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHandshakeByRole(t *testing.T) {
	dir := t.TempDir()
	if err := InitDir(dir, InitOptions{Owners: []ID{OwnerID("default", "p1")}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if err := InitDir(dir, InitOptions{Now: t0}); !errors.Is(err, ErrExists) {
		t.Fatalf("second InitDir: %v, want ErrExists", err)
	}
	mgr := source(t, dir, ManagerBase)
	owner := source(t, dir, OwnerBase("default", "p1"))
	proxy := source(t, dir, ProxyBase)
	if owner.ID() != OwnerID("default", "p1") || mgr.ID().Role != RoleManager {
		t.Fatalf("IDs: %v %v", owner.ID(), mgr.ID())
	}

	se, ce, seen := handshake(t, mgr.ServerConfig(false), owner.ClientConfig(RoleManager))
	if se != nil || ce != nil || seen != OwnerID("default", "p1") {
		t.Fatalf("owner to manager: server %v, client %v, seen %v", se, ce, seen)
	}
	// A server that admits only managers refuses a proxy.
	if se, _, _ := handshake(t, mgr.ServerConfig(false, RoleManager), proxy.ClientConfig(RoleManager)); se == nil {
		t.Fatal("a manager-only server accepted a proxy")
	}
	// A client that wants a manager refuses a server with an owner's cert.
	if _, ce, _ := handshake(t, owner.ServerConfig(false), proxy.ClientConfig(RoleManager)); ce == nil {
		t.Fatal("a client wanting a manager accepted an owner")
	}
	// No client certificate: refused, unless optional.
	bare := &tls.Config{InsecureSkipVerify: true}
	if se, _, _ := handshake(t, mgr.ServerConfig(false), bare); se == nil {
		t.Fatal("a client without a certificate was admitted")
	}
	if se, ce, _ := handshake(t, mgr.ServerConfig(true), bare); se != nil || ce != nil {
		t.Fatalf("optional client certificate: server %v client %v", se, ce)
	}
	// Another CA's certificate: refused.
	other := t.TempDir()
	if err := InitDir(other, InitOptions{Now: t0}); err != nil {
		t.Fatal(err)
	}
	if se, _, _ := handshake(t, mgr.ServerConfig(false), source(t, other, AdminBase).ClientConfig()); se == nil {
		t.Fatal("a certificate from another CA was admitted")
	}
}

func TestRotationWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	if err := InitDir(dir, InitOptions{Now: t0}); err != nil {
		t.Fatal(err)
	}
	mgr := source(t, dir, ManagerBase)
	admin := source(t, dir, AdminBase)
	srv := mgr.ServerConfig(false)
	if admin.ID() != AdminID("fugectl") {
		t.Fatal(admin.ID())
	}
	// Re-issue the admin certificate under another name: the same Source
	// presents it at the next handshake.
	if err := Issue(dir, AdminBase, AdminID("ops2"), nil, t0); err != nil {
		t.Fatal(err)
	}
	se, ce, seen := handshake(t, srv, admin.ClientConfig(RoleManager))
	if se != nil || ce != nil || seen != AdminID("ops2") {
		t.Fatalf("after rotation: server %v client %v seen %v", se, ce, seen)
	}
	// A half-written set (a key that does not match) keeps the old pair.
	b := filepath.Join(dir, ManagerBase+".key")
	if err := writePEM(b, "PRIVATE KEY", []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if se, ce, _ := handshake(t, srv, admin.ClientConfig(RoleManager)); se != nil || ce != nil {
		t.Fatalf("a broken key file should keep the loaded pair: server %v client %v", se, ce)
	}
}
