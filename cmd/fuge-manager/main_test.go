package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
)

const defaultTestTimeout = 20 * time.Second

// lineWriter hands each write to a channel, so that the test can wait for
// the address line without polling.
type lineWriter struct{ lines chan string }

func (w lineWriter) Write(p []byte) (int, error) {
	w.lines <- string(p)
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
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

// TestRunServesAndStops starts a node through run, with the real xds lease
// table wired in and mutual TLS (the default), reads the bound addresses it
// prints, asks its admin API who it is with an admin certificate and
// without one, and stops it as a signal would.
func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timeout, cancelTimeout := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancelTimeout()
	stdout := lineWriter{make(chan string, 16)}
	var stderr syncBuffer
	certs := t.TempDir()
	if err := fugetls.InitDir(certs, fugetls.InitOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FUGE_NODE_ID": "n7", "FUGE_DATA_DIR": t.TempDir(), "FUGE_TLS_DIR": certs}
	args := []string{"--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "debug"}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, func(k string) string { return env[k] }, stdout, &stderr) }()

	var line string
	select {
	case line = <-stdout.lines:
	case code := <-done:
		t.Fatalf("run exited %d before serving; stderr:\n%s", code, stderr.String())
	case <-timeout.Done():
		t.Fatalf("run printed no addresses; stderr:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`^fuge-manager n7: raft 127\.0\.0\.1:\d+, grpc 127\.0\.0\.1:\d+, http (127\.0\.0\.1:\d+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("run printed %q, want the node ID and three bound 127.0.0.1 addresses", line)
	}
	admin, err := fugetls.NewSource(fugetls.DirFiles(certs, fugetls.AdminBase))
	if err != nil {
		t.Fatal(err)
	}
	bare := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := http.Get("http://" + m[1] + "/v1/cluster"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the admin port answered %s; want TLS only", resp.Status)
		}
	}
	if resp, err := bare.Get("https://" + m[1] + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /healthz without a certificate: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := bare.Get("https://" + m[1] + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(refusal.Error, "client certificate") {
		t.Errorf("GET /v1/cluster without a certificate: %s %q; want 401 naming the missing certificate", resp.Status, refusal.Error)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: admin.ClientConfig(fugetls.RoleManager)}}
	resp, err = hc.Get("https://" + m[1] + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	var cluster struct {
		NodeID string `json:"node_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&cluster)
	resp.Body.Close()
	if err != nil || cluster.NodeID != "n7" {
		t.Errorf("GET /v1/cluster: node_id %q, err %v; want n7", cluster.NodeID, err)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run exited %d after the signal, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-timeout.Done():
		t.Fatal("run did not stop")
	}
	if !strings.Contains(stderr.String(), "msg=stopped") {
		t.Errorf("stderr does not log the stop:\n%s", stderr.String())
	}
}

func TestRunExitCodes(t *testing.T) {
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{args: []string{"--help"}, code: 0, out: "Usage: fuge-manager"},
		{args: []string{"--lease-duration", "soon"}, code: 2, err: "fuge-manager: --lease-duration \"soon\""},
		{args: []string{"extra"}, code: 2, err: "Run 'fuge-manager --help'"},
		{args: []string{"--tls-dir", "/nonexistent"}, code: 2, err: "fugectl certs init"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, func(string) string { return "" }, &stdout, &stderr)
		if code != c.code || !strings.Contains(stdout.String(), c.out) || !strings.Contains(stderr.String(), c.err) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, stdout.String(), stderr.String(), c.code, c.out, c.err)
		}
	}
}
