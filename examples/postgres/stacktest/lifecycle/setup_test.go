package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/lifecycle"
)

// DefaultRateLimiter spaces one object's retries from a second, doubling,
// to five minutes: a server that is down is not asked a thousand times.
func TestDefaultRateLimiter(t *testing.T) {
	rl := lifecycle.DefaultRateLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}
	var got []time.Duration
	for range 12 {
		got = append(got, rl.When(req))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("retry spacing (-want +got):\n%s", diff)
	}
	rl.Forget(req)
	if d := rl.When(req); d != time.Second {
		t.Errorf("after Forget the next retry is in %s, want 1s", d)
	}
}

// SetupWithManager registers every watch the guarantees need: a dependent
// that waits (here for a credential Secret, retried only after an hour) is
// woken as soon as its parent's Secret appears, and one that waits for its
// parent as soon as the parent appears.
func TestSetupWithManagerWakesDependents(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	e := newEnv(t, nil)
	h, err := hold.New(hold.Config{
		Parent: &corev1.ConfigMap{}, Scheme: e.c.Scheme(),
		SecretName: func(p client.Object) string { return p.(*corev1.ConfigMap).Data["secret"] },
		Dependents: []hold.Dependent{{Object: &Widget{}, CleanupFinalizer: finalizer,
			ParentName: func(o client.Object) string { return o.(*Widget).Spec.Parent }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(testenv.ControlPlane(t).Config, ctrl.Options{
		Scheme: e.c.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := e.adapter().(lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target])
	connect := a.ConnectFn
	a.ConnectFn = func(ctx context.Context, w *Widget) (lifecycle.Connection[string], error) {
		c, err := connect(ctx, w)
		if err != nil || c.Parent == nil {
			return c, err
		}
		name := c.Parent.(*corev1.ConfigMap).Data["secret"]
		if err := mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: name}, &corev1.Secret{}); apierrors.IsNotFound(err) {
			return c, &lifecycle.NeedsAction{Reason: "SecretMissing", Err: err}
		}
		return c, nil
	}
	r, err := lifecycle.New(mgr.GetClient(), func() *Widget { return &Widget{} }, lifecycle.Adapter[*Widget, string, *pgtarget.Target](a), e.pool, lifecycle.Options{
		Finalizer: finalizer, Scheme: e.c.Scheme(), Ledger: e.led, Hold: h, APIReader: mgr.GetAPIReader(),
		RetryInterval: time.Hour, Skip: lifecycle.SkipWatchdog,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr, lifecycle.SetupOptions{Name: "widget-" + e.ns, SkipNameValidation: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	// The parent names a Secret that does not exist yet.
	parent := e.parent()
	parent.Data["secret"] = "later"
	if err := e.c.Update(t.Context(), parent); err != nil {
		t.Fatal(err)
	}
	w := e.widget("a", "")
	waitSynced(t, e, w, metav1.ConditionFalse, "SecretMissing")
	if err := e.c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "later"}}); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, e, w, metav1.ConditionTrue, lifecycle.ReasonReconcileSuccess)

	// A dependent of a parent that does not exist yet.
	orphan := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "b"}, Spec: WidgetSpec{Parent: "conn2", RoleName: pgtarget.RandomName("w_")}}
	orphan.SetGroupVersionKind(widgetGV.WithKind("Widget"))
	if err := e.c.Create(t.Context(), orphan); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, e, orphan, metav1.ConditionFalse, lifecycle.ReasonParentNotFound)
	if err := e.c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "conn2"},
		Data: map[string]string{"dsn": e.dsn, "secret": "later"}}); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, e, orphan, metav1.ConditionTrue, lifecycle.ReasonReconcileSuccess)
}

func waitSynced(t *testing.T, e *env, w *Widget, st metav1.ConditionStatus, reason string) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), 30*time.Second, w.Name+" Synced="+string(st)+"/"+reason, func(context.Context) (bool, error) {
		s, r := condition(e.get(w), lifecycle.ConditionSynced)
		return s == st && r == reason, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
