package ring_test

import (
	"fmt"

	"github.com/fuge-project/fuge/ring"
)

func Example() {
	// A namespace with a ring of 4096 entries shared by three owners.
	owners, err := ring.Apportion([]string{"owner-a", "owner-b", "owner-c"}, 4096)
	if err != nil {
		panic(err)
	}
	r, err := ring.New(owners)
	if err != nil {
		panic(err)
	}
	for _, o := range r.Owners() {
		fmt.Println(o.Name, o.VNodes)
	}

	// Route a key: hash the routing header's value, find the owner.
	for _, key := range []string{"user-42", "user-43"} {
		fmt.Println(key, "->", r.LookupOwner(ring.HashString(key)))
	}

	// Envoy, given the same owners as endpoints with weight V_h and
	// minimum_ring_size = maximum_ring_size = 4096, builds the same ring.
	hosts := make([]ring.EnvoyHost, len(owners))
	for i, o := range owners {
		hosts[i] = ring.EnvoyHost{Key: o.Name, Weight: uint32(o.VNodes)}
	}
	e, err := ring.BuildEnvoy(hosts, 4096, 4096)
	if err != nil {
		panic(err)
	}
	fmt.Println("Envoy's ring is the same:", len(ring.Diff(r, e)) == 0)

	// A fourth owner joins: how much of the key space changes owner?
	owners4, err := ring.Apportion([]string{"owner-a", "owner-b", "owner-c", "owner-d"}, 4096)
	if err != nil {
		panic(err)
	}
	r4, err := ring.New(owners4)
	if err != nil {
		panic(err)
	}
	fmt.Printf("moved: %.2f\n", ring.MovedShare(ring.Diff(r, r4)))
	// Output:
	// owner-a 1365
	// owner-b 1366
	// owner-c 1365
	// user-42 -> owner-c
	// user-43 -> owner-b
	// Envoy's ring is the same: true
	// moved: 0.34
}
