//go:build linux

package cluster

import "syscall"

// sysProcAttr puts the child in its own process group, so a signal reaches
// everything it started, and has the kernel kill it if the thread that
// started it dies (Pdeathsig), so a crashed or killed test leaves nothing
// running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
