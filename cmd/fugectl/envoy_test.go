package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/fuge-project/fuge/fugetls"
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
		{"TLS flags first", []string{"--tls-dir", testCerts, "--insecure=false", "--token-file", "t", "envoy-bootstrap", "--node", "e"}, true,
			"e", "default", []string{"127.0.0.1 7401"}, cluster.Cluster_STATIC, 9901},
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
			b := parseBootstrap(t, out, c.yaml)
			checkBootstrap(t, b, c.node, c.ns, c.managers, c.kind, c.adminPort)
			files := fugetls.DirFiles(testCerts, fugetls.ProxyBase)
			checkTLSSocket(t, b, &files)
		})
	}
}

// checkTLSSocket checks the managers' cluster's transport socket: mutual
// TLS with files (absolute paths), accepting only managers' IDs; none
// when files is nil.
func checkTLSSocket(t *testing.T, b *bootstrap.Bootstrap, files *fugetls.Files) {
	t.Helper()
	ts := b.GetStaticResources().GetClusters()[0].GetTransportSocket()
	if files == nil {
		if ts != nil {
			t.Errorf("transport socket %v, want none (plaintext)", ts)
		}
		return
	}
	if ts.GetName() != "envoy.transport_sockets.tls" {
		t.Fatalf("transport socket %v, want envoy.transport_sockets.tls", ts)
	}
	var tc tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&tc); err != nil {
		t.Fatalf("transport socket's typed_config: %v", err)
	}
	if err := tc.ValidateAll(); err != nil {
		t.Fatalf("invalid UpstreamTlsContext: %v", err)
	}
	common := tc.GetCommonTlsContext()
	certs := common.GetTlsCertificates()
	if len(certs) != 1 || certs[0].GetCertificateChain().GetFilename() != files.Cert || certs[0].GetPrivateKey().GetFilename() != files.Key {
		t.Errorf("tls_certificates %v, want %s and %s", certs, files.Cert, files.Key)
	}
	for _, p := range []string{files.CA, files.Cert, files.Key} {
		if !filepath.IsAbs(p) {
			t.Errorf("%s is not an absolute path", p)
		}
	}
	vc := common.GetValidationContext()
	if vc.GetTrustedCa().GetFilename() != files.CA {
		t.Errorf("trusted_ca %v, want %s", vc.GetTrustedCa(), files.CA)
	}
	sans := vc.GetMatchTypedSubjectAltNames()
	if len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_URI ||
		sans[0].GetMatcher().GetPrefix() != "spiffe://fuge/manager/" || sans[0].GetMatcher().GetIgnoreCase() {
		t.Errorf("match_typed_subject_alt_names %v, want one URI prefix spiffe://fuge/manager/", sans)
	}
	if !strings.HasPrefix(fugetls.ManagerID("m1").String(), sans[0].GetMatcher().GetPrefix()) {
		t.Errorf("a manager's ID %v does not match %v", fugetls.ManagerID("m1"), sans[0])
	}
	if !slices.Equal(common.GetAlpnProtocols(), []string{"h2"}) {
		t.Errorf("alpn_protocols %v, want h2 (grpc-go servers need it)", common.GetAlpnProtocols())
	}
}

// TestEnvoyBootstrapTLS: where the files come from, and --insecure.
func TestEnvoyBootstrapTLS(t *testing.T) {
	dir := t.TempDir()
	rel, err := filepath.Rel(mustGetwd(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		name   string
		env    map[string]string
		args   []string
		want   *fugetls.Files
		stderr string // "" or what it must contain
	}{
		{"flag dir, relative", nil, []string{"--tls-dir", rel},
			&fugetls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "proxy.crt"), Key: filepath.Join(dir, "proxy.key")},
			"does not exist here"},
		{"env dir", map[string]string{tlsDirEnv: testCerts}, nil, ptr(fugetls.DirFiles(testCerts, fugetls.ProxyBase)), ""},
		{"files", nil, []string{"--tls-ca", "a/ca.pem", "--tls-cert", "b/envoy.pem", "--tls-key", "/c/envoy.key"},
			&fugetls.Files{CA: abs("a/ca.pem"), Cert: abs("b/envoy.pem"), Key: "/c/envoy.key"}, "does not exist here"},
		{"env files", map[string]string{tlsCAEnv: "/x/ca", tlsCertEnv: "/x/c", tlsKeyEnv: "/x/k"}, nil,
			&fugetls.Files{CA: "/x/ca", Cert: "/x/c", Key: "/x/k"}, "/x/ca does not exist here"},
		{"insecure", nil, []string{"--insecure"}, nil, "--insecure"},
		{"env insecure", map[string]string{insecureEnv: "1"}, nil, nil, "plaintext"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := fugectl(t, c.env, append([]string{"envoy-bootstrap", "--node", "e", "-o", "json"}, c.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if c.stderr == "" && errOut != "" || !strings.Contains(errOut, c.stderr) {
				t.Errorf("stderr %q, want %q", errOut, c.stderr)
			}
			checkTLSSocket(t, parseBootstrap(t, out, false), c.want)
		})
	}
}

// TestEnvoyBootstrapInsecureFirst: a boolean flag before the command
// takes no value, so envoy-bootstrap is still found.
func TestEnvoyBootstrapInsecureFirst(t *testing.T) {
	code, out, errOut := fugectl(t, nil, "--insecure", "envoy-bootstrap", "--node", "e")
	if code != exitOK || !strings.Contains(errOut, "--insecure") {
		t.Fatalf("exit %d, stderr %q; want 0 and a warning", code, errOut)
	}
	checkTLSSocket(t, parseBootstrap(t, out, true), nil)
}

func ptr[T any](v T) *T { return &v }

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
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
		{"some TLS files", []string{"--node", "e", "--tls-ca", "ca.pem"}, []string{"--tls-ca, --tls-cert and --tls-key go together"}},
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

// exampleCerts is where examples/envoy/bootstrap.yaml expects the
// certificates (a container's mount, say).
const exampleCerts = "/etc/fuge-certs"

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
	code, out, errOut := fugectl(t, nil, "envoy-bootstrap", "--node", "envoy-1", "--namespace", "default", "--tls-dir", exampleCerts)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if got := strings.Join(lines, ""); got != out {
		t.Errorf("%s is stale; regenerate it with the command in its header.\n got:\n%s\nwant:\n%s", path, got, out)
	}
}
