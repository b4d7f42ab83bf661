package hold_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
)

// deletes records the deletes that went through it.
type deletes struct {
	client.Writer
	mu   sync.Mutex
	done []string
}

func (d *deletes) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	err := d.Writer.Delete(ctx, o, opts...)
	if err == nil {
		d.mu.Lock()
		d.done = append(d.done, o.GetName())
		d.mu.Unlock()
	}
	return err
}

// terminatingNamespace deletes a new namespace holding parent p, its
// dependents d1 and d2 (ServiceAccounts with their cleanup finalizer) and
// pods, and returns it with a Hold over them.
func terminatingNamespace(t *testing.T, c client.Client, pods ...*corev1.Pod) (string, *hold.Hold) {
	t.Helper()
	ns := testenv.Namespace(t, c)
	create(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Finalizers: []string{hold.Finalizer}}})
	for _, name := range []string{"d1", "d2"} {
		create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{"parent": "p"}, Finalizers: []string{"example.finale.dev/cleanup"}}})
	}
	for _, p := range pods {
		p.Namespace = ns
		create(t, c, p)
	}
	h := accountsHold(t)
	if err := c.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns, h
}

// accountsHold is a hold on ConfigMap parents of the accounts dependents.
func accountsHold(t *testing.T) *hold.Hold {
	t.Helper()
	h, err := hold.New(hold.Config{Parent: &corev1.ConfigMap{}, Scheme: testenv.Scheme(),
		SecretName: func(client.Object) string { return "" }, Dependents: accounts})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// reconcileNamespace runs one pass of h's namespace reconciler over ns,
// deleting through w, and returns its result and what it deleted.
func reconcileNamespace(t *testing.T, h *hold.Hold, r, live client.Reader, w client.Writer, ns string) (reconcile.Result, []string) {
	t.Helper()
	d := &deletes{Writer: w}
	res, err := h.NamespaceReconciler(r, live, d).Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}})
	if err != nil {
		t.Fatal(err)
	}
	return res, d.done
}

// A terminating namespace's dependents are deleted at once, their cleanup
// finalizers kept: Kubernetes' namespace controller would start on them
// only after its 5 s grace period, in an order of its own, and the hold
// keeps the parent until their cleanup is done.
func TestTerminatingNamespaceDeletesItsDependents(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ns, h := terminatingNamespace(t, c)
	_, deleted := reconcileNamespace(t, h, c, c, c, ns)
	for _, name := range []string{"d1", "d2"} {
		var sa corev1.ServiceAccount
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &sa); err != nil {
			t.Fatal(err)
		}
		if sa.DeletionTimestamp.IsZero() {
			t.Errorf("dependent %s is not being deleted", name)
		}
		if len(sa.Finalizers) != 1 {
			t.Errorf("dependent %s has finalizers %v: its cleanup finalizer is its reconciler's to remove", name, sa.Finalizers)
		}
	}
	for _, name := range []string{"d1", "d2"} {
		if !slices.Contains(deleted, name) {
			t.Errorf("the reconciler deleted %v, not %s", deleted, name)
		}
	}
	if slices.Contains(deleted, "p") {
		t.Error("the reconciler deleted the parent: that is the namespace controller's, and the hold keeps it")
	}
}

// Kubernetes deletes a namespace's Pods first and the rest once they are
// gone (ordered namespace deletion): the hold waits for the Pods too, so
// that a workload shutting down still has what it uses.
func TestTerminatingNamespaceWaitsForItsPods(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Finalizers: []string{"example.finale.dev/keep"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	ns, h := terminatingNamespace(t, c, pod)
	res, deleted := reconcileNamespace(t, h, c, c, c, ns)
	if len(deleted) != 0 || res.RequeueAfter <= 0 {
		t.Fatalf("with a Pod left: deleted %v, result %+v; want nothing deleted and a look again later", deleted, res)
	}
	// Gone at once, without a node: well before the namespace controller's
	// first pass, which would delete the dependents itself.
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = nil
	if err := c.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(t.Context(), c, pod, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	_, deleted = reconcileNamespace(t, h, c, c, c, ns)
	if !slices.Contains(deleted, "d1") || !slices.Contains(deleted, "d2") {
		t.Fatalf("with the Pods gone the reconciler deleted %v; want d1 and d2", deleted)
	}
}

// staleNamespace serves a cached Namespace that shows a deletion: the
// namespace of that name that the cache last saw, deleted since, while a
// new one of the same name is alive.
type staleNamespace struct{ client.Client }

func (s staleNamespace) Get(ctx context.Context, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	if err := s.Client.Get(ctx, k, o, opts...); err != nil {
		return err
	}
	now := metav1.Now()
	o.SetDeletionTimestamp(&now)
	return nil
}

// What is deleted is decided on the live namespace, never on the cache's:
// a cached namespace's deletion says nothing of the objects now under its
// name; and without the RBAC to delete, nothing is deleted and the pass
// does not fail (the namespace controller deletes them later).
func TestNamespaceEarlyDeleteKeeps(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	t.Run("a namespace deleted only in the cache", func(t *testing.T) {
		ns := testenv.Namespace(t, c)
		create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d1",
			Annotations: map[string]string{"parent": "p"}, Finalizers: []string{"example.finale.dev/cleanup"}}})
		if _, deleted := reconcileNamespace(t, accountsHold(t), staleNamespace{c}, c, c, ns); len(deleted) != 0 {
			t.Fatalf("deleted %v in an alive namespace", deleted)
		}
	})
	t.Run("no RBAC to delete", func(t *testing.T) {
		ns, h := terminatingNamespace(t, c)
		nobody, err := client.New(testenv.ControlPlane(t).AsServiceAccount(ns, "nobody"), client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		res, deleted := reconcileNamespace(t, h, c, c, nobody, ns)
		if diff := cmp.Diff(reconcile.Result{}, res); len(deleted) != 0 || diff != "" {
			t.Fatalf("deleted %v, result diff (-want +got):\n%s", deleted, diff)
		}
	})
}
