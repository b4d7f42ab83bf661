package testenv_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/testenv"
)

var gadget = schema.GroupVersionKind{Group: "testenv.finale.dev", Version: "v1", Kind: "Gadget"}

// events records what happened in which order, across goroutines.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// alive reports whether the control plane and PostgreSQL answer.
func alive(ctx context.Context, env *testenv.Env) string {
	ns := &corev1.NamespaceList{}
	cp := env.Client.List(ctx, ns) == nil
	pg := false
	// A TCP connect, not a login: this module does not require a driver.
	var d net.Dialer
	if conn, err := d.DialContext(ctx, "tcp", env.Postgres.Addr()); err == nil {
		pg = true
		_ = conn.Close()
	}
	return "control plane " + strconv.FormatBool(cp) + ", postgres " + strconv.FormatBool(pg)
}

// TestStopOrder: what Go started stops first, with the control plane and
// PostgreSQL still up, then the OnStop functions, then the servers; an
// early failure of a Go function is Stop's error.
func TestStopOrder(t *testing.T) {
	ctx := t.Context()
	env, err := testenv.Start(ctx, testenv.Options{
		CRDPaths: []string{"testdata/crd"},
		Postgres: &pgserver.Options{},
		Log:      testLog{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	// The CRD is served: an object of it can be created at once.
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(gadget)
	g.SetNamespace(testenv.Namespace(t, env.Client))
	g.SetName("one")
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatalf("create a Gadget right after Start: %v", err)
	}

	var ev events
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env.Go("manager", func(ctx context.Context) error {
		<-ctx.Done()
		ev.add("manager stopping: " + alive(stopCtx, env))
		return nil
	})
	failed := errors.New("lost its lease")
	env.Go("flaky", func(context.Context) error { return failed })
	env.OnStop(func() { ev.add("first hook: " + alive(stopCtx, env)) })
	env.OnStop(func() { ev.add("second hook") })

	t.Run("GoFor waits for its function at the test's end", func(t *testing.T) {
		env.GoFor(t, func(ctx context.Context) error {
			<-ctx.Done()
			ev.add("per-test manager stopped")
			return ctx.Err() // a cancellation is no failure
		})
	})
	if diff := cmp.Diff([]string{"per-test manager stopped"}, ev.list()); diff != "" {
		t.Fatalf("after the subtest (-want +got):\n%s", diff)
	}

	pids := env.ControlPlane.PIDs()
	pgPID := env.Postgres.PID()
	err = env.Stop()
	if !errors.Is(err, failed) {
		t.Errorf("Stop = %v, want the flaky function's error", err)
	}
	want := []string{
		"per-test manager stopped",
		"manager stopping: control plane true, postgres true",
		"second hook",
		"first hook: control plane true, postgres true",
	}
	if diff := cmp.Diff(want, ev.list()); diff != "" {
		t.Errorf("stop order (-want +got):\n%s", diff)
	}
	for name, pid := range pids {
		if running(pid) {
			t.Errorf("%s (pid %d) still runs after Stop", name, pid)
		}
	}
	if running(pgPID) {
		t.Errorf("postgres (pid %d) still runs after Stop", pgPID)
	}
	if again := env.Stop(); !errors.Is(again, failed) {
		t.Errorf("a second Stop = %v, want the same result", again)
	}
}

// A failed start leaves nothing running: here PostgreSQL is missing while
// the control plane starts beside it.
func TestFailedStartLeavesNothing(t *testing.T) {
	env, err := testenv.Start(t.Context(), testenv.Options{
		Postgres: &pgserver.Options{BinDir: t.TempDir()},
		Log:      testLog{t},
	})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start succeeded without PostgreSQL binaries")
	}
	if !errors.Is(err, pgserver.ErrNotInstalled) {
		t.Errorf("Start = %v, want pgserver.ErrNotInstalled", err)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left after a failed Start: %v", kids)
	}
}

func TestBadCRDPathStartsNothing(t *testing.T) {
	_, err := testenv.Start(t.Context(), testenv.Options{CRDPaths: []string{"testdata/none"}, Log: testLog{t}})
	if err == nil || !strings.Contains(err.Error(), "testdata/none") {
		t.Fatalf("Start = %v, want an error naming the path", err)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left after a failed Start: %v", kids)
	}
}

func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie has exited; only its entry waits to be reaped.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// children lists the live processes whose parent is this test binary.
func children(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == self && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:strings.LastIndexByte(s, ')')])
		}
	}
	return out
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
