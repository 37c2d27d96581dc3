// Package e2e holds end-to-end tests: manager clusters, owners and lookups
// as real gRPC clients on 127.0.0.1, with timers scaled down through the one
// lease-duration setting. It has no code outside its tests.
package e2e
