package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/argobin"
	"github.com/finale-dev/finale/internal/argobin/argocrd"
	"github.com/finale-dev/finale/internal/procgroup"
)

// Names Argo uses, from workflow/common at v4.1.4.
const (
	// FinalizerStatus is Argo's own status-capture finalizer, the one the
	// seed reports removed on a timer.
	FinalizerStatus = "workflows.argoproj.io/status"
	// LabelWorkflow names a Pod's or a task result's Workflow.
	LabelWorkflow = "workflows.argoproj.io/workflow"
	// LabelCompleted is set to "true" on a Pod once its node is persisted.
	LabelCompleted = "workflows.argoproj.io/completed"
	// LabelReportOutputsCompleted marks a task result as final.
	LabelReportOutputsCompleted = "workflows.argoproj.io/report-outputs-completed"
	// AnnotationNodeID is the ID of the node a Pod runs: the key of
	// status.nodes and the name of its task result.
	AnnotationNodeID = "workflows.argoproj.io/node-id"
	// ConfigMap is the controller's configuration ConfigMap.
	ConfigMap = "workflow-controller-configmap"
)

// Kinds, as unstructured objects carry them: finale's module never imports
// Argo's Go types.
var (
	Group                 = "argoproj.io"
	WorkflowGVK           = schema.GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: "Workflow"}
	WorkflowTaskResultGVK = schema.GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: "WorkflowTaskResult"}
)

const (
	stopGrace    = 5 * time.Second
	logTailLines = 40
)

// Options configure Start. Kubeconfig and Namespace are required.
type Options struct {
	// Kubeconfig is the control plane's kubeconfig file.
	Kubeconfig string
	// Namespace is the one namespace the controller manages.
	Namespace string
	// Workers is --workflow-workers; zero stops the workflow workers (the
	// seed's fault), Pod cleanup keeps running.
	Workers int
	// PodCleanupWorkers is --pod-cleanup-workers; 4 (Argo's default) when
	// zero.
	PodCleanupWorkers int
	// BinDir holds workflow-controller; empty means argobin.Ensure.
	BinDir string
	// Log receives build progress; nil discards it.
	Log io.Writer
}

// Controller is a running stock workflow-controller.
type Controller struct {
	opts Options
	bin  string
	dir  string
	log  string

	mu   sync.Mutex // guards proc
	proc *process
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returns
	err  error         // set before done is closed
}

// Install puts what the controller needs into the cluster: Argo's CRDs (read
// from the argo-workflows module) and its configuration ConfigMap in ns,
// which switches off the metrics and telemetry servers (they would listen
// on fixed ports on every interface). It is idempotent.
func Install(ctx context.Context, c client.Client, ns string) error {
	crds, err := argocrd.CRDs(ctx)
	if err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	if err := controlplane.InstallCRDs(ctx, c, crds...); err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMap},
		Data:       map[string]string{"metricsConfig": "enabled: false\n", "telemetryConfig": "enabled: false\n"},
	}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("argo: create ConfigMap %s/%s: %w", ns, ConfigMap, err)
	}
	return nil
}

// Start builds (or finds) the controller and starts it.
func Start(ctx context.Context, opts Options) (*Controller, error) {
	if opts.Kubeconfig == "" || opts.Namespace == "" {
		return nil, errors.New("argo: Options.Kubeconfig and Options.Namespace are required")
	}
	if opts.Workers < 0 || opts.PodCleanupWorkers < 0 {
		return nil, fmt.Errorf("argo: worker counts must not be negative (Workers %d, PodCleanupWorkers %d)", opts.Workers, opts.PodCleanupWorkers)
	}
	if opts.PodCleanupWorkers == 0 {
		opts.PodCleanupWorkers = 4
	}
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = argobin.Ensure(ctx, opts.Log); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "finale-argo-")
	if err != nil {
		return nil, fmt.Errorf("argo: %w", err)
	}
	c := &Controller{opts: opts, bin: argobin.Path(binDir, argobin.WorkflowController), dir: dir, log: filepath.Join(dir, "workflow-controller.log")}
	if err := c.spawn(opts.Workers); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Controller) spawn(workers int) error {
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	fmt.Fprintf(f, "=== finale: starting workflow-controller with --workflow-workers=%d at %s\n", workers, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin,
		"--kubeconfig="+c.opts.Kubeconfig,
		"--namespaced",
		"--managed-namespace="+c.opts.Namespace,
		"--namespace="+c.opts.Namespace,
		"--configmap="+ConfigMap,
		"--workflow-workers="+strconv.Itoa(workers),
		"--pod-cleanup-workers="+strconv.Itoa(c.opts.PodCleanupWorkers),
		"--executor-image=quay.io/argoproj/argoexec:"+argobin.Version,
		"--loglevel=info",
	)
	cmd.Env = append(os.Environ(),
		"LEADER_ELECTION_DISABLE=true",
		"ARGO_POD_STATUS_CAPTURE_FINALIZER=true",
	)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = c.dir
	// Own process group, so Stop reaches everything it started; a
	// parent-death signal, so a panicking test leaves nothing behind.
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		_ = f.Close() // nothing was written by the process
		return fmt.Errorf("argo: start %s: %w", c.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = procgroup.Wait(cmd)
		_ = f.Close() // the log is complete once the process exits
		close(p.done)
	}()
	c.mu.Lock()
	c.proc = p
	c.mu.Unlock()
	return nil
}

// Running reports an error when the controller has exited, with its log.
func (c *Controller) Running() error {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return errors.New("argo: workflow-controller is stopped")
	}
	select {
	case <-p.done:
		err := p.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("argo: workflow-controller exited (%w); last lines of %s:\n%s", err, c.log, c.LogTail(logTailLines))
	default:
		return nil
	}
}

// Restart stops the controller, if it runs, and starts it again with
// workers workflow workers, as the report scales its controller down and
// up.
func (c *Controller) Restart(workers int) error {
	if workers < 0 {
		return fmt.Errorf("argo: workers %d must not be negative", workers)
	}
	c.halt()
	return c.spawn(workers)
}

// Pause stops the controller process and keeps everything else, as the
// report scales its controller to zero; Restart starts it again.
func (c *Controller) Pause() { c.halt() }

// halt ends the running process, if any: SIGTERM, then SIGKILL to its group.
func (c *Controller) halt() {
	c.mu.Lock()
	p := c.proc
	c.proc = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	procgroup.Stop(p.cmd.Process.Pid, p.done, stopGrace)
}

// Stop ends the controller and removes its directory (the log with it). It
// is safe to call more than once.
func (c *Controller) Stop() error {
	c.halt()
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	return nil
}

// LogPath is the controller's log file (all starts, appended).
func (c *Controller) LogPath() string { return c.log }

// LogTail returns the last lines of the controller's log.
func (c *Controller) LogTail(lines int) string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	parts := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
