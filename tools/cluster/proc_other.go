//go:build !linux

package cluster

import "syscall"

// sysProcAttr puts the child in its own process group, so a signal reaches
// everything it started. Without Pdeathsig, only Stop kills the children.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
