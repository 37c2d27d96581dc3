package xds

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	cpresource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fuge-project/fuge/api/wire"
)

// Register registers the aggregated discovery service, state-of-the-world
// (StreamAggregatedResources) and delta (DeltaAggregatedResources), on s.
// The fuge types have no per-type discovery services; Envoy and gRPC
// clients use ADS.
func (t *LeaseTable) Register(s *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(s, ads{t})
}

// ads serves ADS with go-control-plane's SotW and delta stream handlers
// (its server.NewServer bundles every per-type service, and the rate-limit
// module with them).
type ads struct{ t *LeaseTable }

var _ discovery.AggregatedDiscoveryServiceServer = ads{}

func (a ads) StreamAggregatedResources(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return a.t.sotw.StreamHandler(s, cpresource.AnyType)
}

func (a ads) DeltaAggregatedResources(s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	if isLookup(s.Context()) {
		return a.t.serveLookup(s)
	}
	return a.t.delta.DeltaStreamHandler(s, cpresource.AnyType)
}

// callbacks gates streams as they open, counts them and their responses,
// and logs and counts NACKs.
type callbacks struct{ t *LeaseTable }

var (
	_ sotw.Callbacks  = callbacks{}
	_ delta.Callbacks = callbacks{}
)

// isLookup reports whether a stream was opened by a Fuge Lookup
// (wire.ClientKindKey metadata).
func isLookup(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return slices.Contains(md.Get(wire.ClientKindKey), wire.ClientLookup)
}

func (c callbacks) open(ctx context.Context, k streamKey) error {
	// Only Lookup streams are gated: Envoy and gRPC clients are served by
	// every node from its replicated state (and may not follow a node's
	// pointer to another), Lookups where the gate admits them (the
	// manager's CheckLookup: standbys in contact, the leader without them).
	if c.t.gate != nil && isLookup(ctx) {
		if err := c.t.gate(ctx); err != nil {
			c.t.refused.Add(1)
			c.t.log.Debug("xDS stream refused", "stream", k.id, "delta", k.delta, "err", err)
			return err
		}
	}
	c.t.smu.Lock()
	c.t.streams[k] = struct{}{}
	c.t.smu.Unlock()
	return nil
}

func (c callbacks) closed(k streamKey) {
	c.t.smu.Lock()
	delete(c.t.streams, k)
	c.t.smu.Unlock()
}

func (c callbacks) request(k streamKey, node *core.Node, typeURL, nonce string, detail *status.Status) {
	if detail == nil {
		return
	}
	c.t.nacks.Add(1)
	c.t.log.Warn("xDS NACK", "stream", k.id, "delta", k.delta, "node", node.GetId(), "type", typeURL,
		"nonce", nonce, "code", detail.GetCode(), "detail", detail.GetMessage())
}

func (c callbacks) OnStreamOpen(ctx context.Context, id int64, _ string) error {
	return c.open(ctx, streamKey{false, id})
}

func (c callbacks) OnStreamClosed(id int64, _ *core.Node) { c.closed(streamKey{false, id}) }

func (c callbacks) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	c.request(streamKey{false, id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
	return nil
}

func (c callbacks) OnStreamResponse(context.Context, int64, *discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {
	c.t.pushes.Add(1)
}

func (c callbacks) OnDeltaStreamOpen(ctx context.Context, id int64, _ string) error {
	return c.open(ctx, streamKey{true, id})
}

func (c callbacks) OnDeltaStreamClosed(id int64, _ *core.Node) { c.closed(streamKey{true, id}) }

func (c callbacks) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	c.request(streamKey{true, id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
	return nil
}

func (c callbacks) OnStreamDeltaResponse(int64, *discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse) {
	c.t.pushes.Add(1)
}

// cpLogger adapts slog to go-control-plane's logger. Its Info messages are
// per-watch chatter, so they go to Debug.
func cpLogger(l *slog.Logger) log.Logger {
	at := func(level slog.Level) func(string, ...any) {
		return func(format string, args ...any) {
			if l.Enabled(context.Background(), level) {
				l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "go-control-plane")
			}
		}
	}
	return log.LoggerFuncs{DebugFunc: at(slog.LevelDebug), InfoFunc: at(slog.LevelDebug), WarnFunc: at(slog.LevelWarn), ErrorFunc: at(slog.LevelError)}
}
