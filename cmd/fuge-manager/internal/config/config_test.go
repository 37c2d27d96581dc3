package config

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fuge-project/fuge/manager"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile writes a YAML file into a fresh directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fuge.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	got, err := Load(nil, env(nil))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	want := manager.DefaultServerConfig()
	want.HeartbeatInterval = 8 * time.Second / 6
	want.Namespaces = []manager.NamespaceConfig{{Name: "default", RingSize: 4096}}
	if !reflect.DeepEqual(got.Server, want) {
		t.Errorf("Load().Server =\n%+v\nwant\n%+v", got.Server, want)
	}
	if got.LogLevel != slog.LevelInfo || got.File != "" || got.EnvoyListener != "127.0.0.1:10000" {
		t.Errorf("Load() LogLevel, File, EnvoyListener = %v, %q, %q; want INFO, empty, 127.0.0.1:10000", got.LogLevel, got.File, got.EnvoyListener)
	}
	// The documented defaults, spelled out, in case DefaultServerConfig drifts.
	s := got.Server
	if s.NodeID != "node1" || s.DataDir != "./fuge-data" || s.RaftAddr != "127.0.0.1:7400" ||
		s.GRPCAddr != "127.0.0.1:7401" || s.HTTPAddr != "127.0.0.1:7402" || s.Join != "" ||
		s.LeaseDuration != 8*time.Second || s.LogRetention != 0 {
		t.Errorf("Load().Server = %+v, not the documented defaults", s)
	}
}

// TestLogRetentionZero: 0 and 0s both keep no change log (the default);
// a positive duration is kept as given.
func TestLogRetentionZero(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--log-retention", "0"}, 0},
		{[]string{"--log-retention", "0s"}, 0},
		{[]string{"--log-retention", "90s"}, 90 * time.Second},
	} {
		got, err := Load(c.args, env(nil))
		if err != nil {
			t.Fatalf("Load(%q) = %v", c.args, err)
		}
		if got.Server.LogRetention != c.want {
			t.Errorf("Load(%q): LogRetention %v, want %v", c.args, got.Server.LogRetention, c.want)
		}
	}
}

// TestPrecedence sets each key in several layers and checks that the
// highest layer wins: flags > env > file > defaults.
func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
node_id: from-file
data_dir: /file/data
raft_addr: 10.0.0.1:1
grpc_addr: 10.0.0.1:2
http_addr: 10.0.0.1:3
lease_duration: 30s
log_retention: 1m
log_level: error
`)
	e := env(map[string]string{
		"FUGE_CONFIG":         path,
		"FUGE_DATA_DIR":       "/env/data",
		"FUGE_RAFT_ADDR":      "10.0.0.2:1",
		"FUGE_GRPC_ADDR":      "10.0.0.2:2",
		"FUGE_LEASE_DURATION": "20s",
		"FUGE_LOG_LEVEL":      "warn",
		"FUGE_JOIN":           "10.0.0.9:7402",
		"FUGE_ENVOY_LISTENER": "0.0.0.0:8080",
		"FUGE_HTTP_ADDR":      "", // empty counts as unset
	})
	got, err := Load([]string{"--raft-addr", "10.0.0.3:1", "-lease-duration=12s", "--log-level", "DEBUG"}, e)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	s := got.Server
	for _, c := range []struct{ name, got, want string }{
		{"node id (file)", s.NodeID, "from-file"},
		{"data dir (env over file)", s.DataDir, "/env/data"},
		{"raft addr (flag over env over file)", s.RaftAddr, "10.0.0.3:1"},
		{"grpc addr (env over file)", s.GRPCAddr, "10.0.0.2:2"},
		{"http addr (file; empty env ignored)", s.HTTPAddr, "10.0.0.1:3"},
		{"join (env)", s.Join, "10.0.0.9:7402"},
		{"lease duration (flag)", s.LeaseDuration.String(), "12s"},
		{"log retention (file)", s.LogRetention.String(), "1m0s"},
		{"heartbeat (T/6 of the final T)", s.HeartbeatInterval.String(), "2s"},
		{"log level (flag)", got.LogLevel.String(), "DEBUG"},
		{"envoy listener (env)", got.EnvoyListener, "0.0.0.0:8080"},
		{"file", got.File, path},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestConfigFlagOverridesConfigEnv(t *testing.T) {
	envFile := writeFile(t, "node_id: env-file\n")
	flagFile := writeFile(t, "node_id: flag-file\n")
	got, err := Load([]string{"--config", flagFile}, env(map[string]string{"FUGE_CONFIG": envFile}))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if got.Server.NodeID != "flag-file" || got.File != flagFile {
		t.Errorf("NodeID, File = %q, %q; want flag-file, %q", got.Server.NodeID, got.File, flagFile)
	}
}

func TestNamespaces(t *testing.T) {
	file := writeFile(t, `
lease_duration: 90s
namespaces:
  - name: users
    ring_size: 1024
    header: X-User-Id
    lease_duration: 30s
    balance: seeds
    balance_interval: 20s
    balance_max_moves: 16
    balance_min_load: 2.5
  - name: carts
    header: ~
`)
	users := manager.NamespaceConfig{Name: "users", RingSize: 1024, Header: "X-User-Id", LeaseDuration: 30 * time.Second,
		Balance: manager.BalanceSeeds, BalanceInterval: 20 * time.Second, BalanceMaxMoves: 16, BalanceMinLoad: 2.5}
	carts := manager.NamespaceConfig{Name: "carts", RingSize: 4096}
	none := []manager.NamespaceConfig{}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want []manager.NamespaceConfig
	}{
		{"file", []string{"--config", file}, nil, []manager.NamespaceConfig{users, carts}},
		{"env over file", []string{"--config", file}, map[string]string{"FUGE_NAMESPACES": "a:8, b"},
			[]manager.NamespaceConfig{{Name: "a", RingSize: 8}, {Name: "b", RingSize: 4096}}},
		{"flag repeated and comma-separated, over env", []string{"--namespace", "x:2,y", "--namespace=z:16"},
			map[string]string{"FUGE_NAMESPACES": "a:8"},
			[]manager.NamespaceConfig{{Name: "x", RingSize: 2}, {Name: "y", RingSize: 4096}, {Name: "z", RingSize: 16}}},
		{"empty flag means none", []string{"--namespace="}, nil, none},
		{"empty file list means none", []string{"--config", writeFile(t, "namespaces: []\n")}, nil, none},
		{"null file list keeps the default", []string{"--config", writeFile(t, "namespaces:\n")}, nil,
			[]manager.NamespaceConfig{{Name: "default", RingSize: 4096}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Load(c.args, env(c.env))
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if !reflect.DeepEqual(got.Server.Namespaces, c.want) {
				t.Errorf("Namespaces = %+v, want %+v", got.Server.Namespaces, c.want)
			}
		})
	}
}

func TestAliases(t *testing.T) {
	got, err := Load([]string{"--config", writeFile(t, `
lease_duration: &t 40s
namespaces:
  - {name: a, lease_duration: *t}
`)}, env(nil))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if ns := got.Server.Namespaces; len(ns) != 1 || ns[0].LeaseDuration != 40*time.Second {
		t.Errorf("Namespaces = %+v, want one with a 40s lease", ns)
	}
}

// TestErrors checks that every bad input is refused with a message that
// names where the bad value came from.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		file string // written and passed with --config when set
		want []string
	}{
		{name: "bad flag duration", args: []string{"--lease-duration", "sixty"},
			want: []string{"--lease-duration", `"sixty"`, "not a duration"}},
		{name: "negative flag duration", args: []string{"--log-retention=-1s"},
			want: []string{"--log-retention", "must not be negative", "-1s"}},
		{name: "negative lease duration", args: []string{"--lease-duration=-1s"},
			want: []string{"--lease-duration", "must be positive"}},
		{name: "zero heartbeat", args: []string{"--heartbeat-interval=0s"},
			want: []string{"--heartbeat-interval", "must be positive"}},
		{name: "bad env duration", env: map[string]string{"FUGE_HEARTBEAT_INTERVAL": "5"},
			want: []string{"FUGE_HEARTBEAT_INTERVAL", "not a duration"}},
		{name: "bad file duration", file: "node_id: a\nlog_retention: 5 minutes\n",
			want: []string{"fuge.yaml:2", "log_retention", "not a duration"}},
		{name: "bad namespace duration", file: "namespaces:\n  - name: a\n    lease_duration: 1\n",
			want: []string{"fuge.yaml:3", "namespaces[0].lease_duration", "not a duration"}},
		{name: "unknown key", file: "node_id: a\nlease_duraton: 5s\n",
			want: []string{"fuge.yaml:2", `unknown key "lease_duraton"`, "lease_duration"}},
		{name: "bad namespace policy", file: "namespaces:\n  - name: a\n    balance: fast\n",
			want: []string{"fuge.yaml:3", "namespaces[0].balance", "not a policy"}},
		{name: "bad namespace max moves", file: "namespaces:\n  - name: a\n    balance_max_moves: 0\n",
			want: []string{"fuge.yaml:3", "namespaces[0].balance_max_moves", "from 1"}},
		{name: "bad namespace min load", file: "namespaces:\n  - name: a\n    balance_min_load: -1\n",
			want: []string{"fuge.yaml:3", "namespaces[0].balance_min_load", "from 0"}},
		{name: "bad namespace balance interval", file: "namespaces:\n  - name: a\n    balance_interval: 0s\n",
			want: []string{"fuge.yaml:3", "namespaces[0].balance_interval", "positive"}},
		{name: "unknown namespace key", file: "namespaces:\n  - name: a\n    ringsize: 8\n",
			want: []string{"fuge.yaml:3", "namespaces[0].ringsize", "unknown key"}},
		{name: "repeated key", file: "node_id: a\nnode_id: b\n",
			want: []string{"fuge.yaml:2", `"node_id" is repeated`, "line 1"}},
		{name: "list for a scalar", file: "join: [a, b]\n",
			want: []string{"fuge.yaml:1", "join", "single value"}},
		{name: "namespaces not a list", file: "namespaces: users\n",
			want: []string{"fuge.yaml:1", "namespaces", "want a list"}},
		{name: "not a mapping", file: "- a\n- b\n", want: []string{"fuge.yaml:1", "mapping"}},
		{name: "bad yaml", file: "node_id: [\n", want: []string{"fuge.yaml", "yaml"}},
		{name: "missing file", args: []string{"--config", "/nonexistent/fuge.yaml"},
			want: []string{"/nonexistent/fuge.yaml"}},
		{name: "ring size not a power of two", args: []string{"--namespace", "a:1000"},
			want: []string{"--namespace", `"a"`, "power of two"}},
		{name: "ring size not a number", env: map[string]string{"FUGE_NAMESPACES": "a:big"},
			want: []string{"FUGE_NAMESPACES", `"big"`, "not a number"}},
		{name: "file ring size", file: "namespaces:\n  - {name: a, ring_size: 3}\n",
			want: []string{"fuge.yaml:2", "namespaces[0]", "power of two"}},
		{name: "namespace without a name", file: "namespaces:\n  - {ring_size: 8}\n",
			want: []string{"namespaces[0]", "name is empty"}},
		{name: "empty namespace name", args: []string{"--namespace", ":8"}, want: []string{"name is empty"}},
		{name: "bad header", file: "namespaces:\n  - {name: a, header: 'X Key'}\n",
			want: []string{"namespaces[0]", "header"}},
		{name: "duplicate namespace", args: []string{"--namespace", "a,a:8"}, want: []string{`"a"`, "twice"}},
		{name: "heartbeat not under lease", args: []string{"--lease-duration=10s", "--heartbeat-interval=10s"},
			want: []string{"heartbeat-interval", "lease-duration"}},
		{name: "bad address", args: []string{"--grpc-addr", "localhost"}, want: []string{"--grpc-addr", "HOST:PORT"}},
		{name: "bad envoy listener", args: []string{"--envoy-listener", "10000"}, want: []string{"--envoy-listener", "HOST:PORT"}},
		{name: "bad port", env: map[string]string{"FUGE_RAFT_ADDR": "127.0.0.1:http"},
			want: []string{"FUGE_RAFT_ADDR", "port"}},
		{name: "empty node id", file: "node_id: ''\n", want: []string{"node_id", "empty"}},
		{name: "bad log level", args: []string{"--log-level", "loud"}, want: []string{"--log-level", "debug, info"}},
		{name: "no session burst", args: []string{"--session-burst", "0"}, want: []string{"--session-burst", "from 1"}},
		{name: "session rate not a number", env: map[string]string{"FUGE_SESSION_RATE": "fast"}, want: []string{"FUGE_SESSION_RATE", "from 1"}},
		{name: "unknown flag", args: []string{"--lease", "1s"}, want: []string{"-lease"}},
		{name: "positional argument", args: []string{"serve"}, want: []string{`"serve"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				args = append([]string{"--config", writeFile(t, c.file)}, args...)
			}
			_, err := Load(args, env(c.env))
			if err == nil || errors.Is(err, flag.ErrHelp) {
				t.Fatalf("Load(%q) = %v, want an error", args, err)
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load(%q) = %q, want it to mention %q", args, err, w)
				}
			}
		})
	}
}

func TestHelp(t *testing.T) {
	if _, err := Load([]string{"--help"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load(--help) = %v, want flag.ErrHelp", err)
	}
	var b bytes.Buffer
	Usage(&b)
	help := b.String()
	for _, s := range settings() {
		for _, w := range []string{"--" + s.flag + " ", s.env, "default " + s.def, "key " + s.key} {
			if !strings.Contains(help, w) {
				t.Errorf("--help does not mention %q", w)
			}
		}
	}
	for _, w := range []string{"--config FILE", "FUGE_CONFIG", "127.0.0.1:7402", "60s", "5m"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help does not mention %q", w)
		}
	}
}

func TestBoolFlagsWithoutValue(t *testing.T) {
	c, err := Load([]string{"--insecure", "--pprof"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLS.Insecure || !c.Server.Pprof {
		t.Fatalf("--insecure --pprof: insecure %v pprof %v, want both true", c.TLS.Insecure, c.Server.Pprof)
	}
	c, err = Load([]string{"--insecure=false"}, func(string) string { return "" })
	if err != nil || c.TLS.Insecure {
		t.Fatalf("--insecure=false: %v %v", c.TLS.Insecure, err)
	}
}

// TestSessionLimits: the owner-session bucket is the manager's default
// unless set, and a flag sets it.
func TestSessionLimits(t *testing.T) {
	c, err := Load(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.SessionBurst != 0 || c.Server.SessionRate != 0 {
		t.Errorf("default bucket %d, %d a second; want the manager's defaults (0)", c.Server.SessionBurst, c.Server.SessionRate)
	}
	c, err = Load([]string{"--session-burst", "6000", "--session-rate=500"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.SessionBurst != 6000 || c.Server.SessionRate != 500 {
		t.Errorf("bucket %d, %d a second; want 6000, 500", c.Server.SessionBurst, c.Server.SessionRate)
	}
}
