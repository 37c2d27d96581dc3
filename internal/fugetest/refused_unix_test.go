//go:build unix

package fugetest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestRefusedAddr checks that the address refuses connections and that no
// listener can take its port while the test runs: the listeners that a
// test starts after it asked for a refused address used to get that very
// port back (cmd/internal/admin's TestErrors then saw a 502 from it).
func TestRefusedAddr(t *testing.T) {
	for range 50 {
		addr := RefusedAddr(t)
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("dialing %s succeeded, want connection refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dialing %s: %v, want connection refused", addr, err)
		}
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			t.Fatalf("a listener took %s while it was reserved", addr)
		}
	}
}
