package hold_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/hold"
)

// A parent deleted while the operator was down for longer than the hold
// timeout is still held when the operator comes back: the hold counts from
// its first look at the deletion, so the dependents get their Timeout to
// delete instead of being released at once without it.
// It is still bounded: Timeout after that first look it ends.
//
// A start annotation the parent's users wrote moves nothing: one in 2000
// used to end the hold on the first look (every dependent released
// without its delete), one in 9999 used to hold the parent for ever. An
// old, garbled one is as harmless.
func TestHoldAfterAnOutageCountsFromItsFirstLook(t *testing.T) {
	for name, annotation := range map[string]string{
		"no annotation":                 "",
		"a tenant's start in 2000":      "2000-01-01T00:00:00Z",
		"a tenant's start in 9999":      "9999-12-31T23:59:59Z",
		"a start that is not a time":    "yesterday",
		"a start at the operator's now": "2026-11-30T12:30:00Z",
	} {
		t.Run(name, func(t *testing.T) { testOutage(t, annotation) })
	}
}

func testOutage(t *testing.T, annotation string) {
	deletedAt := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	back := deletedAt.Add(3 * hold.DefaultTimeout) // the operator's return
	clk := clocktesting.NewFakeClock(back)
	h := unitHold(t, clk)
	parent := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p",
		DeletionTimestamp: &deletedAt, Finalizers: []string{hold.Finalizer}}}
	if annotation != "" {
		parent.Annotations = map[string]string{hold.AnnotationStarted: annotation}
	}
	dep := depSpec{kind: "ConfigMap", parent: "p", cleanup: true}.object(0)
	b := fake.NewClientBuilder().WithScheme(unitScheme()).WithObjects(parent, dep)
	for _, ix := range h.Indexes() {
		b = b.WithIndex(ix.Object, ix.Field, ix.Func)
	}
	c := b.Build()

	type state struct {
		Held            bool
		Started         string
		DependentDelete bool // the dependent deletes rather than releases
	}
	started := func(p client.Object) string {
		at, ok := h.Started(p)
		if !ok {
			return ""
		}
		return at.UTC().Format(time.RFC3339)
	}
	pass := func(t *testing.T) state {
		t.Helper()
		if _, err := h.ParentReconciler(c, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(parent)}); err != nil {
			t.Fatal(err)
		}
		var p corev1.Service
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(parent), &p); err != nil {
			return state{}
		}
		if got := p.Annotations[hold.AnnotationStarted]; got != annotation {
			t.Errorf("the hold wrote the parent's annotation %s: %q, want it left at %q", hold.AnnotationStarted, got, annotation)
		}
		return state{
			Held:            slices.Contains(p.Finalizers, hold.Finalizer),
			Started:         started(&p),
			DependentDelete: !h.ShouldReleaseWithoutDelete(&p),
		}
	}
	startedAt := back.UTC().Format(time.RFC3339)
	steps := []struct {
		name  string
		after time.Duration // the clock moves on by this much first
		want  state
	}{
		{name: "back after three timeouts: held, counting from now", want: state{Held: true, Started: startedAt, DependentDelete: true}},
		{name: "a second before the end: still held", after: hold.DefaultTimeout - time.Second, want: state{Held: true, Started: startedAt, DependentDelete: true}},
		{name: "the end: released", after: time.Second, want: state{}},
	}
	for _, s := range steps {
		clk.Step(s.after)
		if diff := cmp.Diff(s.want, pass(t)); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", s.name, diff)
		}
	}
}

// The hold's bound needs no write: with every patch of
// the parent refused (an admission webhook, a policy, an RBAC mistake)
// until the hold end, each pass of the hold succeeds, and the release at
// the bound is the only write it makes. Before, the pass that marked the
// start failed, and with no mark the hold never ended.
func TestHoldBoundNeedsNoWrite(t *testing.T) {
	deletedAt := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	clk := clocktesting.NewFakeClock(deletedAt.Time)
	h := unitHold(t, clk)
	parent := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p",
		DeletionTimestamp: &deletedAt, Finalizers: []string{hold.Finalizer}}}
	dep := depSpec{kind: "ConfigMap", parent: "p", cleanup: true}.object(0)
	refused := 0
	b := fake.NewClientBuilder().WithScheme(unitScheme()).WithObjects(parent, dep).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Service); ok && clk.Now().Before(deletedAt.Add(hold.DefaultTimeout)) {
				refused++
				return apierrors.NewForbidden(corev1.Resource("services"), obj.GetName(), errors.New("denied by an admission policy"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		}})
	for _, ix := range h.Indexes() {
		b = b.WithIndex(ix.Object, ix.Field, ix.Func)
	}
	c := b.Build()
	held := func() bool {
		var p corev1.Service
		return c.Get(t.Context(), client.ObjectKeyFromObject(parent), &p) == nil && slices.Contains(p.Finalizers, hold.Finalizer)
	}
	for _, after := range []time.Duration{0, time.Minute, hold.DefaultTimeout - time.Minute - time.Second} {
		clk.Step(after)
		if _, err := h.ParentReconciler(c, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(parent)}); err != nil {
			t.Fatalf("a pass during the hold (at +%v) failed: %v", clk.Since(deletedAt.Time), err)
		}
		if !held() {
			t.Fatalf("released at +%v, before the hold end", clk.Since(deletedAt.Time))
		}
	}
	if refused != 0 {
		t.Errorf("patches of the parent during the hold: %d, want 0", refused)
	}
	clk.Step(time.Second) // the hold end
	if _, err := h.ParentReconciler(c, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(parent)}); err != nil {
		t.Fatal(err)
	}
	if held() {
		t.Error("still held at the hold end")
	}
}
