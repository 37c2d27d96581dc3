package proxy

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// pollFd is struct pollfd.
type pollFd struct {
	fd              int32
	events, revents int16
}

const pollIn = 0x1

// await polls fd, an owner's socket with a request written to it, until
// it is readable (true) or the spin ends (false; see spinner).
func (s *spinner) await(fd uintptr) bool {
	if s == nil || s.wait <= 0 || s.waiting.Load() != 1 {
		return false
	}
	var fds [1 + maxSpinFDs]pollFd
	fds[0] = pollFd{fd: int32(fd), events: pollIn}
	n := 1
	if p := s.epfds.Load(); p != nil {
		for _, e := range *p {
			if n == len(fds) {
				break
			}
			fds[n] = pollFd{fd: e, events: pollIn}
			n++
		}
	}
	s.spins.Add(1)
	var zero syscall.Timespec
	start := time.Now()
	for {
		runtime.Gosched()
		_, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(n), uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
		case e != 0:
			return false
		case fds[0].revents != 0:
			s.answered.Add(1)
			return true
		}
		for i := 1; i < n; i++ {
			if fds[i].revents != 0 {
				return false
			}
		}
		if s.waiting.Load() != 1 || time.Since(start) >= s.wait {
			return false
		}
	}
}
