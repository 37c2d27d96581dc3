package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/xds"
)

// TestLookupSyncsTableLargerThanAMessage: a Lookup gets a whole table of
// R = 65536 arcs (about 3.6 MB) from a server whose gRPC messages are
// limited to 2 MiB, because the answer comes in parts of at most
// wire.MaxLookupResponseBytes. A manager sends at most 4 MiB, and a table
// at R = 65536 with its generations split by a join storm measured 4.63
// MB: in one message no Lookup could sync (bench/managerscale, 10× run).
func TestLookupSyncsTableLargerThanAMessage(t *testing.T) {
	const R, ns = 65536, "big"
	lt := xds.NewLeaseTable(xds.LeaseTableConfig{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(append(lt.ServerOptions(), grpc.MaxSendMsgSize(2<<20))...)
	lt.Register(s)
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-served })

	owners := make([]lease.RingOwner, 8)
	for i := range owners {
		owners[i] = lease.RingOwner{Name: fmt.Sprintf("owner-%d", i), Addr: fmt.Sprintf("10.0.0.%d:8080", i), VNodes: R / len(owners)}
	}
	lt.NamespaceRing(ns, lease.RingView{RingSize: R, Header: "X-Fuge-Key", Owners: owners}, 1)
	// Every arc its own generation, owners in turn: nothing merges.
	step := uint64(1) << 63 / R * 2
	view := make([]lease.Entry, R)
	for i := range view {
		o := owners[i%len(owners)]
		view[i] = lease.Entry{Owner: o.Name, Addr: o.Addr, Gen: lease.Gen(i + 1)}
		view[i].Range.Start, view[i].Range.End = uint64(i)*step, uint64(i+1)*step
	}
	lt.NamespaceView(ns, view, 1)

	l, err := lb.NewLookup(lb.LookupConfig{Managers: []string{lis.Addr().String()}, Namespace: ns, Name: "big-table"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	select {
	case <-l.Ready():
	case <-time.After(fugetest.DefaultTimeout):
		t.Fatalf("the Lookup has no table after %v: %+v", fugetest.DefaultTimeout, l.Stats())
	}
	if got := len(l.Entries()); got != R {
		t.Fatalf("the Lookup holds %d arcs, want %d", got, R)
	}
	if st := l.Stats(); st.Rejected != 0 || st.NACKs != 0 {
		t.Fatalf("stats %+v: a part of the answer was taken for an incomplete table", st)
	}
	t.Logf("%d arcs synced through a 2 MiB message limit in parts of %d bytes", R, wire.MaxLookupResponseBytes)
}
