package lb_test

import (
	"fmt"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// A shell drives the core: it sends what Send holds, feeds responses to
// Step, calls Tick at NextDeadline and delivers Loss to the application.
func Example() {
	c, err := lb.NewCore(lb.CoreConfig{Namespace: "chat", Name: "frontend-1"})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	out := c.Start(now)
	fmt.Printf("ask: nonce=%d lsn=%d\n", out.Send.ManagerNonce, out.Send.LSN)

	const half = uint64(1) << 63
	// The manager answers with a snapshot: the first table signals no loss.
	out = c.Step(lease.LookupResponse{
		Namespace: "chat", ManagerNonce: 42, Snapshot: true, LSN: 7,
		Entries: []lease.Entry{
			{Range: ring.Range{Start: half, End: 0}, Owner: "a", Addr: "10.0.0.1:80", Gen: 1},
			{Range: ring.Range{Start: 0, End: half}, Owner: "b", Addr: "10.0.0.2:80", Gen: 2},
		},
	}, now.Add(time.Millisecond))
	fmt.Println("loss:", out.Loss)

	key := ring.HashString("alice")
	addr, _, gen, ok := c.Lookup(key)
	fmt.Println("alice:", c.Owner(key), addr, gen, ok)

	// b restarts: the manager pushes a new generation for its range.
	out = c.Step(lease.LookupResponse{
		Namespace: "chat", ManagerNonce: 42, FromLSN: 7, LSN: 8,
		Changes: []lease.Change{{LSN: 8, Entry: lease.Entry{
			Range: ring.Range{Start: 0, End: half}, Owner: "b", Addr: "10.0.0.2:80", Gen: 3}}},
	}, now.Add(2*time.Millisecond))
	fmt.Println("loss:", out.Loss)

	// The manager goes silent: the staleness bound signals loss everywhere.
	deadline := now.Add(2*time.Millisecond + lb.DefaultStalenessBound)
	for t := c.NextDeadline(); !t.After(deadline); t = c.NextDeadline() {
		out = c.Tick(t)
		if out.LossAll {
			fmt.Println("loss all:", out.Loss, "after", t.Sub(now))
		}
	}
	// Output:
	// ask: nonce=0 lsn=0
	// loss: []
	// alice: b 10.0.0.2:80 2 true
	// loss: [(0000000000000000,8000000000000000]]
	// loss all: [(0000000000000000,0000000000000000]] after 30.002s
}
