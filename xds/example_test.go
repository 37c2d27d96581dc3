package xds_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// The manager's main wires the table: ServerConfig.Observer = table,
// ServerConfig.Heartbeat = table.Heartbeat, Gate = server.CheckLeader, and
// table.Register on the gRPC server that also carries the owner protocol,
// created with table.ServerOptions (ServerConfig.GRPCOptions).
func Example() {
	table := xds.NewLeaseTable(xds.LeaseTableConfig{
		Gate: func(ctx context.Context) error { return nil }, // the manager's CheckLeader
	})
	s := grpc.NewServer(table.ServerOptions()...)
	table.Register(s)

	// What the manager calls as raft applies changes, and on the leader
	// every heartbeat interval. The ring comes first: its ring size, 4096,
	// sizes the blocks the lease table is served in (wire.BlockBits: 10
	// bits, 1,024 blocks of about 4 arcs each). The first view is
	// published at once, as 1,024 blocks at version "1": the free arc
	// (2^63,0] in block 0, a's arc (0,2^63] in block 512, the other 1,022
	// blocks empty.
	table.NamespaceRing("orders", lease.RingView{RingSize: 4096, Header: "X-Fuge-Key",
		Owners: []lease.RingOwner{{Name: "a", Addr: "10.0.0.1:8080", VNodes: 4096}}}, 1)
	table.NamespaceView("orders", []lease.Entry{
		{Range: ring.Range{Start: 1 << 63, End: 0}, Gen: 1},
		{Range: ring.Range{Start: 0, End: 1 << 63}, Owner: "a", Addr: "10.0.0.1:8080", Gen: 2},
	}, 1)
	bits := wire.BlockBits(4096)
	fmt.Println(xds.ArcBlockTypeURL, 1<<bits, wire.BlockName("orders", wire.BlockOf(1<<63, bits)))

	// A view that follows within xds.FlushInterval is kept until the
	// interval has passed, or until the next heartbeat, which publishes it
	// first (only block 512 changes, at version "2").
	table.NamespaceView("orders", []lease.Entry{
		{Range: ring.Range{Start: 1 << 63, End: 0}, Gen: 1},
		{Range: ring.Range{Start: 0, End: 1 << 63}, Owner: "b", Addr: "10.0.0.2:8080", Gen: 3},
	}, 2)
	table.Heartbeat("orders")
	table.NamespaceView("orders", []lease.Entry{{Range: ring.Full()}}, 3) // generation 0: refused

	fmt.Printf("%+v\n", table.Stats())
	// Output:
	// type.googleapis.com/fuge.v1.ArcBlock 1024 orders/block/512
	// {Namespaces:1 Streams:0 Refused:0 Rechecked:0 Pushes:0 NACKs:0 BadViews:1 Views:2 Flushes:2 BadRings:0 Rings:1 RingPushes:0 WholeWaits:0 WholeBypasses:0}
}

// The manager tells the table each namespace's desired ring; the table
// serves it to Envoy and gRPC as these resources.
func ExampleBuildEnvoyResources() {
	view := lease.RingView{RingSize: 4096, Header: "X-Fuge-Key", Owners: []lease.RingOwner{
		{Name: "a", Addr: "10.0.0.1:8080", VNodes: 2048},
		{Name: "b", Addr: "10.0.0.2:8080", VNodes: 2048},
	}}
	r, err := xds.BuildEnvoyResources("orders", view, xds.DefaultEnvoyListener)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Listener.Name, r.APIListener.Name, r.Route.Name, r.Cluster.Name, r.Endpoints.ClusterName)
	for _, ep := range r.Endpoints.Endpoints[0].LbEndpoints {
		fmt.Println(ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue(),
			ep.GetLoadBalancingWeight().GetValue())
	}
	// Output:
	// orders/envoy orders orders orders orders
	// a 2048
	// b 2048
}
