package testkit

import "syscall"

// sysProcAttr puts a server in a process group of its own (Kill and Signal
// reach its children too) and has the kernel kill it should the test
// binary die without its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
