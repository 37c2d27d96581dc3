package ring

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Hash is the key hash: XXH64 of the routing value with seed 0.
func Hash(b []byte) uint64 { return xxhash.Sum64(b) }

// HashString is Hash for a string, without allocating.
func HashString(s string) uint64 { return xxhash.Sum64String(s) }

// EntryHash is the position of an owner's i-th virtual node:
// XXH64(name + "_" + i, 0), as Envoy hashes "hash_key_i".
func EntryHash(name string, i int) uint64 {
	var buf [128]byte
	b := append(buf[:0], name...)
	b = append(b, '_')
	b = strconv.AppendInt(b, int64(i), 10)
	return xxhash.Sum64(b)
}
