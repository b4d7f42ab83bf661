package hold_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/hold"
)

// A parent deleted while the operator was down for longer than the hold
// timeout is still held when the operator comes back: the hold counts from
// its first look at the deletion, so the dependents get their Timeout to
// delete instead of being released at once without it.
// It is still bounded: Timeout after that first look it ends, and a later
// look (a restart) does not start it again.
func TestHoldAfterAnOutageCountsFromItsFirstLook(t *testing.T) {
	deletedAt := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	back := deletedAt.Add(3 * hold.DefaultTimeout) // the operator's return
	clk := clocktesting.NewFakeClock(back)
	h := unitHold(t, clk)
	parent := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		DeletionTimestamp: &deletedAt, Finalizers: []string{hold.Finalizer}}}
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
	pass := func(t *testing.T) state {
		t.Helper()
		if _, err := h.ParentReconciler(c, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(parent)}); err != nil {
			t.Fatal(err)
		}
		var p corev1.Service
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(parent), &p); err != nil {
			return state{}
		}
		return state{
			Held:            slices.Contains(p.Finalizers, hold.Finalizer),
			Started:         p.Annotations[hold.AnnotationStarted],
			DependentDelete: !h.ShouldReleaseWithoutDelete(&p),
		}
	}
	started := back.UTC().Format(time.RFC3339)
	steps := []struct {
		name  string
		after time.Duration // the clock moves on by this much first
		want  state
	}{
		{name: "back after three timeouts: held, counting from now", want: state{Held: true, Started: started, DependentDelete: true}},
		{name: "a second before the end: still held", after: hold.DefaultTimeout - time.Second, want: state{Held: true, Started: started, DependentDelete: true}},
		{name: "the end: released", after: time.Second, want: state{}},
	}
	for _, s := range steps {
		clk.Step(s.after)
		if diff := cmp.Diff(s.want, pass(t)); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", s.name, diff)
		}
	}
}
