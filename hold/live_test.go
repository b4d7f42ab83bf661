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

// accounts are these tests' dependents: ServiceAccounts naming their
// parent in an annotation.
var accounts = []hold.Dependent{{Object: &corev1.ServiceAccount{}, CleanupFinalizer: "example.finale.dev/cleanup",
	ParentName: func(o client.Object) string { return o.GetAnnotations()["parent"] }}}

// create creates objs, and on cleanup takes their finalizers off so that
// the test's namespace can go.
func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Get(context.Background(), client.ObjectKeyFromObject(o), o)
			o.SetFinalizers(nil)
			_ = c.Update(context.Background(), o)
		})
	}
}

// A deleting parent is released only once the API server, not just the
// cache, says no dependent still carries its cleanup finalizer (a stranded
// dependent otherwise: the model checker's finding-hold-from-cache).
func TestStaleCacheNeverReleasesAHeldParent(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Finalizers: []string{hold.Finalizer}}}
	dep := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d",
		Annotations: map[string]string{"parent": "p"}, Finalizers: []string{"example.finale.dev/cleanup"}}}
	create(t, c, parent, dep)
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
				Dependents: accounts,
				Live:       tc.live,
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

// secretCache stands in for the manager's cache on one Secret: it shows
// the Secret as held or not, whatever the API server says, and lists
// without field selectors (Dependents filters by ParentName anyway).
// Reads through live are counted.
type secretCache struct {
	client.Client
	showHeld   bool
	liveSecret int
}

func (c *secretCache) Get(ctx context.Context, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, k, o, opts...); err != nil {
		return err
	}
	if _, ok := o.(*metav1.PartialObjectMetadata); ok && c.showHeld {
		o.SetFinalizers([]string{hold.Finalizer})
	}
	return nil
}

func (c *secretCache) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	var ns []client.ListOption
	for _, o := range opts {
		if o, ok := o.(client.InNamespace); ok {
			ns = append(ns, o)
		}
	}
	return c.Client.List(ctx, l, ns...)
}

type countingLive struct {
	client.Reader
	secrets *int
}

func (l countingLive) Get(ctx context.Context, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	if _, ok := o.(*metav1.PartialObjectMetadata); ok {
		*l.secrets++
	}
	return l.Reader.Get(ctx, k, o, opts...)
}

// A pass over a held parent reads its Secret from the cache, and reads it
// live only to hold it: a Secret the cache shows held costs the API server
// nothing. A cache that still shows a hold the Secret has lost leaves it
// unheld (a dependent's create then waits: lifecycle confirms the Secret's
// hold live), and the Secret reconciler, woken by the hold's removal, puts
// it back for the held parent.
func TestParentPassReadsTheSecretFromTheCache(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	for _, tc := range []struct {
		name                string
		held, cacheShowHeld bool
		wantLive            int
		wantHeld            bool
	}{
		{name: "held, and the cache says so", held: true, cacheShowHeld: true, wantLive: 0, wantHeld: true},
		{name: "unheld, and the cache says so", held: false, cacheShowHeld: false, wantLive: 1, wantHeld: true},
		{name: "unheld, the cache lags", held: false, cacheShowHeld: true, wantLive: 0, wantHeld: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Namespace(t, c)
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}
			if tc.held {
				secret.Finalizers = []string{hold.Finalizer}
			}
			parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Finalizers: []string{hold.Finalizer}}}
			dep := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d", Annotations: map[string]string{"parent": "p"}}}
			create(t, c, secret, parent, dep)
			cache := &secretCache{Client: c, showHeld: tc.cacheShowHeld}
			h, err := hold.New(hold.Config{
				Parent: &corev1.ConfigMap{}, Scheme: testenv.Scheme(), Clock: clocktesting.NewFakeClock(parent.CreationTimestamp.Time),
				SecretName: func(client.Object) string { return "s" },
				Dependents: accounts,
				Live:       countingLive{Reader: c, secrets: &cache.liveSecret},
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.ParentReconciler(cache, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(parent)}); err != nil {
				t.Fatal(err)
			}
			heldNow := func() bool {
				var got corev1.Secret
				if err := c.Get(t.Context(), client.ObjectKeyFromObject(secret), &got); err != nil {
					t.Fatal(err)
				}
				return slices.Contains(got.Finalizers, hold.Finalizer)
			}
			if got := heldNow(); got != tc.wantHeld || cache.liveSecret != tc.wantLive {
				t.Fatalf("after the parent's pass: Secret held %v, live Secret reads %d; want %v, %d", got, cache.liveSecret, tc.wantHeld, tc.wantLive)
			}
			if tc.wantHeld {
				return
			}
			caughtUp := &secretCache{Client: c}
			if _, err := h.SecretReconciler(caughtUp, c).Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(secret)}); err != nil {
				t.Fatal(err)
			}
			if !heldNow() {
				t.Fatal("the Secret reconciler did not put the hold back for a held parent")
			}
		})
	}
}
