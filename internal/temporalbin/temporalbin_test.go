package temporalbin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
)

func TestDirHonoursEnv(t *testing.T) {
	d := t.TempDir()
	t.Setenv(EnvDir, d)
	got, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if got != d {
		t.Fatalf("Dir() = %q, want %q", got, d)
	}
}

// TestStartServesAndStops runs the real server: the frontend is on
// loopback, the namespace it announces exists, worker deployment
// versioning is on (the API the seed calls), and Stop leaves no process of
// its group behind.
func TestStartServesAndStops(t *testing.T) {
	s, err := Start(t.Context(), Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop()
		}
	})
	if !strings.HasPrefix(s.HostPort, "127.0.0.1:") {
		t.Errorf("frontend %q is not on 127.0.0.1", s.HostPort)
	}
	c, err := sdkclient.DialContext(t.Context(), sdkclient.Options{HostPort: s.HostPort, Namespace: s.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace}); err != nil {
		t.Fatalf("describe the announced namespace: %v", err)
	}
	// A worker deployment API answers (NotFound for a name nobody polled),
	// rather than refusing because versioning is off.
	_, err = c.WorkerDeploymentClient().GetHandle("finale-probe").Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
	if err == nil || !strings.Contains(err.Error(), "no Worker Deployment found") {
		t.Fatalf("describe a worker deployment nobody polled: %v, want NotFound", err)
	}

	pgid := s.PID()
	dir := s.Dir()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d after Stop: %v, want ESRCH", pgid, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory after Stop: %v, want it removed", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// fakeBinDir holds a stand-in "server" (a shell script) to test Start's own
// error paths: what it reports when the process misbehaves.
func fakeBinDir(t *testing.T, script string) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, Binary), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestStartReportsLogTail(t *testing.T) {
	cases := map[string]struct {
		script, want string
	}{
		"exits before ready": {
			script: "echo 'bind: address already in use' >&2\nexit 3\n",
			want:   "exited before it was ready (exit status 3); last lines of",
		},
		"ready line without address": {
			script: "echo 'FINALE_TEMPORAL_READY {}'\nsleep 60\n",
			want:   "ready line without frontend or namespace",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Start(t.Context(), Options{BinDir: fakeBinDir(t, tc.script)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.want)
			}
			if name == "exits before ready" && !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("the error lacks the log tail: %v", err)
			}
		})
	}
}

func TestStartRejectsNegativeTTL(t *testing.T) {
	if _, err := Start(t.Context(), Options{PollerHistoryTTL: -time.Second}); err == nil {
		t.Fatal("Start accepted a negative PollerHistoryTTL")
	}
}
