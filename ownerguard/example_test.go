package ownerguard_test

import (
	"fmt"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// The shell around a Core sends what it returns, feeds it the manager's
// responses, and checks ownership before serving a key (PRS Fig. 4).
func Example() {
	t0 := time.Unix(1_700_000_000, 0)
	core, err := ownerguard.NewCore(ownerguard.CoreConfig{
		Namespace:   "chat",
		Name:        "backend-1",
		Addr:        "10.0.0.1:8080",
		Incarnation: 0x42,
	})
	if err != nil {
		panic(err)
	}
	out := core.Start(t0)
	fmt.Println("send", out.Send.Header, lease.FormatLeases(out.Send.Held))

	// The manager (nonce 0x7) grants a range in answer to request 1.
	arc := ring.Range{Start: 0x1000, End: 0x2000}
	reply := func(seq, ack uint64, renew, grant []lease.Lease) lease.LeaseResponse {
		return lease.LeaseResponse{
			Namespace: "chat", Owner: "backend-1",
			Header: lease.Header{Nonce: 0x7, Seq: seq, PeerNonce: 0x42, AckSeq: ack},
			Renew:  renew, Grant: grant,
		}
	}
	now := t0.Add(10 * time.Millisecond)
	out = core.Step(reply(1, 1, nil, []lease.Lease{{Range: arc, Gen: 3}}), now)
	fmt.Println("granted", out.Granted)
	fmt.Println("send", out.Send.Header, lease.FormatLeases(out.Send.Held))

	// A request for key 0x1800: (1) check ownership, (3) operate and keep
	// the handle with the state, (4) check the lease covered the operation.
	h, ok := core.GetOwnershipHandle(0x1800, now)
	fmt.Println("owned", ok, "gen", h.Gen, "continuous", core.CheckContinuousOwnership(h, now))

	// The manager recalls the range: the owner drops it and says so at once.
	now = now.Add(time.Second)
	out = core.Step(reply(2, 2, nil, nil), now)
	fmt.Println("revoked", out.Revoked)
	fmt.Println("send", out.Send.Header, lease.FormatLeases(out.Send.Held))
	fmt.Println("continuous", core.CheckContinuousOwnership(h, now))
	fmt.Println("next tick in", core.NextDeadline().Sub(now))
	// Output:
	// send seq=1/42 ack=0/0 []
	// granted [(0000000000001000,0000000000002000]]
	// send seq=2/42 ack=1/7 [(0000000000001000,0000000000002000]@3]
	// owned true gen 3 continuous true
	// revoked [(0000000000001000,0000000000002000]]
	// send seq=3/42 ack=2/7 []
	// continuous false
	// next tick in 2s
}
