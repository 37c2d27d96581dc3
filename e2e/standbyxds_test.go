package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fuge-project/fuge/xds"
)

// TestStandbyServesEnvoyClients connects an Envoy-style ADS client (no
// Lookup mark) to a standby manager and checks that it is served, and that
// it follows the endpoints as owners join: grpc-go does not move to another
// xDS server once it has its resources, so every node must serve them.
func TestStandbyServesEnvoyClients(t *testing.T) {
	c := newCluster(t, 3, time.Second)
	lead := c.waitLeader()
	var standby *node
	for _, nd := range c.nodes {
		if nd != lead {
			standby = nd
			break
		}
	}
	rec := newRecorder()
	startOwner(t, c, "a", rec)

	cc, err := grpc.NewClient(standby.cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "envoy-1", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		xds.NamespaceMetadataKey: structpb.NewStringValue(testNS)}}}
	req := &discovery.DiscoveryRequest{Node: node, TypeUrl: xds.EndpointTypeURL, ResourceNames: []string{testNS}}
	if err := s.Send(req); err != nil {
		t.Fatal(err)
	}
	// recvOwners reads responses, acknowledging each, until the endpoints
	// name exactly want.
	recvOwners := func(want ...string) {
		t.Helper()
		for {
			r, err := s.Recv()
			if err != nil {
				t.Fatalf("standby's stream: %v (want endpoints %v)", err, want)
			}
			var got []string
			for _, a := range r.GetResources() {
				var cla endpoint.ClusterLoadAssignment
				if err := a.UnmarshalTo(&cla); err != nil {
					t.Fatal(err)
				}
				for _, le := range cla.GetEndpoints() {
					for _, e := range le.GetLbEndpoints() {
						got = append(got, e.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue())
					}
				}
			}
			if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: xds.EndpointTypeURL,
				ResourceNames: []string{testNS}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return
			}
		}
	}
	recvOwners("a")
	startOwner(t, c, "b", rec)
	recvOwners("a", "b")
	if standby.srv.IsLeader() {
		t.Fatal("the standby became leader during the test; it proves nothing")
	}
}
