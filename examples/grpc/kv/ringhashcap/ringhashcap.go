// Package ringhashcap lets a grpc-go client build ring_hash rings as large
// as a Fuge namespace's (up to 2^23 entries) instead of grpc-go's default
// cap of 4096. grpc-go reads the cap from the GRPC_RING_HASH_CAP variable
// once, as its internal/envconfig package is initialized, so a program
// cannot raise it from main. This package sets the variable, unless it is
// already set, in its own init; Go initializes packages in the order of
// their import paths among those whose imports are done (the Go spec,
// "Package initialization"), and this package imports only os, while
// "github.com/fuge-project/..." sorts before "google.golang.org/grpc/...",
// so it runs first. Import it for its side effect:
//
//	import _ "github.com/fuge-project/fuge/examples/grpc/kv/ringhashcap"
//
// The cap only permits large rings: a ring is as large as the cluster's
// ring_hash configuration asks, which for Fuge is the namespace's R.
package ringhashcap

import "os"

// Max is the largest ring size grpc-go accepts (its own upper bound on the
// cap, 8M entries).
const Max = 8 << 20

// Var is grpc-go's environment variable.
const Var = "GRPC_RING_HASH_CAP"

func init() {
	if os.Getenv(Var) == "" {
		os.Setenv(Var, "8388608")
	}
}
