//go:build !unix

package fugetest

import (
	"net"
	"testing"
)

// RefusedAddr returns a 127.0.0.1 address where nothing listens. Off unix
// the port is only free when it returns: another listener may take it.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
