package lb_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// A front end follows the lease table of namespace "chat" from whichever of
// three managers leads (as the 64 fuge.v1.ArcBlock resources of
// lb.ArcBlockTypeURL over delta xDS; Ready once all 64 are held and their
// arcs partition the circle), routes by it, and drops cached state when
// told it may be lost: a change to one arc arrives as the one block holding
// it and is notified for that arc's range alone.
func ExampleLookup() {
	l, err := lb.NewLookup(lb.LookupConfig{
		Managers:  []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"},
		Namespace: "chat",
		Name:      "frontend-1",
		OnLoss: func(ranges []ring.Range, all bool) {
			// Forget state kept for these ranges under older generations.
			fmt.Println("lost:", ranges, "all:", all)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		log.Fatal("no lease table from any manager")
	}
	if addr, _, gen, ok := l.LookupKey("alice"); ok {
		fmt.Println("send alice's request to", addr, "under generation", gen)
	}
}
