package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
)

// syncBuffer is a bytes.Buffer for logs written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestJoinsThePool runs the server against a manager with mutual TLS (its
// owner certificate from --tls-dir) and one run with --insecure: either
// way it ends up holding every arc, and stops cleanly when told to.
func TestJoinsThePool(t *testing.T) {
	for _, withTLS := range []bool{true, false} {
		name := map[bool]string{true: "TLS", false: "insecure"}[withTLS]
		t.Run(name, func(t *testing.T) {
			m := fugetest.StartManager(t, fugetest.Options{Namespace: "default", TLS: withTLS})
			args := []string{"--name", "p1", "--listen", "127.0.0.1:0", "--managers", m.GRPCAddr,
				"--namespace", "default", "--lease-duration", m.T.String()}
			if withTLS {
				// What fugectl certs init --owner default/p1 writes.
				if err := fugetls.Issue(m.CertDir, fugetls.OwnerBase("default", "p1"), fugetls.OwnerID("default", "p1"), nil, time.Now()); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--tls-dir", m.CertDir)
			} else {
				args = append(args, "--insecure")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr syncBuffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, &stderr) }()
			fugetest.Eventually(t, "p1 to hold every arc", func() bool {
				select {
				case code := <-done:
					t.Fatalf("presence-server exited %d early:\n%s", code, stderr.String())
				default:
				}
				arcs, err := m.Arcs()
				if err != nil || len(arcs) == 0 {
					return false
				}
				for _, a := range arcs {
					if a.Owner != "p1" || a.State != "granted" {
						return false
					}
				}
				return true
			})
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("exit %d after the context ended, want 0:\n%s", code, stderr.String())
			}
			if warned := strings.Contains(stderr.String(), "--insecure"); warned == withTLS {
				t.Errorf("warned about --insecure: %v, want %v:\n%s", warned, !withTLS, stderr.String())
			}
		})
	}
}

// TestNoCertificate: without its owner certificate the server says which
// file is missing and how to make it, and exits 2.
func TestNoCertificate(t *testing.T) {
	dir := t.TempDir()
	var stderr syncBuffer
	code := run(context.Background(), []string{"--name", "p7", "--namespace", "carts", "--tls-dir", dir}, &stderr)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, w := range []string{"owner carts/p7", filepath.Join(dir, "ca.crt"), "fugectl certs init", "--insecure"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
		}
	}
	stderr = syncBuffer{}
	if code := run(context.Background(), []string{"--name", "p7", "--tls-dir", dir, "--tls-key", "k.pem"}, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "go together") {
		t.Errorf("--tls-key alone: exit %d, stderr %q; want 2 and a message", code, stderr.String())
	}
}
