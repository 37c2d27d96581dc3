package main

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// parseBootstrap reads fugectl's output as Envoy does: YAML is converted
// to JSON, which is parsed into the Bootstrap proto (unknown fields are
// errors) and validated.
func parseBootstrap(t *testing.T, out string, isYAML bool) *bootstrap.Bootstrap {
	t.Helper()
	raw := []byte(out)
	if isYAML {
		var v any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, out)
		}
		var err error
		if raw, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	var b bootstrap.Bootstrap
	if err := protojson.Unmarshal(raw, &b); err != nil {
		t.Fatalf("not a Bootstrap: %v\n%s", err, out)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("invalid Bootstrap: %v\n%s", err, out)
	}
	return &b
}

// checkBootstrap checks the parts of a bootstrap fugectl is responsible
// for.
func checkBootstrap(t *testing.T, b *bootstrap.Bootstrap, node, ns string, managers []string, kind cluster.Cluster_DiscoveryType, adminPort uint32) {
	t.Helper()
	n := b.GetNode()
	if n.GetId() != node || n.GetCluster() != ns || n.GetMetadata().GetFields()["fuge.namespace"].GetStringValue() != ns {
		t.Errorf("node %v, want id %q, cluster and fuge.namespace %q", n, node, ns)
	}
	dyn := b.GetDynamicResources()
	ads := dyn.GetAdsConfig()
	if ads.GetApiType() != core.ApiConfigSource_GRPC || ads.GetTransportApiVersion() != core.ApiVersion_V3 ||
		len(ads.GetGrpcServices()) != 1 || ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "fuge_managers" {
		t.Errorf("ads_config %v", ads)
	}
	for name, cs := range map[string]*core.ConfigSource{"lds": dyn.GetLdsConfig(), "cds": dyn.GetCdsConfig()} {
		if cs.GetAds() == nil || cs.GetResourceApiVersion() != core.ApiVersion_V3 {
			t.Errorf("%s_config %v, want ADS, V3", name, cs)
		}
	}
	cs := b.GetStaticResources().GetClusters()
	if len(cs) != 1 || cs[0].GetName() != "fuge_managers" || cs[0].GetType() != kind {
		t.Fatalf("static clusters %v, want fuge_managers of type %v", cs, kind)
	}
	var got []string
	for _, loc := range cs[0].GetLoadAssignment().GetEndpoints() {
		for _, ep := range loc.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			got = append(got, sa.GetAddress()+" "+strconv.FormatUint(uint64(sa.GetPortValue()), 10))
		}
	}
	if !slices.Equal(got, managers) {
		t.Errorf("managers %v, want %v", got, managers)
	}
	var po httpopts.HttpProtocolOptions
	if err := cs[0].GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil {
		t.Errorf("protocol options: %v", err)
	} else if po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("protocol options %v, want HTTP/2", &po)
	}
	if sa := b.GetAdmin().GetAddress().GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != adminPort {
		t.Errorf("admin on %v, want 127.0.0.1:%d", sa, adminPort)
	}
	if len(b.GetStaticResources().GetListeners()) != 0 {
		t.Error("static listeners: every listener should come over ADS")
	}
}

func TestEnvoyBootstrap(t *testing.T) {
	for _, c := range []struct {
		name      string
		args      []string
		yaml      bool
		node, ns  string
		managers  []string
		kind      cluster.Cluster_DiscoveryType
		adminPort uint32
	}{
		{"defaults", []string{"envoy-bootstrap", "--node", "envoy-1"}, true,
			"envoy-1", "default", []string{"127.0.0.1 7401"}, cluster.Cluster_STATIC, 9901},
		{"three managers", []string{"envoy-bootstrap", "--manager", "10.0.0.1:7401,[::1]:7411, 10.0.0.3:7421", "--node", "e", "--namespace", "presence", "--admin-port", "19000"}, true,
			"e", "presence", []string{"10.0.0.1 7401", "::1 7411", "10.0.0.3 7421"}, cluster.Cluster_STATIC, 19000},
		{"hostnames", []string{"envoy-bootstrap", "--manager=m1.internal:7401,m2.internal:7401", "--node=e"}, true,
			"e", "default", []string{"m1.internal 7401", "m2.internal 7401"}, cluster.Cluster_STRICT_DNS, 9901},
		{"json", []string{"envoy-bootstrap", "--node", "e", "-o", "json"}, false,
			"e", "default", []string{"127.0.0.1 7401"}, cluster.Cluster_STATIC, 9901},
		{"global flags first", []string{"--manager", "10.0.0.9:1", "-o=json", "envoy-bootstrap", "--node", "e"}, false,
			"e", "default", []string{"10.0.0.9 1"}, cluster.Cluster_STATIC, 9901},
		// Values YAML would read as numbers or booleans stay strings.
		{"quoting", []string{"envoy-bootstrap", "--node", "123", "--namespace", "true"}, true,
			"123", "true", []string{"127.0.0.1 7401"}, cluster.Cluster_STATIC, 9901},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := fugectl(t, map[string]string{"FUGE_MANAGER": "10.9.9.9:7402"}, c.args...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if isJSON := strings.HasPrefix(out, "{"); isJSON == c.yaml {
				t.Errorf("output is JSON: %v, want YAML: %v", isJSON, c.yaml)
			}
			checkBootstrap(t, parseBootstrap(t, out, c.yaml), c.node, c.ns, c.managers, c.kind, c.adminPort)
		})
	}
}

func TestEnvoyBootstrapErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no port", []string{"--manager", "localhost", "--node", "e"}, []string{"--manager", `"localhost"`, "HOST:PORT"}},
		{"port zero", []string{"--manager", "10.0.0.1:7401,10.0.0.2:0", "--node", "e"}, []string{"--manager", `"10.0.0.2:0"`, "port"}},
		{"port name", []string{"--manager", "10.0.0.1:grpc", "--node", "e"}, []string{"--manager", `"10.0.0.1:grpc"`, "port"}},
		{"no host", []string{"--manager", ":7401", "--node", "e"}, []string{"--manager", "HOST:PORT"}},
		{"empty entry", []string{"--manager", "10.0.0.1:7401,", "--node", "e"}, []string{"--manager", `""`}},
		{"no node", nil, []string{"--node ID is required"}},
		{"empty namespace", []string{"--node", "e", "--namespace", ""}, []string{"--namespace"}},
		{"admin port", []string{"--node", "e", "--admin-port", "70000"}, []string{"--admin-port", "70000"}},
		{"output", []string{"--node", "e", "-o", "table"}, []string{`-o "table"`, "yaml or json"}},
		{"argument", []string{"--node", "e", "extra"}, []string{`"extra"`}},
		{"unknown flag", []string{"--node", "e", "--ring-size", "8"}, []string{"ring-size"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := fugectl(t, nil, append([]string{"envoy-bootstrap"}, c.args...)...)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", code, out, exitUsage)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not mention %q", errOut, w)
				}
			}
		})
	}
}

func TestEnvoyBootstrapHelp(t *testing.T) {
	code, out, errOut := fugectl(t, nil, "envoy-bootstrap", "--help")
	if code != exitOK || errOut != "" || !strings.Contains(out, "--node ID") || !strings.Contains(out, "--admin-port") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestEnvoyExampleBootstrap: examples/envoy/bootstrap.yaml is what
// fugectl prints today (its comment lines aside).
func TestEnvoyExampleBootstrap(t *testing.T) {
	const path = "../../examples/envoy/bootstrap.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for line := range strings.SplitAfterSeq(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	code, out, errOut := fugectl(t, nil, "envoy-bootstrap", "--node", "envoy-1", "--namespace", "default")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if got := strings.Join(lines, ""); got != out {
		t.Errorf("%s is stale; regenerate it with the command in its header.\n got:\n%s\nwant:\n%s", path, got, out)
	}
}
