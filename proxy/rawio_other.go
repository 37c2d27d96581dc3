//go:build !linux

package proxy

import "syscall"

// rawIO: elsewhere than Linux, sockets are read and written through net.
const rawIO = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
