package check_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/check"
)

// Worlds whose objects are not all in the owner namespace: Widgets
// (testdata/widgets.yaml) are cluster-scoped, as the dependents or as the
// parent. No namespace deletion reaches them, and no namespace keeps two
// runs' Widgets apart.

var widgetGVK = schema.GroupVersionKind{Group: "scope.check.finale.dev", Version: "v1", Kind: "Widget"}

const (
	widgetRole   = "toy.example.com/role" // label: dependent or parent
	holdFinalize = "toy.example.com/hold"
)

func newWidget() client.Object {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	return u
}

func withRole(role string) builder.Predicates {
	return builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[widgetRole] == role }))
}

// toyDependent makes one external resource per object and deletes it when
// the object is deleted, behind a finalizer: whatever the object's scope.
type toyDependent struct {
	c   client.Client
	svc *toyService
	obj func() client.Object
}

func (t toyDependent) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	o := t.obj()
	if err := t.c.Get(ctx, req.NamespacedName, o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if o.GetDeletionTimestamp() != nil {
		if !controllerutil.ContainsFinalizer(o, patFinalizer) {
			return reconcile.Result{}, nil
		}
		t.svc.delete(extName(o))
		patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
		controllerutil.RemoveFinalizer(o, patFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(t.c.Patch(ctx, o, patch))
	}
	if !controllerutil.ContainsFinalizer(o, patFinalizer) {
		patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
		controllerutil.AddFinalizer(o, patFinalizer)
		return reconcile.Result{}, t.c.Patch(ctx, o, patch)
	}
	return reconcile.Result{}, t.svc.create(ctx, extName(o))
}

// toyHub is a cluster-scoped parent that holds itself (a finalizer) while
// dependents remain in the namespace its spec names. The stuck build
// never releases it: its deletion never finishes.
type toyHub struct {
	c     client.Client
	stuck bool
}

func (t toyHub) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	hub := newWidget().(*unstructured.Unstructured)
	if err := t.c.Get(ctx, req.NamespacedName, hub); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if hub.GetDeletionTimestamp() == nil {
		if controllerutil.ContainsFinalizer(hub, holdFinalize) {
			return reconcile.Result{}, nil
		}
		patch := client.MergeFrom(hub.DeepCopy())
		controllerutil.AddFinalizer(hub, holdFinalize)
		return reconcile.Result{}, t.c.Patch(ctx, hub, patch)
	}
	if t.stuck || !controllerutil.ContainsFinalizer(hub, holdFinalize) {
		return reconcile.Result{}, nil
	}
	ns, _, _ := unstructured.NestedString(hub.Object, "spec", "namespace")
	var deps corev1.ConfigMapList
	if err := t.c.List(ctx, &deps, client.InNamespace(ns), client.HasLabels{patOwner}); err != nil {
		return reconcile.Result{}, err
	}
	if len(deps.Items) > 0 {
		return reconcile.Result{RequeueAfter: patRetry}, nil // a dependent still cleans up through it
	}
	patch := client.MergeFrom(hub.DeepCopy())
	controllerutil.RemoveFinalizer(hub, holdFinalize)
	return reconcile.Result{}, client.IgnoreNotFound(t.c.Patch(ctx, hub, patch))
}

// widgetsAtStart records, at each start of the operator, the Widgets of
// earlier runs still there (what a run's cleanup failed to remove).
type widgetsAtStart struct {
	mu     sync.Mutex // guards stale
	starts int
	stale  []string
}

func (w *widgetsAtStart) look(ctx context.Context, c client.Client, run string) error {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(widgetGVK.GroupVersion().WithKind("WidgetList"))
	if err := c.List(ctx, l); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.starts++
	for _, o := range l.Items {
		if !strings.Contains(o.GetName(), run) {
			w.stale = append(w.stale, o.GetName())
		}
	}
	return nil
}

// startScopeToy runs the toy: Widgets (role dependent) as the dependents
// when widgetDependents, else ConfigMaps labelled patOwner; a hub when hub
// is set; seen, when set, looks for earlier runs' Widgets first.
func startScopeToy(svc *toyService, hub *toyHub, widgetDependents bool, seen *widgetsAtStart) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		mgr, err := patManager(e)
		if err != nil {
			return err
		}
		c := mgr.GetClient()
		if seen != nil {
			direct, err := client.New(e.Config, client.Options{Scheme: mgr.GetScheme()})
			if err != nil {
				return err
			}
			if err := seen.look(ctx, direct, e.Values.Run); err != nil {
				return err
			}
		}
		dep := toyDependent{c: c, svc: svc, obj: func() client.Object { return &corev1.ConfigMap{} }}
		b := ctrl.NewControllerManagedBy(mgr).Named("dependents")
		if widgetDependents {
			dep.obj = newWidget
			b = b.For(newWidget(), withRole("dependent"))
		} else {
			b = b.For(&corev1.ConfigMap{}, patOwners)
		}
		if err := b.Complete(dep); err != nil {
			return err
		}
		if hub != nil {
			hub.c = c
			if err := ctrl.NewControllerManagedBy(mgr).Named("hub").For(newWidget(), withRole("parent")).Complete(*hub); err != nil {
				return err
			}
		}
		return mgr.Start(ctx)
	}
}

func scopeSpec(name string, start check.StartFunc, svc *toyService) *check.Spec {
	spec := patSpec(name, start, svc)
	spec.CRDs = []string{"testdata/widgets.yaml"}
	// A few seconds alone, but the namespace controller took over 15 s
	// beside make test's other jobs; a stuck build's run ends at
	// timeouts.stuck (30 s) anyway.
	spec.Timeouts = check.Timeouts{Finish: metav1Duration(patFinish)}
	return spec
}

// Cluster-scoped dependents of a namespaced parent: they are created in
// no namespace, named per run; the namespace orders delete them
// explicitly with the namespace and wait for them; the report says so.
// Before check knew scopes, it created them in the owner namespace (the
// API refuses that) and no namespace deletion would have reached them.
func TestClusterScopedDependents(t *testing.T) {
	svc := newToyService(0)
	spec := scopeSpec("cluster-dependents", startScopeToy(svc, nil, true, nil), svc)
	spec.Parent = check.Parent{Object: "{apiVersion: v1, kind: ConfigMap, metadata: {name: conn}}"}
	spec.Dependents.Template = `{apiVersion: scope.check.finale.dev/v1, kind: Widget, metadata: {name: "w-{{.Run}}-{{.Index}}", labels: {` + widgetRole + `: dependent}}}`
	rep, text := patCheck(t, spec, check.Options{Only: []string{check.OrderAllAtOnce, check.OrderParentFirst}})
	want := map[string]check.Verdict{check.OrderAllAtOnce: check.Held, check.OrderParentFirst: check.Held}
	wantPattern(t, rep, text, want, nil, "note: cluster-scoped: dependents (Widget). No namespace deletion reaches them")
	for _, e := range rep.Experiments {
		run := e.Runs[0]
		if run.Expected != 2 || run.Seen != 2 {
			t.Errorf("%s: expected %d, seen %d external resources; want 2 and 2", e.Name, run.Expected, run.Seen)
		}
		if !timelineHas(run, "cluster-scoped Widget w-", "deletion asked with the namespace") {
			t.Errorf("%s: no step names the Widgets' explicit deletion:\n%v", e.Name, run.Timeline)
		}
	}
}

// A cluster-scoped parent of namespaced dependents: deleted explicitly
// with the owner namespace and waited for. A parent never released is a
// deletion that did not finish, and the report lists it as left behind
// (in no namespace); every run's cleanup removes it anyway, and the
// cluster-scoped object of operator.manifests, so that the next run starts
// with no Widget of an earlier one.
func TestClusterScopedParent(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		t.Run(map[bool]string{false: "released", true: "stuck"}[stuck], func(t *testing.T) {
			svc := newToyService(0)
			seen := &widgetsAtStart{}
			spec := scopeSpec("cluster-parent", startScopeToy(svc, &toyHub{stuck: stuck}, false, seen), svc)
			spec.Parent = check.Parent{Object: `{apiVersion: scope.check.finale.dev/v1, kind: Widget, metadata: {name: "hub-{{.Run}}", labels: {` + widgetRole + `: parent}}, spec: {namespace: "{{.Namespace}}"}}`}
			// An admin's cluster-scoped object beside the operator: no
			// controller acts on it; the run's end removes it.
			spec.Operator.Manifests = `{apiVersion: scope.check.finale.dev/v1, kind: Widget, metadata: {name: "admin-{{.Run}}"}}`
			rep, text := patCheck(t, spec, check.Options{Only: []string{check.OrderAllAtOnce, check.OrderDependentsFirst}})
			want := map[string]check.Verdict{check.OrderAllAtOnce: check.Held, check.OrderDependentsFirst: check.Held}
			var inv map[string][]check.Invariant
			mention := "note: cluster-scoped: parent (Widget)."
			if stuck {
				want = map[string]check.Verdict{check.OrderAllAtOnce: check.Broke, check.OrderDependentsFirst: check.Broke}
				inv = map[string][]check.Invariant{check.OrderAllAtOnce: {check.Finished}, check.OrderDependentsFirst: {check.Finished}}
				mention = "(cluster)  Widget  hub-"
			}
			wantPattern(t, rep, text, want, inv, mention)
			if stuck {
				left := rep.Experiments[0].Runs[0].LeftBehind
				if len(left) != 1 || left[0].Kind != "Widget" || left[0].Namespace != "" || !strings.HasPrefix(left[0].Name, "hub-") ||
					left[0].Deleting == 0 || len(left[0].Finalizers) != 1 || left[0].Finalizers[0] != holdFinalize {
					t.Errorf("left behind %+v, want the hub alone, deleting, with its %s finalizer", left, holdFinalize)
				}
				if c := rep.Experiments[0].Runs[0].Cause; !strings.Contains(c, "the deletion was kept by Widget hub-") {
					t.Errorf("cause %q, want the hub named as what kept the deletion", c)
				}
			}
			seen.mu.Lock()
			defer seen.mu.Unlock()
			if seen.starts != 2 || len(seen.stale) > 0 {
				t.Errorf("the operator started %d times and found Widgets of earlier runs %v; want 2 starts and none", seen.starts, seen.stale)
			}
		})
	}
}

func timelineHas(run check.RunReport, parts ...string) bool {
	for _, ev := range run.Timeline {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(ev.What, p)
		}
		if all {
			return true
		}
	}
	return false
}
