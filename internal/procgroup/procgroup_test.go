package procgroup_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/finale-dev/finale/internal/procgroup"
)

// A leader that ignores SIGTERM is killed once the grace has passed, and
// the child it started in its group goes with it.
func TestStopKillsTheGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 300 & echo $!; wait`)
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
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	procgroup.Stop(cmd.Process.Pid, done, 100*time.Millisecond)
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !running(child), nil
	})
	if err != nil {
		t.Fatalf("child %d of the group still runs after Stop: %v", child, err)
	}
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
