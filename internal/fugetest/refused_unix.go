//go:build unix

package fugetest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a 127.0.0.1 address where a connection is refused,
// and keeps it so until the test ends. The port is held by a socket that is
// bound but not listening: a connection to it is reset at once, and the
// kernel hands the port to no other listener meanwhile. (Listening on :0
// and closing gave the port back: a server the same test started next could
// get it, and the "dead" address then answered.)
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("fugetest: socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	tb.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("fugetest: bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("fugetest: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("fugetest: getsockname returned %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
