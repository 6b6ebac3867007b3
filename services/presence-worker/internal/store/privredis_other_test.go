//go:build !linux

package worker

import "os/exec"

// dieWithParent is a no-op where the OS has no parent-death signal: a
// killed benchmark may leave its private redis-server running.
func dieWithParent(*exec.Cmd) {}
