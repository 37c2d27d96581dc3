package presence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/fuge-project/fuge/examples/presence"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// Example runs the service behind a guard and uses it through the client.
// A real server asks an ownerguard.Owner; here a stand-in holds every key
// under generation 1, then loses it and gets it back under generation 2.
func Example() {
	ctx := context.Background()
	owner := &fakeOwner{}
	owner.gen.Store(1)
	srv := presence.NewServer(owner)
	guard, _ := ownerguard.NewGuard(owner, ownerguard.GuardConfig{Name: "p1"})
	ts := httptest.NewServer(guard.HTTP(srv))
	defer ts.Close()

	c, _ := presence.NewClient(presence.ClientConfig{BaseURL: ts.URL})
	c.Publish(ctx, "laptop", "192.0.2.7:4500")
	a, _ := c.Get(ctx, "laptop")
	fmt.Println(a.Addr, "from", a.Owner, "under generation", a.Gen)

	owner.gen.Store(2) // lost and granted again: the stored address may be stale
	_, err := c.Get(ctx, "laptop")
	fmt.Println("not found:", errors.Is(err, presence.ErrNotFound))

	c.OnLoss([]ring.Range{ring.Full()}, false) // a Lookup's loss notification
	a, _ = c.Get(ctx, "laptop")
	fmt.Println(a.Addr, "from", a.Owner, "under generation", a.Gen)
	// Output:
	// 192.0.2.7:4500 from p1 under generation 1
	// not found: true
	// 192.0.2.7:4500 from p1 under generation 2
}
