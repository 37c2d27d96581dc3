package lease

// RingView is a namespace as Envoy and proxyless gRPC clients route by it:
// its ring configuration and the owners of its desired ring, the ring the
// manager moves the lease table toward. The manager derives it from its
// replicated state, so every node derives the same view from the same log.
type RingView struct {
	// RingSize is the namespace's ring size R, a power of two.
	RingSize int
	// Header is the routing header whose value is hashed, as configured
	// (HTTP header names are case-insensitive).
	Header string
	// Owners are the owners of the desired ring, sorted by name: the live
	// owners that are not draining, with their virtual-node counts from
	// ring.Apportion, which sum to RingSize. Empty while there are none.
	Owners []RingOwner
}

// RingOwner is one owner of a desired ring.
type RingOwner struct {
	Name   string // the owner's stable name, its ring hash_key
	Addr   string // host:port where its requests are sent
	VNodes int    // V_h, its number of ring entries; 0 when R < the number of owners
}
