//go:build unix && !linux

package procs

import "syscall"

// sysProcAttr: a process group of its own.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// cont continues the process if it is stopped.
func (p *Proc) cont() { p.Signal(syscall.SIGCONT) }
