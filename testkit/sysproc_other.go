//go:build unix && !linux

package testkit

import "syscall"

// sysProcAttr puts a server in a process group of its own (Kill and Signal
// reach its children too).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
