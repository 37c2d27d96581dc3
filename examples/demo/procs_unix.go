//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the child in a process group of its own: Ctrl-C in the
// terminal then reaches the demo only, which stops its children in order.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
