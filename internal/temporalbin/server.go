package temporalbin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/finale-dev/finale/internal/procgroup"
)

// ReadyPrefix starts the line the server prints once it serves; the rest
// of the line is JSON (see tools/temporal/cmd/temporal-server).
const ReadyPrefix = "FINALE_TEMPORAL_READY "

// DefaultPollerHistoryTTL is Options.PollerHistoryTTL when zero.
const DefaultPollerHistoryTTL = 5 * time.Second

const (
	readyTimeout = 90 * time.Second
	// stopGrace is how long SIGTERM has before SIGKILL. The state is in
	// memory and thrown away, so a clean exit buys nothing but time: the
	// server takes 2 to 7 s to stop its four services.
	stopGrace    = 2 * time.Second
	logTailLines = 30
)

// Options tune Start. The zero value is ready to use.
type Options struct {
	// Log receives progress (a cold build takes minutes). Nil discards it.
	Log io.Writer
	// BinDir holds a prebuilt binary; empty means Ensure.
	BinDir string
	// PollerHistoryTTL is how long the server remembers a poller; zero is
	// DefaultPollerHistoryTTL.
	PollerHistoryTTL time.Duration
}

// Server is a running Temporal server.
type Server struct {
	// HostPort is the frontend's address, 127.0.0.1:PORT.
	HostPort string
	// Namespace is a Temporal namespace registered at start.
	Namespace string

	cmd     *exec.Cmd
	dir     string
	logPath string
	done    chan struct{} // closed when cmd.Wait returns
	err     error         // set before done is closed

	stopOnce sync.Once
	stopErr  error
}

type ready struct {
	Frontend  string `json:"frontend"`
	Namespace string `json:"namespace"`
}

// Start runs the server and returns once it has printed its ready line. On
// failure it stops what it started and returns the tail of its log.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
	if o.PollerHistoryTTL < 0 {
		return nil, fmt.Errorf("temporalbin: Options.PollerHistoryTTL is %v; use a positive duration, or 0 for %v", o.PollerHistoryTTL, DefaultPollerHistoryTTL)
	}
	if o.PollerHistoryTTL == 0 {
		o.PollerHistoryTTL = DefaultPollerHistoryTTL
	}
	binDir := o.BinDir
	if binDir == "" {
		if binDir, err = Ensure(ctx, o.Log); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "finale-temporal-")
	if err != nil {
		return nil, fmt.Errorf("temporalbin: %w", err)
	}
	s := &Server{dir: dir, logPath: filepath.Join(dir, "temporal-server.log"), done: make(chan struct{})}
	started := false
	defer func() {
		if err == nil {
			return
		}
		if started {
			_ = s.Stop()
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, fmt.Errorf("temporalbin: %w", err)
	}
	s.cmd = exec.Command(Path(binDir), "-poller-history-ttl="+o.PollerHistoryTTL.String())
	s.cmd.Dir = dir
	s.cmd.Stderr = logFile
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("temporalbin: %w", err)
	}
	// Own process group, so Stop can signal everything the server started;
	// a parent-death signal, so a panicking test leaves nothing behind.
	s.cmd.SysProcAttr = procgroup.Attr()
	if err := s.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("temporalbin: start %s: %w", Path(binDir), err)
	}
	started = true
	readyc := make(chan ready, 1)
	var copied sync.WaitGroup
	copied.Add(1)
	go func() { defer copied.Done(); scanReady(stdout, logFile, readyc) }()
	go func() {
		copied.Wait() // Wait closes stdout; everything it carried is logged first
		s.err = procgroup.Wait(s.cmd)
		_ = logFile.Close() // the log is complete once the process exits
		close(s.done)
	}()

	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case r := <-readyc:
		if r.Frontend == "" || r.Namespace == "" {
			return nil, fmt.Errorf("temporalbin: ready line without frontend or namespace (%+v); last lines of %s:\n%s", r, s.logPath, s.LogTail(logTailLines))
		}
		s.HostPort, s.Namespace = r.Frontend, r.Namespace
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("temporalbin: the server exited before it was ready (%w); last lines of %s:\n%s", s.err, s.logPath, s.LogTail(logTailLines))
	case <-timer.C:
		return nil, fmt.Errorf("temporalbin: the server did not print its ready line within %s; last lines of %s:\n%s", readyTimeout, s.logPath, s.LogTail(logTailLines))
	case <-ctx.Done():
		return nil, fmt.Errorf("temporalbin: waiting for the server: %w; last lines of %s:\n%s", ctx.Err(), s.logPath, s.LogTail(logTailLines))
	}
}

// scanReady copies the server's stdout into its log and sends the first
// ready line it finds.
func scanReady(r io.Reader, log io.Writer, readyc chan<- ready) {
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Fprintln(log, line) // the log is for people; a short write loses only a line of it
		if rest, ok := strings.CutPrefix(line, ReadyPrefix); ok && !sent {
			var rd ready
			// A malformed line is sent as an empty ready, which Start
			// reports with the log tail.
			_ = json.Unmarshal([]byte(rest), &rd)
			readyc <- rd
			sent = true
		}
	}
	// Keep draining after a scanner error (a line over 64 KiB), so the
	// server never blocks writing to a full pipe.
	_, _ = io.Copy(log, r)
}

// PID is the server's process ID, which is also its process group.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Dir is the server's temporary directory (its log).
func (s *Server) Dir() string { return s.dir }

// Exited is closed when the server process has exited.
func (s *Server) Exited() <-chan struct{} { return s.done }

// LogTail returns the last lines of the server's log.
func (s *Server) LogTail(lines int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	parts := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// Stop ends the server (SIGTERM, then SIGKILL to its process group after a
// grace period) and removes its temporary directory. It is safe to call
// more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		procgroup.Stop(s.cmd.Process.Pid, s.done, stopGrace)
		if err := os.RemoveAll(s.dir); err != nil {
			s.stopErr = fmt.Errorf("temporalbin: remove %s: %w", s.dir, err)
		}
	})
	return s.stopErr
}
