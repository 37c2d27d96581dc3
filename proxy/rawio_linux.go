package proxy

import (
	"syscall"
	"unsafe"
)

// rawIO: reads and writes on TCP sockets go through rawRead and rawWrite.
const rawIO = true

// rawRead and rawWrite are recv(2) and send(2) on a non-blocking socket
// (recvfrom and sendto without an address: read and write pass through
// the VFS layer, whose file-position lock, permission hook and fsnotify
// calls took 3-4% of the proxy's CPU on the bench's layout, where HAProxy
// uses recvfrom and sendto),
// without the runtime's entersyscall and exitsyscall: they never block, so
// the scheduler need not know. Marking them as system calls costs more than
// the bookkeeping itself on a proxy that makes four per request with one
// core: the sysmon thread, sharing that core, sees the P in a system call
// on two of its wakeups whenever the call is preempted between them, hands
// the P to another thread, and the two threads then trade the core (about
// 9,000 involuntary context switches in 5 s at 30,000 requests/s).
func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		n, _, e := syscall.RawSyscall6(sysRecv, fd, uintptr(p), uintptr(len(b)), 0, 0, 0)
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		n, _, e := syscall.RawSyscall6(sysSend, fd, uintptr(p), uintptr(len(b)), syscall.MSG_NOSIGNAL, 0, 0)
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}
