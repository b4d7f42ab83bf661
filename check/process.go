package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/finale-dev/finale/internal/procgroup"
)

// proc is one run of a program in a process group of its own (the
// operator, the external service), its output appended to a log file.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when Wait returns
	err  error         // Wait's result, set before done is closed
}

func startProc(name string, argv, env []string, dir, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		_ = f.Close() // nothing was written
		return nil, fmt.Errorf("start %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = procgroup.Wait(cmd)
		_ = f.Close() // the process and its group's output went with it
		close(p.done)
	}()
	return p, nil
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the whole group at once and waits for the leader.
func (p *proc) kill() {
	procgroup.Kill(p.cmd.Process.Pid, p.done)
	<-p.done
}

// stop is SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) { procgroup.Stop(p.cmd.Process.Pid, p.done, grace) }

// tail is the last lines of the log.
func (p *proc) tail(lines int) string { return tailFile(p.log, lines) }

func tailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	ls := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return string(bytes.Join(ls, []byte("\n")))
}

// operator is one start of the operator under test: a process, or an
// in-process Start function.
type operator struct {
	p *proc // a process; nil in-process

	// in-process: cancel ends it, done is closed when Start returned.
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // guards err
	err    error
	log    string
}

func (o *operator) pid() int {
	if o.p != nil {
		return o.p.cmd.Process.Pid
	}
	return 0
}

func (o *operator) exited() bool {
	if o.p != nil {
		return !o.p.running()
	}
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// kill ends the operator at once: SIGKILL to its group, or its context
// cancelled (an in-process operator cannot be killed harder).
func (o *operator) kill() {
	if o.p != nil {
		o.p.kill()
		return
	}
	o.cancel()
	<-o.done
}

// stop ends the operator gracefully (SIGTERM, SIGKILL after grace).
func (o *operator) stop(grace time.Duration) {
	if o.p != nil {
		o.p.stop(grace)
		return
	}
	o.cancel()
	select {
	case <-o.done:
	case <-time.After(grace):
	}
}

// exitErr says how an exited operator ended.
func (o *operator) exitErr() error {
	if o.p != nil {
		return o.p.err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func startInProcess(start StartFunc, e OperatorEnv, logPath string) *operator {
	ctx, cancel := context.WithCancel(context.Background())
	o := &operator{cancel: cancel, done: make(chan struct{}), log: logPath}
	go func() {
		defer close(o.done)
		err := start(ctx, e)
		o.mu.Lock()
		o.err = err
		o.mu.Unlock()
		if err != nil && !errors.Is(err, context.Canceled) {
			if f, ferr := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); ferr == nil {
				_, _ = io.WriteString(f, "operator returned: "+err.Error()+"\n")
				_ = f.Close()
			}
		}
	}()
	return o
}
