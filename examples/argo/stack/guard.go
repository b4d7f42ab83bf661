package stack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/argo/guard"
)

// GuardRun is the guard running in this process on one namespace, as its
// Deployment runs it, with its API writes counted.
type GuardRun struct {
	Guard *guard.Guard
	// Writes counts the guard's API write requests (finalizer patches; it
	// writes nothing else, and Events are counted apart), conflicts
	// included.
	Writes atomic.Int64
	// Conflicts counts the writes answered 409 Conflict (a patch carrying
	// a resourceVersion that Argo had moved on), each redone on a fresh
	// read.
	Conflicts atomic.Int64
	// Events counts the Events it emitted.
	Events atomic.Int64
	stop   func() error
}

var guardSeq atomic.Int64

// InstallPolicy installs the guard's admission policy, binds it to ns only
// with the heartbeat Lease in ns as its parameter, renews that Lease once
// (as the guard would; a guard started on ns takes it over, and if none
// does it expires after DefaultHeartbeatDuration), then waits until the
// apiserver applies the policy (a dry-run workflow Pod comes back with the
// guard's finalizer): policies reach the admission chain asynchronously.
func InstallPolicy(ctx context.Context, c client.Client, ns string) error {
	if err := c.Create(ctx, guard.Policy()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("argo: install the guard's policy: %w", err)
	}
	b := guard.Binding(guard.PolicyName+"-"+ns, &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}, ns)
	if err := c.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("argo: bind the guard's policy: %w", err)
	}
	hb, err := guard.NewHeartbeat(c, c, guard.HeartbeatOptions{Namespace: ns, Identity: "install"})
	if err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	if err := hb.Renew(ctx); err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	return WaitMarked(ctx, c, ns, true, 60*time.Second)
}

// Marked reports whether a workflow Pod created in ns now would get the
// guard's finalizer (guard.ProbeMarked: a dry-run create).
func Marked(ctx context.Context, c client.Client, ns string) (bool, error) {
	return guard.ProbeMarked(ctx, c, ns)
}

// WaitMarked waits until Marked(ns) is want.
func WaitMarked(ctx context.Context, c client.Client, ns string, want bool, timeout time.Duration) error {
	what := "new workflow Pods in " + ns + " to get the guard's finalizer"
	if !want {
		what = "new workflow Pods in " + ns + " to go without the guard's finalizer"
	}
	return controlplane.WaitFor(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		got, err := Marked(ctx, c, ns)
		return got == want, err
	})
}

// GuardOptions configure StartGuardWith.
type GuardOptions struct {
	Guard guard.Options
	// Heartbeat's Namespace is the guard's namespace when empty.
	Heartbeat guard.HeartbeatOptions
}

// StartGuard starts the guard on ns with cfg's identity (the admin, or the
// guard's ServiceAccount under its own RBAC), after checking, as the guard
// command does, that its admission policy is installed (InstallPolicy),
// with its heartbeat in ns.
func StartGuard(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, ns string, opts guard.Options) (*GuardRun, error) {
	return StartGuardWith(ctx, cfg, scheme, ns, GuardOptions{Guard: opts})
}

// StartGuardWith is StartGuard with the heartbeat's options. The heartbeat
// writes through its own client: GuardRun.Writes counts the release path's
// writes only.
func StartGuardWith(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, ns string, gopts GuardOptions) (*GuardRun, error) {
	opts := gopts.Guard
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%s-%d", guard.DefaultName, guardSeq.Add(1))
	}
	hbOpts := gopts.Heartbeat
	if hbOpts.Namespace == "" {
		hbOpts.Namespace = ns
	}
	if hbOpts.Identity == "" {
		hbOpts.Identity = opts.Name
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		return nil, fmt.Errorf("argo: guard manager: %w", err)
	}
	run := &GuardRun{}
	base, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("argo: %w", err)
	}
	counted := interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return run.count(c.Patch(ctx, obj, patch, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return run.count(c.Update(ctx, obj, opts...))
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return run.count(c.SubResource(sub).Update(ctx, obj, opts...))
		},
	})
	if opts.Events == nil {
		rec := mgr.GetEventRecorder(opts.Name)
		opts.Events = eventCounter{next: rec, n: &run.Events}
	}
	if err := guard.CheckPolicy(ctx, mgr.GetAPIReader(), hbOpts.Namespace); err != nil {
		return nil, err
	}
	g, err := guard.New(mgr.GetAPIReader(), counted, opts)
	if err != nil {
		return nil, err
	}
	if err := g.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	hb, err := guard.NewHeartbeat(mgr.GetAPIReader(), base, hbOpts)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(hb); err != nil {
		return nil, err
	}
	run.Guard = g
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	var once sync.Once
	var stopErr error
	run.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		_ = run.stop()
		return nil, errors.New("argo: the guard's cache did not sync")
	}
	return run, nil
}

func (g *GuardRun) count(err error) error {
	g.Writes.Add(1)
	if apierrors.IsConflict(err) {
		g.Conflicts.Add(1)
	}
	return err
}

// Stop stops the guard's manager.
func (g *GuardRun) Stop() error { return g.stop() }

type eventCounter struct {
	next interface {
		Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
	}
	n *atomic.Int64
}

func (e eventCounter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	e.n.Add(1)
	e.next.Eventf(regarding, related, eventtype, reason, action, note, args...)
}
