//go:build linux

package clusterenv

import "syscall"

// newSysProcAttr puts the child in its own process group (so SIGKILL to the
// group also ends anything it forks) and asks the kernel to SIGKILL it if
// the test binary dies without running its cleanups.
func newSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
