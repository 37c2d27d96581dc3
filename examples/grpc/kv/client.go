package kv

import (
	"context"
	"encoding/json"
	"errors"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds" // the xds:/// resolver, ring_hash and the rest of grpc-go's xDS client
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// Raises grpc-go's ring size cap before grpc-go reads it, so that
	// namespaces with R > 4096 are routed by the whole ring.
	_ "github.com/fuge-project/fuge/examples/grpc/kv/ringhashcap"
	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/xds"
)

// ErrNoManagers is returned by Bootstrap and Dial without a manager address.
var ErrNoManagers = errors.New("kv: no manager addresses")

// Bootstrap returns a grpc-go xDS bootstrap (gRFC A27) for a client of
// namespace: the managers as its xDS servers, tried in order, and a node
// named node whose metadata names the namespace (xds.NamespaceMetadataKey),
// which is how the manager knows which namespace's Listener, route, cluster
// and endpoints to send. Write it to a file named by GRPC_XDS_BOOTSTRAP, or
// put it in GRPC_XDS_BOOTSTRAP_CONFIG, for any grpc-go program to dial
// xds:///<namespace>.
//
// With files, the xDS channel is mutual TLS: grpc-go's "tls" channel
// credentials (gRFC A65) present files.Cert and files.Key (a proxy
// certificate: the managers serve xDS to proxies) and check the manager's
// certificate against files.CA and its host name against the server URI,
// so a manager's address must be among its certificate's hosts
// (fugectl certs init --host). grpc-go re-reads the files every minute
// (refresh_interval), and resolves relative paths against its working
// directory.
// With nil files the channel is plaintext, for managers run with
// --insecure.
func Bootstrap(managers []string, namespace, node string, files *fugetls.Files) ([]byte, error) {
	if len(managers) == 0 {
		return nil, ErrNoManagers
	}
	creds := map[string]any{"type": "insecure"}
	if files != nil {
		creds = map[string]any{"type": "tls", "config": map[string]any{
			"ca_certificate_file": files.CA,
			"certificate_file":    files.Cert,
			"private_key_file":    files.Key,
			"refresh_interval":    "60s", // grpc-go's default is an hour
		}}
	}
	var servers []any
	for _, m := range managers {
		servers = append(servers, map[string]any{
			"server_uri":      m,
			"channel_creds":   []any{creds},
			"server_features": []string{"xds_v3"},
		})
	}
	return json.MarshalIndent(map[string]any{
		"xds_servers": servers,
		"node": map[string]any{
			"id":       node,
			"cluster":  namespace,
			"metadata": map[string]any{xds.NamespaceMetadataKey: namespace},
		},
	}, "", "  ")
}

// Dial returns a client of xds:///<namespace>. If GRPC_XDS_BOOTSTRAP or
// GRPC_XDS_BOOTSTRAP_CONFIG is set, grpc-go's registered xds resolver reads
// its bootstrap from there and managers, node and files are ignored.
// Otherwise the bootstrap is Bootstrap(managers, namespace, node, files),
// handed to grpc-go through xds.NewXDSResolverWithConfigForTesting: grpc-go
// reads its bootstrap variables once, when the program starts, so a program
// cannot set them for itself, and that is grpc-go's only public way to pass
// a bootstrap in code (it marks it experimental). files secure the xDS
// channel to the managers only: calls to the kv servers are plaintext
// (opts are added to that default).
func Dial(managers []string, namespace, node string, files *fugetls.Files, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	if os.Getenv("GRPC_XDS_BOOTSTRAP") == "" && os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG") == "" {
		b, err := Bootstrap(managers, namespace, node, files)
		if err != nil {
			return nil, err
		}
		var r resolver.Builder
		if r, err = grpcxds.NewXDSResolverWithConfigForTesting(b); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithResolvers(r))
	}
	return grpc.NewClient("xds:///"+namespace, opts...)
}

// Get returns key's value: NotFound if there is none, UNAVAILABLE if the
// call reached a server that does not hold the key (ownerguard.IsMisdirected)
// after the route's retries, which is safe to try again.
func Get(ctx context.Context, cc grpc.ClientConnInterface, key string, opts ...grpc.CallOption) ([]byte, error) {
	out := new(wrapperspb.BytesValue)
	if err := cc.Invoke(withKey(ctx, key), GetMethod, &emptypb.Empty{}, out, opts...); err != nil {
		return nil, err
	}
	return out.GetValue(), nil
}

// Put sets key's value. Errors are as for Get; a misdirected Put was not
// applied, so it is safe to try again.
func Put(ctx context.Context, cc grpc.ClientConnInterface, key string, value []byte, opts ...grpc.CallOption) error {
	return cc.Invoke(withKey(ctx, key), PutMethod, wrapperspb.Bytes(value), &emptypb.Empty{}, opts...)
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, KeyMetadata, key)
}
