// Package ring is Fuge's consistent-hash ring: exactly Envoy's ring_hash with
// XX_HASH, and grpc-go's ring_hash.
//
// A key is hashed with XXH64(value, seed 0). Each owner h has a stable name
// (its Envoy hash_key) and a virtual-node count V_h; its ring entries are
// XXH64(name + "_" + i, 0) for i in [0, V_h). Entries are sorted by hash; the
// entry at position p owns the arc (previous entry, p], and a key goes to the
// first entry whose hash is >= the key's hash, wrapping to the first entry.
//
// Fuge keeps Σ V_h = R = 2^k for a namespace (Apportion). Only then are the
// entry counts exact in every implementation: Envoy computes them in floating
// point (EnvoyCounts reproduces that computation), and with weights summing to
// a power of two and minimum_ring_size = maximum_ring_size = R it yields V_h.
//
// Positions on the ring are uint64 hashes; a Range (Start, End] is an arc
// walked clockwise, wrapping past the maximum hash to zero. Table is a
// partition of the whole circle into such arcs, each with a value: the lease
// table, an owner's held set and a lookup's copy are all Tables.
package ring
