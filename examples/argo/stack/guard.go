package stack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// InstallPolicy installs the guard's admission policy and binds it to ns
// only, then waits until the apiserver applies it (a dry-run workflow Pod
// comes back with the guard's finalizer): policies reach the admission
// chain asynchronously.
func InstallPolicy(ctx context.Context, c client.Client, ns string) error {
	if err := c.Create(ctx, guard.Policy()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("argo: install the guard's policy: %w", err)
	}
	b := guard.Binding(guard.PolicyName+"-"+ns, &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}})
	if err := c.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("argo: bind the guard's policy: %w", err)
	}
	return controlplane.WaitFor(ctx, 60*time.Second, "the guard's admission policy to apply in "+ns, func(ctx context.Context) (bool, error) {
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "policy-probe-", Labels: map[string]string{LabelWorkflow: "probe"}, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: WorkflowGVK.GroupVersion().String(), Kind: WorkflowGVK.Kind, Name: "probe", UID: types.UID("probe"),
			}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.37"}}},
		}
		if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		return slices.Contains(probe.Finalizers, guard.Finalizer), nil
	})
}

// StartGuard starts the guard on ns with cfg's identity (the admin, or the
// guard's ServiceAccount under its own RBAC), after checking, as the guard
// command does, that its admission policy is installed (InstallPolicy).
func StartGuard(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, ns string, opts guard.Options) (*GuardRun, error) {
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%s-%d", guard.DefaultName, guardSeq.Add(1))
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
	if err := guard.CheckPolicy(ctx, mgr.GetAPIReader()); err != nil {
		return nil, err
	}
	g, err := guard.New(mgr.GetAPIReader(), counted, opts)
	if err != nil {
		return nil, err
	}
	if err := g.SetupWithManager(mgr); err != nil {
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
