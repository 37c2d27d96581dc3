//go:build linux && !386

package proxy

import "syscall"

// The system calls of rawRead and rawWrite.
const sysRecv, sysSend = syscall.SYS_RECVFROM, syscall.SYS_SENDTO
