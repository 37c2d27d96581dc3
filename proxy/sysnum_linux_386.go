package proxy

import "syscall"

// The system calls of rawRead and rawWrite: linux/386 reaches recvfrom and
// sendto only through socketcall, so it reads and writes (which ignore the
// arguments past the third).
const sysRecv, sysSend = syscall.SYS_READ, syscall.SYS_WRITE
