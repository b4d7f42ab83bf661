package hold_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
)

// blindCache lists nothing: a cache rebuilt after a restart, or behind a
// lagging apiserver, that has not seen the dependents yet.
type blindCache struct{ client.Client }

func (blindCache) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// A deleting parent is released only once the API server, not just the
// cache, says no dependent still carries its cleanup finalizer (a stranded
// dependent otherwise: the model checker's finding-hold-from-cache).
func TestStaleCacheNeverReleasesAHeldParent(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Finalizers: []string{hold.Finalizer}}}
	dep := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d",
		Annotations: map[string]string{"parent": "p"}, Finalizers: []string{"example.finale.dev/cleanup"}}}
	for _, o := range []client.Object{parent, dep} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Get(context.Background(), client.ObjectKeyFromObject(o), o)
			o.SetFinalizers(nil)
			_ = c.Update(context.Background(), o)
		})
	}
	if err := c.Delete(t.Context(), parent); err != nil {
		t.Fatal(err)
	}
	// In this order: the control case releases the parent for good.
	for _, tc := range []struct {
		name     string
		live     client.Reader
		wantHeld bool
	}{
		{name: "a live count", live: c, wantHeld: true},
		{name: "the cache's word (control)", live: nil, wantHeld: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := hold.New(hold.Config{
				Parent: &corev1.ConfigMap{}, Scheme: testenv.Scheme(), Clock: clocktesting.NewFakeClock(parent.CreationTimestamp.Time),
				SecretName: func(client.Object) string { return "" },
				Dependents: []hold.Dependent{{Object: &corev1.ServiceAccount{}, CleanupFinalizer: "example.finale.dev/cleanup",
					ParentName: func(o client.Object) string { return o.GetAnnotations()["parent"] }}},
				Live: tc.live,
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.ParentReconciler(blindCache{c}, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(parent)}); err != nil {
				t.Fatal(err)
			}
			var got corev1.ConfigMap
			err = c.Get(t.Context(), client.ObjectKeyFromObject(parent), &got)
			held := err == nil && slices.Contains(got.Finalizers, hold.Finalizer)
			if held != tc.wantHeld {
				t.Fatalf("parent held = %v (get: %v), want %v", held, err, tc.wantHeld)
			}
		})
	}
}
