package procs

import "syscall"

// sysProcAttr: a process group of its own, and SIGKILL when the harness
// dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// cont continues the process if it is stopped.
func (p *Proc) cont() { p.Signal(syscall.SIGCONT) }
