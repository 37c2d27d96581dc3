package xds_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
	"github.com/fuge-project/fuge/xds"
)

// The manager's main wires the table: ServerConfig.Observer = table,
// ServerConfig.Heartbeat = table.Heartbeat, Gate = server.CheckLeader, and
// table.Register on the gRPC server that also carries the owner protocol.
func Example() {
	table := xds.NewLeaseTable(xds.LeaseTableConfig{
		Gate: func(ctx context.Context) error { return nil }, // the manager's CheckLeader
	})
	s := grpc.NewServer()
	table.Register(s)

	// What the manager calls as raft applies changes, and on the leader
	// every heartbeat interval.
	table.NamespaceView("orders", []lease.Entry{
		{Range: ring.Range{Start: 1 << 63, End: 0}, Gen: 1},
		{Range: ring.Range{Start: 0, End: 1 << 63}, Owner: "a", Addr: "10.0.0.1:8080", Gen: 2},
	}, 1)
	table.Heartbeat("orders")
	table.NamespaceView("orders", []lease.Entry{{Range: ring.Full()}}, 2) // generation 0: refused

	fmt.Printf("%+v\n", table.Stats())
	// Output: {Namespaces:1 Streams:0 Refused:0 Pushes:0 NACKs:0 BadViews:1}
}
