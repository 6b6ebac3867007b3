package store

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a benchmark's private redis-server die with the test
// binary, even when the binary is killed before its cleanups run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
