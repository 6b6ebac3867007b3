//go:build unix && !linux

package clusterenv

import "syscall"

// newSysProcAttr puts the child in its own process group, so SIGKILL to the
// group also ends anything it forks.
func newSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
