package proxy

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// await polls fd, an owner's socket with a request written to it, until
// it is readable (true) or the spin ends (false; see spinner).
func (s *spinner) await(fd uintptr) bool {
	if s == nil || s.wait <= 0 || s.waiting.Load() != 1 {
		return false
	}
	var fds [1 + maxSpinFDs]unix.PollFd
	fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	n := 1
	if p := s.epfds.Load(); p != nil {
		for _, e := range *p {
			if n == len(fds) {
				break
			}
			fds[n] = unix.PollFd{Fd: e, Events: unix.POLLIN}
			n++
		}
	}
	s.spins.Add(1)
	var zero unix.Timespec
	start := time.Now()
	for {
		runtime.Gosched()
		// ppoll without the runtime's entersyscall (rawio_linux.go says
		// why): a zero timeout never blocks.
		_, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(n), uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
		case e != 0:
			return false
		case fds[0].Revents != 0:
			s.answered.Add(1)
			return true
		}
		for i := 1; i < n; i++ {
			if fds[i].Revents != 0 {
				return false
			}
		}
		if s.waiting.Load() != 1 || time.Since(start) >= s.wait {
			return false
		}
	}
}
