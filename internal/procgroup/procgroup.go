// Package procgroup runs the real servers of tests and the demo (the
// control plane, the Temporal server, the Argo controller) each in a process
// group of its own, so that stopping one ends whatever it started and a
// dying test binary takes them with it.
package procgroup

import (
	"syscall"
	"time"
)

// Attr puts a command in a new process group, killed when the process that
// started it dies.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Stop ends the group that pid leads: SIGTERM, SIGKILL once grace has
// passed without done closing, and SIGKILL again for anything the leader
// left in its group. It returns once done (closed when the leader's Wait
// returns) is closed.
func Stop(pid int, done <-chan struct{}, grace time.Duration) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
