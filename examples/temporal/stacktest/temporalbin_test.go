package stacktest

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/finale-dev/finale/internal/temporalbin"
)

// TestStartServesAndStops runs the real server: the frontend is on
// loopback, the namespace it announces exists, worker deployment
// versioning is on (the API the seed calls), and Stop leaves no process of
// its group behind.
func TestStartServesAndStops(t *testing.T) {
	s, err := temporalbin.Start(t.Context(), temporalbin.Options{Log: os.Stderr})
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
