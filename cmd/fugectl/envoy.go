package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/fuge-project/fuge/fugetls"
)

// envoyBootstrapName is the command that prints an Envoy bootstrap. It
// talks to no manager and has flags of its own: its --manager takes the
// managers' gRPC addresses, not their admin ones, and -o takes yaml.
const envoyBootstrapName = "envoy-bootstrap"

// Defaults of envoy-bootstrap.
const (
	defaultXDSManager     = "127.0.0.1:7401" // fuge-manager's default --grpc-addr
	defaultEnvoyNamespace = "default"        // fuge-manager's default namespace
	defaultEnvoyAdminPort = 9901
	// managersCluster is the static cluster of manager addresses that
	// Envoy's ADS stream goes to.
	managersCluster = "fuge_managers"
	// namespaceMetadataKey is where a node names its namespace
	// (xds.NamespaceMetadataKey).
	namespaceMetadataKey = "fuge.namespace"
	// tlsSocketName is Envoy's TLS transport socket.
	tlsSocketName = "envoy.transport_sockets.tls"
	// managerIDPrefix starts the URI SAN of every manager's certificate
	// (fugetls.ManagerID): Envoy accepts a manager by its role, not its
	// host name.
	managerIDPrefix = "spiffe://" + fugetls.TrustDomain + "/" + string(fugetls.RoleManager) + "/"
)

// envoyBootstrapHelp is the command's line in fugectl --help.
const envoyBootstrapHelp = "print an Envoy bootstrap (ADS to the managers, everything else dynamic); talks to no manager\n" +
	"\tflags: --node ID (required), --manager GRPC_ADDR[,...] (the managers' --grpc-addr; default " + defaultXDSManager + "),\n" +
	"\t--namespace NS (default " + defaultEnvoyNamespace + "), --admin-port N (default 9901), -o yaml|json (default yaml);\n" +
	"\tEnvoy's ADS is mutual TLS with proxy.crt, proxy.key and ca.crt of --tls-dir (or --tls-cert, --tls-key, --tls-ca),\n" +
	"\tnamed by absolute path, and accepts a certificate naming spiffe://fuge/manager/...; --insecure: plaintext"

// envoyBootstrapArgs finds envoy-bootstrap on a command line: it must be
// the first word that is not a flag, as any command. It returns the other
// arguments, which are the command's own flags (the global --manager and
// -o are its too).
func envoyBootstrapArgs(args []string) ([]string, bool) {
	globalFlags := newFlagSet("")
	new(globals).register(globalFlags)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return nil, false
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if a != envoyBootstrapName {
				return nil, false
			}
			return append(args[:i:i], args[i+1:]...), true
		}
		name := strings.TrimLeft(a, "-")
		if f := globalFlags.Lookup(name); f != nil && !isBoolFlag(f) {
			i++ // the flag's value
		}
	}
	return nil, false
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// envoyBootstrapFlags are envoy-bootstrap's settings.
type envoyBootstrapFlags struct {
	managers  []string
	node      string
	namespace string
	adminPort int
	json      bool
	tls       *fugetls.Files // absolute paths; nil: plaintext (--insecure)
}

func parseEnvoyBootstrap(args []string, getenv func(string) string) (envoyBootstrapFlags, error) {
	tlsOpts, err := tlsFromEnv(getenv)
	if err != nil {
		return envoyBootstrapFlags{}, err
	}
	fs := newFlagSet("fugectl " + envoyBootstrapName)
	registerTLS(fs, &tlsOpts)
	fs.String("token-file", "", "") // accepted anywhere, as by every command; unused
	manager := fs.String("manager", defaultXDSManager, "")
	node := fs.String("node", "", "")
	ns := fs.String("namespace", defaultEnvoyNamespace, "")
	admin := fs.Int("admin-port", defaultEnvoyAdminPort, "")
	out := "yaml"
	fs.StringVar(&out, "o", out, "")
	fs.StringVar(&out, "output", out, "")
	fs.Duration("timeout", 0, "") // accepted anywhere, as by every command; unused
	if err := fs.Parse(args); err != nil {
		return envoyBootstrapFlags{}, flagError(err)
	}
	if fs.NArg() > 0 {
		return envoyBootstrapFlags{}, usagef("%s takes no arguments, got %q", envoyBootstrapName, fs.Arg(0))
	}
	f := envoyBootstrapFlags{node: *node, namespace: *ns, adminPort: *admin, json: out == "json"}
	switch {
	case f.node == "":
		return f, usagef("%s: --node ID is required (Envoy's node id, unique per Envoy)", envoyBootstrapName)
	case f.namespace == "":
		return f, usagef("%s: --namespace is empty", envoyBootstrapName)
	case f.adminPort < 0 || f.adminPort > 65535:
		return f, usagef("%s: --admin-port %d: want a port in [0, 65535]", envoyBootstrapName, f.adminPort)
	case out != "yaml" && out != "json":
		return f, usagef("%s: -o %q: want yaml or json", envoyBootstrapName, out)
	}
	for _, a := range strings.Split(*manager, ",") {
		a = strings.TrimSpace(a)
		if err := checkGRPCAddr(a); err != nil {
			return f, usagef("%s: --manager %q: %v", envoyBootstrapName, *manager, err)
		}
		f.managers = append(f.managers, a)
	}
	if !tlsOpts.Insecure {
		files, err := tlsFiles(tlsOpts, fugetls.ProxyBase)
		if err != nil {
			return f, err
		}
		// Envoy resolves a relative path against its own working
		// directory, which is seldom fugectl's.
		for _, p := range []*string{&files.CA, &files.Cert, &files.Key} {
			if *p, err = filepath.Abs(*p); err != nil {
				return f, err
			}
		}
		f.tls = &files
	}
	return f, nil
}

// checkGRPCAddr checks a manager's gRPC address: HOST:PORT, with a port
// Envoy can connect to.
func checkGRPCAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return fmt.Errorf("address %q: want HOST:PORT, the manager's --grpc-addr (IPv6 hosts in brackets)", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("address %q: port %q is not a number in [1, 65535]", a, port)
	}
	return nil
}

// runEnvoyBootstrap prints the bootstrap and returns the exit code.
func runEnvoyBootstrap(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	f, err := parseEnvoyBootstrap(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: fugectl %s --node ID [--manager GRPC_ADDR[,...]] [--namespace NS] [--admin-port N] [-o yaml|json]\n"+
			"\t[--tls-dir DIR | --tls-ca FILE --tls-cert FILE --tls-key FILE | --insecure]\n\n\t%s\n",
			envoyBootstrapName, envoyBootstrapHelp)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "fugectl: %v\nRun 'fugectl --help' for usage.\n", err)
		return exitUsage
	}
	if f.tls == nil {
		fmt.Fprintln(stderr, "fugectl: warning: --insecure: Envoy's ADS stream to the managers is plaintext, with no certificate; only managers run with --insecure accept it")
	} else {
		for _, p := range []string{f.tls.CA, f.tls.Cert, f.tls.Key} {
			if !exists(p) {
				fmt.Fprintf(stderr, "fugectl: note: %s does not exist here; Envoy reads it where it runs (make a set with fugectl certs init DIR)\n", p)
			}
		}
	}
	out, err := renderBootstrap(envoyBootstrap(f), f.json)
	if err == nil {
		_, err = stdout.Write(out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fugectl: %v\n", err)
		return exitError
	}
	return exitOK
}

// envoyBootstrap builds the bootstrap: the node, naming its namespace as
// lookups do; ADS over gRPC (HTTP/2) to a static cluster of every manager,
// Listeners and Clusters over ADS (Routes and Endpoints follow from them);
// the admin interface on 127.0.0.1.
func envoyBootstrap(f envoyBootstrapFlags) *bootstrap.Bootstrap {
	ads := &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
	// A standby manager refuses the stream; Envoy then tries the next
	// address after this back-off.
	grpc := &core.GrpcService{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{
		ClusterName: managersCluster,
		RetryPolicy: &core.RetryPolicy{RetryBackOff: &core.BackoffStrategy{
			BaseInterval: durationpb.New(100 * time.Millisecond),
			MaxInterval:  durationpb.New(5 * time.Second),
		}},
	}}}
	return &bootstrap.Bootstrap{
		Node: &core.Node{
			Id:      f.node,
			Cluster: f.namespace,
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				namespaceMetadataKey: structpb.NewStringValue(f.namespace),
			}},
		},
		StaticResources: &bootstrap.Bootstrap_StaticResources{Clusters: []*cluster.Cluster{managers(f.managers, f.tls)}},
		DynamicResources: &bootstrap.Bootstrap_DynamicResources{
			AdsConfig: &core.ApiConfigSource{
				ApiType:                   core.ApiConfigSource_GRPC,
				TransportApiVersion:       core.ApiVersion_V3,
				GrpcServices:              []*core.GrpcService{grpc},
				SetNodeOnFirstMessageOnly: true,
			},
			LdsConfig: ads,
			CdsConfig: ads,
		},
		Admin: &bootstrap.Admin{Address: socket("127.0.0.1", uint32(f.adminPort))},
	}
}

// managers is the static cluster of the managers' gRPC addresses: STATIC
// when all are IP addresses, else STRICT_DNS; HTTP/2 with keepalives, so a
// dead manager's stream is noticed; mutual TLS when files is not nil.
func managers(addrs []string, files *fugetls.Files) *cluster.Cluster {
	kind := cluster.Cluster_STATIC
	var eps []*endpoint.LbEndpoint
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a) // checked by checkGRPCAddr
		p, _ := strconv.ParseUint(port, 10, 16)
		if net.ParseIP(host) == nil {
			kind = cluster.Cluster_STRICT_DNS
		}
		eps = append(eps, &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{
			Endpoint: &endpoint.Endpoint{Address: socket(host, uint32(p))},
		}})
	}
	h2, err := anypb.New(&httpopts.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{
				ConnectionKeepalive: &core.KeepaliveSettings{
					Interval: durationpb.New(10 * time.Second),
					Timeout:  durationpb.New(5 * time.Second),
				},
			}},
		}},
	})
	if err != nil {
		panic("fugectl: " + err.Error()) // the type is linked in
	}
	return &cluster.Cluster{
		Name:                 managersCluster,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: kind},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment: &endpoint.ClusterLoadAssignment{
			ClusterName: managersCluster,
			Endpoints:   []*endpoint.LocalityLbEndpoints{{LbEndpoints: eps}},
		},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2},
		TransportSocket:               tlsSocket(files),
	}
}

// tlsSocket is the managers' cluster's transport socket: Envoy presents
// the proxy certificate and accepts a server whose certificate the CA
// issued and whose URI SAN is a manager's ID, as fugetls's own clients do
// (host names are not checked, so the same certificates work behind NAT
// and Services). Envoy reads the files at start: restart it after a
// rotation. nil (plaintext) when files is nil.
func tlsSocket(files *fugetls.Files) *core.TransportSocket {
	if files == nil {
		return nil
	}
	file := func(p string) *core.DataSource {
		return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: p}}
	}
	ctx, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
		TlsCertificates: []*tlsv3.TlsCertificate{{
			CertificateChain: file(files.Cert),
			PrivateKey:       file(files.Key),
		}},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: file(files.CA),
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: managerIDPrefix}},
			}},
		}},
		// grpc-go servers refuse a TLS client that offers no ALPN.
		AlpnProtocols: []string{"h2"},
	}})
	if err != nil {
		panic("fugectl: " + err.Error()) // the type is linked in
	}
	return &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: ctx}}
}

func socket(host string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address:       host,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}
}

// renderBootstrap validates the bootstrap and renders it as JSON or YAML,
// with Envoy's field names.
func renderBootstrap(b *bootstrap.Bootstrap, asJSON bool) ([]byte, error) {
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("invalid bootstrap: %w", err)
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
	if err != nil {
		return nil, err
	}
	if asJSON {
		var out bytes.Buffer
		if err := json.Indent(&out, raw, "", "  "); err != nil {
			return nil, err
		}
		out.WriteByte('\n')
		return out.Bytes(), nil
	}
	return jsonToYAML(raw)
}

// jsonToYAML rewrites JSON as block-style YAML, keeping the order of keys
// and quoting only the strings that need it.
func jsonToYAML(raw []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	var plain func(n *yaml.Node)
	plain = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			plain(c)
		}
	}
	plain(&doc)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
