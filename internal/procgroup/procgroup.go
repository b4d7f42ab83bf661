// Package procgroup runs the real servers of tests and the demo (the
// control plane, the Temporal server, the Argo controller) each in a process
// group of its own, so that stopping one ends whatever it started and a
// dying test binary takes them with it.
//
// A group is signalled only while its leader is not yet reaped. A group's
// number is its leader's process ID, free again once the leader is reaped
// and the group empty; where PIDs wrap often (pid_max is 32,768 on the
// machines this runs on, and make test starts thousands of processes), a
// signal sent to it later can reach another process's new group: a server
// of a parallel test. So Wait kills what the leader left in its group
// before it reaps the leader, and Stop leaves a reaped group alone.
package procgroup

import (
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Attr puts a command in a new process group, killed when the process that
// started it dies.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Wait waits for cmd, started with Attr, to exit; kills whatever it left in
// its group while the exited leader, not yet reaped, still holds the
// group's number; then reaps it and returns cmd.Wait's result.
func Wait(cmd *exec.Cmd) error {
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != syscall.EINTR {
			break // on any other error Wait below says what happened
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // the leftovers; none is fine
	return cmd.Wait()
}

// Stop ends the group that pid leads: SIGTERM, then SIGKILL once grace has
// passed without done closing (done is closed when the leader's Wait
// returns). It returns once done is closed; a group whose leader was
// already reaped gets no signal.
func Stop(pid int, done <-chan struct{}, grace time.Duration) {
	if exited(done) {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		Kill(pid, done)
		<-done
	}
}

// Kill sends SIGKILL to the group that pid leads unless its leader was
// reaped (done closed), and does not wait.
func Kill(pid int, done <-chan struct{}) {
	if !exited(done) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// exited reports whether done is closed.
func exited(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
