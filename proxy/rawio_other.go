//go:build !linux

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// rawIO: elsewhere than Linux, sockets are read and written through net.
const rawIO = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }

// newEvListener: the proxy's own readiness is Linux's epoll only.
func newEvListener(*net.TCPListener, *spinner) (net.Listener, error) {
	return nil, errors.ErrUnsupported
}

// await: no spinning elsewhere than Linux (see spinner).
func (s *spinner) await(uintptr) bool { return false }
