package check_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/check"
)

// A toy owner with result-capture children, as Argo's workflow controller
// is built: an owner (a ConfigMap labelled toyOwner) gets one child Pod
// carrying toyResultFinalizer; the child's result is its toyResult
// annotation; the owner's recorder copies it into the owner's data; a
// separate cleanup path releases a deleted child's finalizer. The naive
// cleanup releases at once (Argo's timer, elapsed); the careful one only
// once the owner's data holds the child's result, or the owner is gone.
const (
	toyOwner           = "toy.example.com/owner"
	toyResult          = "toy.example.com/result"
	toyResultFinalizer = "toy.example.com/result"
	toyStarted         = "toy.example.com/started"
	toyHoldRetry       = 200 * time.Millisecond
)

// toyRecorder is the owner's reconciler: it makes the child and records
// its result. Stalled, it does not run (Argo without workflow workers).
type toyRecorder struct{ c client.Client }

func (t toyRecorder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var owner corev1.ConfigMap
	if err := t.c.Get(ctx, req.NamespacedName, &owner); err != nil || owner.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var child corev1.Pod
	if owner.Annotations[toyStarted] == "" { // the child is made once, like a workflow's step
		child = corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: owner.Namespace, Name: owner.Name + "-child", Finalizers: []string{toyResultFinalizer}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "work", Image: "busybox:1.37"}}},
		}
		if err := controllerutil.SetControllerReference(&owner, &child, t.c.Scheme()); err != nil {
			return reconcile.Result{}, err
		}
		if err := t.c.Create(ctx, &child); err != nil && !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, err
		}
		patch := client.MergeFrom(owner.DeepCopy())
		metav1.SetMetaDataAnnotation(&owner.ObjectMeta, toyStarted, child.Name)
		return reconcile.Result{}, t.c.Patch(ctx, &owner, patch)
	}
	if err := t.c.Get(ctx, client.ObjectKey{Namespace: owner.Namespace, Name: owner.Name + "-child"}, &child); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // gone: its result, unrecorded, is lost
	}
	res, ok := child.Annotations[toyResult]
	if !ok || owner.Data[child.Name] == res {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFrom(owner.DeepCopy())
	if owner.Data == nil {
		owner.Data = map[string]string{}
	}
	owner.Data[child.Name] = res
	return reconcile.Result{}, t.c.Patch(ctx, &owner, patch)
}

// toyCleanup releases deleted children; it runs stalled or not.
type toyCleanup struct {
	c       client.Client
	careful bool
}

func (t toyCleanup) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var child corev1.Pod
	if err := t.c.Get(ctx, req.NamespacedName, &child); err != nil || child.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(&child, toyResultFinalizer) {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if t.careful {
		var owner corev1.ConfigMap
		err := t.c.Get(ctx, client.ObjectKey{Namespace: child.Namespace, Name: strings.TrimSuffix(child.Name, "-child")}, &owner)
		if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		if err == nil && owner.DeletionTimestamp == nil && owner.Data[child.Name] == "" {
			return reconcile.Result{RequeueAfter: toyHoldRetry}, nil // the owner has not recorded it: keep the child
		}
	}
	patch := client.MergeFrom(child.DeepCopy())
	controllerutil.RemoveFinalizer(&child, toyResultFinalizer)
	return reconcile.Result{}, client.IgnoreNotFound(t.c.Patch(ctx, &child, patch))
}

func startToy(careful bool) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		s := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(s))
		mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
			Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard(),
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err != nil {
			return err
		}
		owners := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[toyOwner] == "true" })
		if !e.Stalled {
			if err := ctrl.NewControllerManagedBy(mgr).Named("toy-recorder").
				For(&corev1.ConfigMap{}, builder.WithPredicates(owners)).Owns(&corev1.Pod{}).
				Complete(toyRecorder{c: mgr.GetClient()}); err != nil {
				return err
			}
		}
		if err := ctrl.NewControllerManagedBy(mgr).Named("toy-cleanup").For(&corev1.Pod{}).
			Complete(toyCleanup{c: mgr.GetClient(), careful: careful}); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
}

// toyClient reaches check's control plane from the hooks.
func toyClient(v check.Values) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", v.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{})
}

func toyChildren(ctx context.Context, v check.Values) (client.Client, []corev1.Pod, error) {
	c, err := toyClient(v)
	if err != nil {
		return nil, nil, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(v.Namespace)); err != nil {
		return nil, nil, err
	}
	return c, pods.Items, nil
}

// toyResults is the results probe: children by name, produced by their
// annotation, persisted by the owners' data.
func toyResults(ctx context.Context, v check.Values) (check.ResultSet, error) {
	var rs check.ResultSet
	c, pods, err := toyChildren(ctx, v)
	if err != nil {
		return rs, err
	}
	for _, p := range pods {
		rs.Children = append(rs.Children, p.Name)
		if _, ok := p.Annotations[toyResult]; ok {
			rs.Produced = append(rs.Produced, p.Name)
		}
	}
	var owners corev1.ConfigMapList
	if err := c.List(ctx, &owners, client.InNamespace(v.Namespace), client.MatchingLabels{toyOwner: "true"}); err != nil {
		return rs, err
	}
	for _, o := range owners.Items {
		for child, res := range o.Data {
			if res != "" {
				rs.Persisted = append(rs.Persisted, child)
			}
		}
	}
	return rs, nil
}

// toyComplete plays every child finishing: its result annotated.
func toyComplete(ctx context.Context, v check.Values) error {
	c, pods, err := toyChildren(ctx, v)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		patch := client.MergeFrom(p.DeepCopy())
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, toyResult, "ok-"+p.Name)
		if err := c.Patch(ctx, p, patch); err != nil {
			return err
		}
	}
	return nil
}

// results-stalled through the Go API on an operator built like Argo's
// workflow controller: its naive cleanup releases the children while the
// recorder is stalled and loses every result (no-lost-result, named, the
// IDs listed); the careful one holds them until the owner recorded them.
func TestResultsStalled(t *testing.T) {
	for _, careful := range []bool{false, true} {
		t.Run(map[bool]string{false: "naive", true: "careful"}[careful], func(t *testing.T) {
			spec := &check.Spec{
				Name:     "toy-owner",
				Operator: check.Operator{Start: startToy(careful), Stalled: &check.Stalled{}, Grace: metav1Duration(5 * time.Second)},
				// Unused by the toy; check installs CRDs before anything.
				CRDs: []string{"../examples/keys/config/crd/keys.finale.dev_apikeys.yaml"},
				Dependents: check.Dependents{Count: 2,
					Template: `{apiVersion: v1, kind: ConfigMap, metadata: {name: job-{{.Index}}, labels: {` + toyOwner + `: "true"}}}`},
				Results: &check.Results{
					Children: check.Children{APIVersion: "v1", Kind: "Pod"},
					Probe:    check.ResultsProbe{Func: toyResults},
					Complete: check.Hook{Func: toyComplete},
				},
				Timeouts: check.Timeouts{Hold: metav1Duration(2 * time.Second), Finish: metav1Duration(15 * time.Second)},
			}
			rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 1, Only: []string{check.ResultsStalled}, Progress: testLog{t}, WorkDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			_ = rep.WriteText(&b)
			want := map[string]check.Verdict{check.ResultsStalled: check.Held}
			wantInv, wantLost := []check.Invariant(nil), []string(nil)
			if !careful {
				want[check.ResultsStalled] = check.Broke
				wantInv, wantLost = []check.Invariant{check.NoLostResult}, []string{"job-0-child", "job-1-child"}
			}
			if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
				t.Fatalf("verdicts (-want +got):\n%s\n%s", diff, b.String())
			}
			run := rep.Experiments[0].Runs[0]
			var got []check.Invariant
			for _, v := range run.Violations {
				got = append(got, v.Invariant)
			}
			if diff := cmp.Diff(wantInv, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s\n%s", diff, b.String())
			}
			if diff := cmp.Diff(wantLost, run.Lost); diff != "" || run.Produced != 2 {
				t.Errorf("results produced %d (want 2); lost (-want +got):\n%s", run.Produced, diff)
			}
			for _, n := range rep.Notes {
				if strings.Contains(n, "no-lost-result") {
					t.Errorf("a description with results gets the note %q", n)
				}
			}
		})
	}
}
