package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/fuge-project/fuge/manager"
)

// fuzzTable is the settings table with admin_token_file reading nothing:
// a fuzzed file could name /dev/zero.
func fuzzTable() []setting {
	table := settings()
	for i := range table {
		if table[i].key == "admin_token_file" {
			table[i].set = func(c *Config, v string) error { c.Server.AdminToken = v; return nil }
		}
	}
	return table
}

// fuzzDefaults is the configuration Load starts from.
func fuzzDefaults() Config {
	c := Config{Server: manager.DefaultServerConfig(), LogLevel: slog.LevelInfo, EnvoyListener: DefaultEnvoyListener, ClockRate: 1}
	c.Server.Namespaces = []manager.NamespaceConfig{{Name: "default", RingSize: 4096}}
	return c
}

// FuzzConfigFile loads fuzzed YAML as the --config file. Every error must
// name the file; the same file must load to the same configuration; and a
// file that is accepted and passes the checks Load makes must have
// namespaces that read back the same when written out as a YAML list.
func FuzzConfigFile(f *testing.F) {
	f.Add("node_id: n1\ndata_dir: /var/lib/fuge\nlease_duration: 30s\n")
	f.Add("namespaces:\n  - name: users\n    ring_size: 1024\n    header: X-User-Id\n    lease_duration: 60s\n  - name: carts\n")
	f.Add("lease_duration: &t 40s\nnamespaces:\n  - {name: a, lease_duration: *t}\n")
	f.Add("namespaces: []\npprof: true\nclock_rate: 0.5\nmemory_limit: 192MiB\nlog_level: WARN\n")
	f.Add("node_id: a\nnode_id: b\n")
	f.Add("namespaces:\n  - {name: a, ring_size: 3}\n")
	f.Add("- a\n- b\n")
	f.Add("join: [a, b]\nheartbeat_interval: 1s\nraft_timeout: 5ms\n")
	f.Add("namespaces:\n  - {name: 'a b', header: '', ring_size: 0x10}\n")
	f.Add("? [a]\n: 1\n")
	path := filepath.Join(f.TempDir(), "fuge.yaml")
	table := fuzzTable()
	load := func(t *testing.T, data string) (Config, error) {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		c := fuzzDefaults()
		err := loadFile(&c, table, path)
		return c, err
	}
	f.Fuzz(func(t *testing.T, data string) {
		c, err := load(t, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if again, err := load(t, data); err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("the same file loaded twice: %+v, then %+v (%v)", c, again, err)
		}
		if c.Server.HeartbeatInterval == 0 {
			c.Server.HeartbeatInterval = c.Server.LeaseDuration / 6
		}
		if check(c.Server) != nil {
			return
		}
		// Accepted: its namespaces, written out, read back the same.
		type nsYAML struct {
			Name          string `yaml:"name"`
			RingSize      int    `yaml:"ring_size"`
			Header        string `yaml:"header,omitempty"`
			LeaseDuration string `yaml:"lease_duration,omitempty"`
		}
		list := []nsYAML{}
		for _, ns := range c.Server.Namespaces {
			y := nsYAML{Name: ns.Name, RingSize: ns.RingSize, Header: ns.Header}
			if ns.LeaseDuration != 0 {
				y.LeaseDuration = ns.LeaseDuration.String()
			}
			list = append(list, y)
		}
		out, err := yaml.Marshal(map[string]any{"namespaces": list})
		if err != nil {
			t.Fatal(err)
		}
		back, err := load(t, string(out))
		if err != nil {
			t.Fatalf("accepted namespaces written out as\n%s\nare refused: %v", out, err)
		}
		if !reflect.DeepEqual(back.Server.Namespaces, c.Server.Namespaces) {
			t.Fatalf("namespaces %+v, written out as\n%s\nread back as %+v", c.Server.Namespaces, out, back.Server.Namespaces)
		}
	})
}

// FuzzSetting gives one value to one setting as a flag, as an environment
// variable and in the file (a YAML string), and checks that the three
// sources agree, as the package promises: Load accepts all or none, and
// the configurations it returns are equal. A value that set refuses
// changes nothing. admin_token_file is left out (it reads the file named),
// and namespaces is not compared in the file, whose form is a list.
func FuzzSetting(f *testing.F) {
	table := fuzzTable()
	for i, s := range table {
		if s.key != "admin_token_file" {
			f.Add(uint8(i), s.def)
		}
	}
	at := func(key string) uint8 {
		for i, s := range table {
			if s.key == key {
				return uint8(i)
			}
		}
		f.Fatalf("no setting %q", key)
		return 0
	}
	f.Add(at("raft_addr"), "[::1]:7400")
	f.Add(at("grpc_addr"), "host:http")
	f.Add(at("lease_duration"), "-1s")
	f.Add(at("raft_timeout"), "9ms")
	f.Add(at("clock_rate"), "NaN")
	f.Add(at("memory_limit"), "1GiB")
	f.Add(at("memory_limit"), "9223372036854775807KiB")
	f.Add(at("log_level"), "Warning")
	f.Add(at("namespaces"), " a:8, b ,,c:1")
	f.Add(at("namespaces"), "a:0x10")
	f.Add(at("heartbeat_interval"), "8s")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, idx uint8, v string) {
		s := table[int(idx)%len(table)]
		if s.key == "admin_token_file" {
			return
		}
		c := fuzzDefaults()
		if err := s.set(&c, v); err != nil && !reflect.DeepEqual(c, fuzzDefaults()) {
			t.Fatalf("%s %q refused (%v) but changed the configuration", s.key, v, err)
		}

		type result struct {
			src string
			c   Config
			err error
		}
		var rs []result
		c, err := Load([]string{"--" + s.flag + "=" + v}, env(nil))
		rs = append(rs, result{"flag", c, err})
		if v != "" { // an empty variable counts as unset
			c, err = Load(nil, env(map[string]string{s.env: v}))
			rs = append(rs, result{"env", c, err})
		}
		if s.key != "namespaces" && utf8.ValidString(v) {
			doc, err := yaml.Marshal(map[string]string{s.key: v})
			if err != nil {
				t.Fatal(err)
			}
			var back map[string]string
			if err := yaml.Unmarshal(doc, &back); err != nil || back[s.key] != v {
				return // yaml.v3 does not write every string so that it reads back
			}
			path := filepath.Join(dir, "fuge.yaml")
			if err := os.WriteFile(path, doc, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err = Load([]string{"--config", path}, env(nil))
			c.File = ""
			rs = append(rs, result{"file", c, err})
		}
		for _, r := range rs[1:] {
			if (r.err == nil) != (rs[0].err == nil) || r.err == nil && !reflect.DeepEqual(r.c, rs[0].c) {
				t.Fatalf("%s %q: from the %s: %+v, %v; from the %s: %+v, %v",
					s.key, v, rs[0].src, rs[0].c, rs[0].err, r.src, r.c, r.err)
			}
		}
		if c := rs[0].c; rs[0].err == nil {
			if err := c.Server.Validate(); err != nil {
				t.Fatalf("%s %q: Load accepted a configuration that does not validate: %v", s.key, v, err)
			}
			if !(c.ClockRate >= 0 && c.ClockRate <= 10) || c.MemoryLimit < 0 {
				t.Fatalf("%s %q: Load accepted clock rate %v, memory limit %d", s.key, v, c.ClockRate, c.MemoryLimit)
			}
		}
	})
}
