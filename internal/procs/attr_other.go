//go:build !unix

package procs

import "syscall"

// sysProcAttr: nothing where process groups are not available.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// cont does nothing: processes cannot be stopped by a signal here.
func (p *Proc) cont() {}
