package manager_test

import (
	"context"
	"testing"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// BenchmarkRenewOverGRPC is one owner's renewal round trip over a real
// gRPC stream to a single-node manager on 127.0.0.1, the owner's side in
// the same process: the leader's work per renewal (the stream's receive,
// the lease core, the response's send) without a load generator's noise.
// A renewal carries a load report of every range group, as ownerguard's
// do. At make bench-manager SCALE=10 the leader takes 333 a second.
func BenchmarkRenewOverGRPC(b *testing.B) {
	s := startNode(b, "n1", "", nil)
	eventually(b, "leadership", s.IsLeader)
	_, g, _ := s.Addrs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc := dialConn(b, g)
	stream, err := fugev1.NewOwnerServiceClient(cc).Lease(ctx)
	if err != nil {
		b.Fatal(err)
	}
	req := lease.LeaseRequest{Namespace: "ns", Owner: "a", Addr: "a:1", Header: lease.Header{Nonce: 11, Seq: 1},
		Load: &lease.LoadReport{Rate: 64, Groups: make([]float64, lease.LoadGroups)}}
	for i := range req.Load.Groups {
		req.Load.Groups[i] = 1
	}
	roundTrip := func() lease.LeaseResponse {
		m := wire.Request(req, true)
		m.LeaseDurationMs = 3000
		return exchange(b, stream, m)
	}
	r := roundTrip()
	req.Held, req.PeerNonce, req.AckSeq = r.Grant, r.Nonce, r.Seq
	if len(req.Held) != 1 {
		b.Fatalf("first response %+v: want the whole ring", r)
	}
	b.ReportAllocs()
	for b.Loop() {
		req.Seq++
		r := roundTrip()
		if r.AckSeq != req.Seq || len(r.Renew) != 1 || len(r.Grant) != 0 {
			b.Fatalf("renewal %d: response %+v", req.Seq, r)
		}
		req.AckSeq = r.Seq
	}
}
