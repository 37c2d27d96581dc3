// Package config loads fuge-manager's configuration from flags, FUGE_*
// environment variables and an optional YAML file, in that order of
// precedence, over manager.DefaultServerConfig.
//
// Every setting is described once, in the settings table: its flag, its
// environment variable, its YAML key, its default and how to parse a value.
// The three sources feed the same parser, so a value means the same thing
// wherever it is written, and an error names the flag, variable or key (with
// the file's line) that it came from.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ring"
)

// Config is a loaded configuration.
type Config struct {
	// Server is complete: every default is filled in and it validates.
	// Logger, Clock, Observer and Heartbeat are left for main to wire.
	Server   manager.ServerConfig
	LogLevel slog.Level
	// MemoryLimit is the Go runtime's soft memory limit in bytes; 0 = unset.
	MemoryLimit int64
	// EnvoyListener is the host:port of the Listener the manager's xDS
	// server gives Envoy nodes (xds.LeaseTableConfig.EnvoyListener).
	EnvoyListener string
	// ClockRate is the lease clock's rate of real time (--clock-rate, for
	// fault testing); 1 is real time.
	ClockRate float64
	// File is the YAML file that was read, or empty.
	File string
	// TLS are the certificate settings (--tls-dir, --tls-ca, --tls-cert,
	// --tls-key, --insecure); main loads them (fugetls.ManagerBase).
	TLS fugetls.Options
}

// setting is one configuration knob, reachable as --flag, ENV and yaml_key.
type setting struct {
	flag, env, key string
	arg            string // placeholder for the value in --help
	usage          string // one line for --help
	def            string // default for --help
	set            func(*Config, string) error
}

// settings lists every knob in --help order. config (the file itself) is
// handled before the others, and namespaces also has a YAML list form.
func settings() []setting {
	return []setting{
		{flag: "node-id", env: "FUGE_NODE_ID", key: "node_id", arg: "ID", def: "node1",
			usage: "stable raft server ID; keep it across restarts",
			set:   func(c *Config, v string) error { return nonEmpty(&c.Server.NodeID, v) }},
		{flag: "data-dir", env: "FUGE_DATA_DIR", key: "data_dir", arg: "DIR", def: "./fuge-data",
			usage: "raft log, stable store and snapshots",
			set:   func(c *Config, v string) error { return nonEmpty(&c.Server.DataDir, v) }},
		{flag: "raft-addr", env: "FUGE_RAFT_ADDR", key: "raft_addr", arg: "HOST:PORT", def: "127.0.0.1:7400",
			usage: "raft transport address, advertised to the other members",
			set:   func(c *Config, v string) error { return hostPort(&c.Server.RaftAddr, v) }},
		{flag: "grpc-addr", env: "FUGE_GRPC_ADDR", key: "grpc_addr", arg: "HOST:PORT", def: "127.0.0.1:7401",
			usage: "gRPC address: owner protocol and xDS (Envoy ADS, proxyless gRPC)",
			set:   func(c *Config, v string) error { return hostPort(&c.Server.GRPCAddr, v) }},
		{flag: "http-addr", env: "FUGE_HTTP_ADDR", key: "http_addr", arg: "HOST:PORT", def: "127.0.0.1:7402",
			usage: "HTTP address: admin API (fugectl), /metrics, /healthz, /readyz",
			set:   func(c *Config, v string) error { return hostPort(&c.Server.HTTPAddr, v) }},
		{flag: "advertise-raft-addr", env: "FUGE_ADVERTISE_RAFT_ADDR", key: "advertise_raft_addr", arg: "HOST:PORT", def: "raft-addr",
			usage: "raft address the other members are told, when not the bound one (NAT, relay)",
			set:   func(c *Config, v string) error { return optHostPort(&c.Server.AdvertiseRaftAddr, v) }},
		{flag: "advertise-grpc-addr", env: "FUGE_ADVERTISE_GRPC_ADDR", key: "advertise_grpc_addr", arg: "HOST:PORT", def: "grpc-addr",
			usage: "gRPC address owners and lookups are sent to when this node leads",
			set:   func(c *Config, v string) error { return optHostPort(&c.Server.AdvertiseGRPCAddr, v) }},
		{flag: "advertise-http-addr", env: "FUGE_ADVERTISE_HTTP_ADDR", key: "advertise_http_addr", arg: "HOST:PORT", def: "http-addr",
			usage: "admin HTTP address the other members are told",
			set:   func(c *Config, v string) error { return optHostPort(&c.Server.AdvertiseHTTPAddr, v) }},
		{flag: "join", env: "FUGE_JOIN", key: "join", arg: "HOST:PORT", def: "none: bootstrap a single-node cluster",
			usage: "admin HTTP address of a running member to join",
			set: func(c *Config, v string) error {
				if v == "" {
					c.Server.Join = ""
					return nil
				}
				return hostPort(&c.Server.Join, v)
			}},
		{flag: "admin-token-file", env: "FUGE_ADMIN_TOKEN_FILE", key: "admin_token_file", arg: "FILE", def: "none: admin writes are open",
			usage: "file whose first line is the admin token: namespace create and delete, drain,\n\tcluster join and pprof then need \"Authorization: Bearer <token>\" (fugectl --token-file);\n\tevery member needs the same file",
			set: func(c *Config, v string) error {
				if v == "" {
					c.Server.AdminToken = ""
					return nil
				}
				b, err := os.ReadFile(v)
				if err != nil {
					return err
				}
				tok, _, _ := strings.Cut(string(b), "\n")
				if tok = strings.TrimSpace(tok); len(tok) < 16 {
					return fmt.Errorf("the token in %s must be at least 16 bytes", v)
				}
				c.Server.AdminToken = tok
				return nil
			}},
		{flag: "tls-dir", env: "FUGE_TLS_DIR", key: "tls_dir", arg: "DIR", def: fugetls.DefaultDir,
			usage: "certificates as fugectl certs init writes them: ca.crt, manager.crt, manager.key;\n\tre-read when they change. Every port is mutual TLS",
			set:   func(c *Config, v string) error { return nonEmpty(&c.TLS.Dir, v) }},
		{flag: "tls-ca", env: "FUGE_TLS_CA", key: "tls_ca", arg: "FILE", def: "none: from --tls-dir",
			usage: "CA bundle (PEM) instead of --tls-dir; with --tls-cert and --tls-key",
			set:   func(c *Config, v string) error { c.TLS.CA = v; return nil }},
		{flag: "tls-cert", env: "FUGE_TLS_CERT", key: "tls_cert", arg: "FILE", def: "none: from --tls-dir",
			usage: "this node's certificate (URI SAN spiffe://fuge/manager/<name>)",
			set:   func(c *Config, v string) error { c.TLS.Cert = v; return nil }},
		{flag: "tls-key", env: "FUGE_TLS_KEY", key: "tls_key", arg: "FILE", def: "none: from --tls-dir",
			usage: "this node's private key",
			set:   func(c *Config, v string) error { c.TLS.Key = v; return nil }},
		{flag: "insecure", env: "FUGE_INSECURE", key: "insecure", arg: "BOOL", def: "false",
			usage: "no TLS and no authentication on any port: for tests only",
			set:   func(c *Config, v string) error { return boolean(&c.TLS.Insecure, v) }},
		{flag: "pprof", env: "FUGE_PPROF", key: "pprof", arg: "BOOL", def: "false",
			usage: "serve /debug/pprof on the admin address (to admins when a token is set)",
			set:   func(c *Config, v string) error { return boolean(&c.Server.Pprof, v) }},
		{flag: "leader-serves-lookups", env: "FUGE_LEADER_SERVES_LOOKUPS", key: "leader_serves_lookups", arg: "BOOL", def: "false",
			usage: "the leader serves Lookup streams even while a standby in contact could; by default it\n\tsends them to a standby (UNAVAILABLE, trailer fuge-standby) and serves them only with none",
			set:   func(c *Config, v string) error { return boolean(&c.Server.LeaderServesLookups, v) }},
		{flag: "lease-duration", env: "FUGE_LEASE_DURATION", key: "lease_duration", arg: "DURATION", def: "8s",
			usage: "owner lease T of namespaces that set none; the manager holds T·65/60",
			set:   func(c *Config, v string) error { return duration(&c.Server.LeaseDuration, v) }},
		{flag: "raft-timeout", env: "FUGE_RAFT_TIMEOUT", key: "raft_timeout", arg: "DURATION", def: "1s (hashicorp/raft's)",
			usage: "raft heartbeat and election timeout; the leader lease is half of it",
			set: func(c *Config, v string) error {
				var d time.Duration
				if err := duration(&d, v); err != nil {
					return err
				}
				if d < 10*time.Millisecond {
					return fmt.Errorf("%v is under 10ms", d)
				}
				c.Server.RaftHeartbeatTimeout, c.Server.RaftElectionTimeout, c.Server.RaftLeaderLeaseTimeout = d, d, d/2
				return nil
			}},
		{flag: "clock-rate", env: "FUGE_CLOCK_RATE", key: "clock_rate", arg: "RATE", def: "1",
			usage: "for fault testing only: run the lease clock at RATE times real time (0 freezes it);\n\tthe guarantee assumes rates within 60:65 of the owners'",
			set: func(c *Config, v string) error {
				r, err := strconv.ParseFloat(v, 64)
				if err != nil || !(r >= 0 && r <= 10) { // NaN too
					return fmt.Errorf("want a rate from 0 to 10")
				}
				c.ClockRate = r
				return nil
			}},
		{flag: "log-retention", env: "FUGE_LOG_RETENTION", key: "log_retention", arg: "DURATION", def: "0",
			usage: "how long the replicated change log keeps a change; 0 keeps none. Nothing in\n\tfuge-manager reads it: Lookups over xDS resume from their block versions",
			set:   func(c *Config, v string) error { return nonNegativeDuration(&c.Server.LogRetention, v) }},
		{flag: "heartbeat-interval", env: "FUGE_HEARTBEAT_INTERVAL", key: "heartbeat_interval", arg: "DURATION", def: "lease-duration/6",
			usage: "how often the leader tells lookups it is alive; under lease-duration",
			set:   func(c *Config, v string) error { return duration(&c.Server.HeartbeatInterval, v) }},
		{flag: "envoy-listener", env: "FUGE_ENVOY_LISTENER", key: "envoy_listener", arg: "HOST:PORT", def: "127.0.0.1:10000",
			usage: "address of the Listener that Envoy nodes are given over xDS (where Envoy accepts\n\trequests); the same on every manager",
			set:   func(c *Config, v string) error { return hostPort(&c.EnvoyListener, v) }},
		{flag: "memory-limit", env: "FUGE_MEMORY_LIMIT", key: "memory_limit", arg: "SIZE", def: "0",
			usage: "soft memory limit for the Go runtime (e.g. 192MiB, 1GiB); 0 leaves Go's default\n\t(GOMEMLIMIT); the GC then returns memory after a burst instead of keeping it",
			set:   setMemoryLimit},
		{flag: "session-burst", env: "FUGE_SESSION_BURST", key: "session_burst", arg: "N", def: "1000",
			usage: "owner sessions one client (its certificate, or its IP address without TLS) may open at once;\n\tthen --session-rate a second",
			set:   func(c *Config, v string) error { return sessionLimit(&c.Server.SessionBurst, v) }},
		{flag: "session-rate", env: "FUGE_SESSION_RATE", key: "session_rate", arg: "N", def: "100",
			usage: "owner sessions a second one client may open once its --session-burst is spent",
			set:   func(c *Config, v string) error { return sessionLimit(&c.Server.SessionRate, v) }},
		{flag: "log-level", env: "FUGE_LOG_LEVEL", key: "log_level", arg: "LEVEL", def: "info",
			usage: "debug, info, warn or error",
			set:   setLogLevel},
		{flag: "namespace", env: "FUGE_NAMESPACES", key: "namespaces", arg: "NAME[:RINGSIZE][,...]", def: "default:4096",
			usage: "namespaces created at start when missing; repeat or comma-separate;\n\tan empty value means none (the file's list also takes header, lease_duration)",
			set:   setNamespaces},
	}
}

const (
	configFlag = "config"
	configEnv  = "FUGE_CONFIG"
)

// DefaultEnvoyListener is the default of --envoy-listener
// (xds.DefaultEnvoyListener).
const DefaultEnvoyListener = "127.0.0.1:10000"

// Load builds the configuration from args (without the program name), the
// environment read through getenv (an empty value counts as unset) and the
// YAML file named by --config or FUGE_CONFIG. It returns flag.ErrHelp when
// --help was asked for. Every other error is a mistake in how the program
// was called (a bad flag, variable, file or value), named in the message.
func Load(args []string, getenv func(string) string) (Config, error) {
	fs := flag.NewFlagSet("fuge-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var file string
	fs.StringVar(&file, configFlag, "", "")
	// Flags are parsed first, to find the file, and applied last.
	type flagValue struct {
		s     *setting
		value string
	}
	var fromFlags []flagValue
	table := settings()
	for i := range table {
		s := &table[i]
		add := func(v string) error {
			fromFlags = append(fromFlags, flagValue{s, v})
			return nil
		}
		if s.arg == "BOOL" {
			fs.BoolFunc(s.flag, s.usage, add) // --insecure alone means true
		} else {
			fs.Func(s.flag, s.usage, add)
		}
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err // flag.ErrHelp for --help
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (fuge-manager takes only flags)", fs.Arg(0))
	}

	c := Config{Server: manager.DefaultServerConfig(), LogLevel: slog.LevelInfo, EnvoyListener: DefaultEnvoyListener, ClockRate: 1}
	c.Server.Namespaces = []manager.NamespaceConfig{{Name: "default", RingSize: 4096}}

	if file == "" {
		file = getenv(configEnv)
	}
	if file != "" {
		if err := loadFile(&c, table, file); err != nil {
			return Config{}, err
		}
		c.File = file
	}
	for _, s := range table {
		if v := getenv(s.env); v != "" {
			if err := s.set(&c, v); err != nil {
				return Config{}, fmt.Errorf("%s=%q: %w", s.env, v, err)
			}
		}
	}
	// The namespace flag accumulates: every occurrence adds to one list that
	// replaces the lower layers' list.
	var nsFlag []string
	for _, f := range fromFlags {
		if f.s.flag == "namespace" {
			nsFlag = append(nsFlag, f.value)
			continue
		}
		if err := f.s.set(&c, f.value); err != nil {
			return Config{}, fmt.Errorf("--%s %q: %w", f.s.flag, f.value, err)
		}
	}
	if nsFlag != nil {
		v := strings.Join(nsFlag, ",")
		if err := setNamespaces(&c, v); err != nil {
			return Config{}, fmt.Errorf("--namespace %q: %w", v, err)
		}
	}

	if c.Server.HeartbeatInterval == 0 {
		c.Server.HeartbeatInterval = c.Server.LeaseDuration / 6
	}
	if err := check(c.Server); err != nil {
		return Config{}, err
	}
	return c, nil
}

// check tests the settings against each other, naming them as a person
// wrote them, then leaves the rest to the manager's own Validate.
func check(s manager.ServerConfig) error {
	if s.HeartbeatInterval >= s.LeaseDuration {
		return fmt.Errorf("heartbeat-interval %v must be under lease-duration %v", s.HeartbeatInterval, s.LeaseDuration)
	}
	seen := map[string]bool{}
	for _, ns := range s.Namespaces {
		if seen[ns.Name] {
			return fmt.Errorf("namespaces: %q is listed twice", ns.Name)
		}
		seen[ns.Name] = true
	}
	return s.Validate()
}

// Usage writes --help.
func Usage(w io.Writer) {
	fmt.Fprint(w, `Usage: fuge-manager [flags]

Runs one Fuge manager node: the raft-replicated lease table, the owner
protocol and xDS over gRPC, and the admin API over HTTP. With no flags it is
a working single-node manager with one namespace, "default" (ring size 4096),
keeping its state in ./fuge-data. Add nodes with --join.

Each setting comes from, in order of precedence: its flag, its environment
variable (an empty value counts as unset), the YAML file (--config), the
default. Durations are Go durations: 500ms, 30s, 5m, 1h30m.

Flags:
`)
	fmt.Fprintf(w, "  --%s FILE\n\tYAML file with the settings below under their keys\n\t(env %s)\n", configFlag, configEnv)
	for _, s := range settings() {
		fmt.Fprintf(w, "  --%s %s\n\t%s\n\t(default %s; env %s; key %s)\n", s.flag, s.arg, s.usage, s.def, s.env, s.key)
	}
	fmt.Fprint(w, `  --help
	print this help

Example file:
	node_id: node1
	data_dir: /var/lib/fuge
	lease_duration: 30s
	namespaces:
	  - name: users
	    ring_size: 1024
	    header: X-User-Id
	    lease_duration: 60s
	  - name: carts
`)
}

func nonEmpty(dst *string, v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	*dst = v
	return nil
}

func hostPort(dst *string, v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want HOST:PORT (IPv6 hosts in brackets)")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number in [0, 65535]", port)
	}
	*dst = v
	return nil
}

// optHostPort is hostPort where an empty value means unset.
func optHostPort(dst *string, v string) error {
	if v == "" {
		*dst = ""
		return nil
	}
	return hostPort(dst, v)
}

// boolean parses a flag's BOOL into dst.
func boolean(dst *bool, v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*dst = b
	return nil
}

// duration parses a positive duration into dst.
func duration(dst *time.Duration, v string) error { return parseDuration(dst, v, false) }

// nonNegativeDuration is duration with 0 allowed.
func nonNegativeDuration(dst *time.Duration, v string) error { return parseDuration(dst, v, true) }

func parseDuration(dst *time.Duration, v string, zero bool) error {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return errors.New("not a duration (want e.g. 500ms, 30s, 5m)")
	case d < 0 && zero:
		return fmt.Errorf("must not be negative, not %v", d)
	case d <= 0 && !zero:
		return fmt.Errorf("must be positive, not %v", d)
	}
	*dst = d
	return nil
}

// setMemoryLimit parses a byte size: a number with an optional B, KiB, MiB
// or GiB suffix.
func setMemoryLimit(c *Config, v string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return errors.New("want a size like 192MiB, 1GiB or a number of bytes")
	}
	c.MemoryLimit = n * mult
	return nil
}

func setLogLevel(c *Config, v string) error {
	switch strings.ToLower(v) {
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "info":
		c.LogLevel = slog.LevelInfo
	case "warn", "warning":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		return errors.New("want debug, info, warn or error")
	}
	return nil
}

// setNamespaces parses NAME[:RINGSIZE][,...]; the empty string is no
// namespaces.
func setNamespaces(c *Config, v string) error {
	out := []manager.NamespaceConfig{}
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, size, hasSize := strings.Cut(item, ":")
		ns := manager.NamespaceConfig{Name: name, RingSize: 4096}
		if hasSize {
			n, err := strconv.Atoi(size)
			if err != nil {
				return fmt.Errorf("namespace %q: ring size %q is not a number", name, size)
			}
			ns.RingSize = n
		}
		if err := checkNamespace(ns); err != nil {
			return err
		}
		out = append(out, ns)
	}
	c.Server.Namespaces = out
	return nil
}

func checkNamespace(ns manager.NamespaceConfig) error {
	if ns.Name == "" {
		return errors.New("namespace name is empty")
	}
	if !ring.ValidRingSize(ns.RingSize) {
		return fmt.Errorf("namespace %q: ring size %d is not a power of two in [1, %d]", ns.Name, ns.RingSize, ring.MaxRingSize)
	}
	if ns.Header != "" && !validHeaderName(ns.Header) {
		return fmt.Errorf("namespace %q: %q is not a valid HTTP header name", ns.Name, ns.Header)
	}
	return nil
}

// validHeaderName reports whether h is an RFC 9110 token.
func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return h != ""
}

// sessionLimit sets a session bucket's rate or burst: from 1 to 1,000,000.
func sessionLimit(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1_000_000 {
		return fmt.Errorf("want a whole number from 1 to 1000000")
	}
	*dst = n
	return nil
}
