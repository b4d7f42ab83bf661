package procgroup_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/finale-dev/finale/internal/procgroup"
)

// A leader that ignores SIGTERM is killed once the grace has passed, and
// the child it started in its group goes with it.
func TestStopKillsTheGroup(t *testing.T) {
	cmd, child := startWithChild(t, `trap "" TERM; sleep 300 & echo $!; wait`)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	procgroup.Stop(cmd.Process.Pid, done, 100*time.Millisecond)
	if err := goneWithin(t, child, 10*time.Second); err != nil {
		t.Fatalf("child %d of the group still runs after Stop: %v", child, err)
	}
}

// startWithChild starts script in a group of its own; its first line of
// output must be the process ID of a child it started, which it returns.
func startWithChild(t *testing.T, script string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = procgroup.Attr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, child
}

// goneWithin waits until pid no longer runs; an error if it still does
// after d.
func goneWithin(t *testing.T, pid int, d time.Duration) error {
	return wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return !running(pid), nil
	})
}

// running reports whether pid is a live process (a zombie nobody reaped
// yet is not).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return err == nil && i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// A leader that exits leaves nothing behind in its group: Wait kills it
// while the leader still holds the group's number.
func TestWaitKillsLeftovers(t *testing.T) {
	cmd, child := startWithChild(t, `sleep 300 & echo $!`)
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }() // if the test fails
	if err := procgroup.Wait(cmd); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if err := goneWithin(t, child, 10*time.Second); err != nil {
		t.Fatalf("child %d of the exited leader's group still runs: %v", child, err)
	}
}

// Stop sends nothing once the leader was reaped: by then the group's
// number may lead another process's group (PIDs wrap), here played by a
// live group of this test's own.
func TestStopLeavesAReapedGroupAlone(t *testing.T) {
	other := exec.Command("sleep", "300")
	other.SysProcAttr = procgroup.Attr()
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	reaped := make(chan struct{})
	close(reaped)
	procgroup.Stop(other.Process.Pid, reaped, time.Millisecond)
	procgroup.Kill(other.Process.Pid, reaped)
	// A signal sent would end it within the second; it must outlive it.
	if goneWithin(t, other.Process.Pid, time.Second) == nil {
		t.Fatal("Stop or Kill signalled a group whose leader had been reaped")
	}
}
