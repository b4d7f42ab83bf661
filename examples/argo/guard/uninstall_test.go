package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/argo/guard"
	"github.com/finale-dev/finale/internal/testenv"
)

// TestUninstallInTerminatingNamespace: the guard's
// namespace is also its workload's, and it is being deleted: a workflow
// Pod there, deleted first (ordered namespace deletion), is held by the
// guard's finalizer, and the namespace refuses every new object, the
// uninstall's dry-run probe included. Uninstall used to delete the
// binding, the policy and the Lease and then fail on the probe before it
// removed any finalizer: the Pod stayed, and with the Lease gone nothing
// named its holder. Now it releases the Pod first, probes admission
// elsewhere (default), deletes the rest, and the namespace goes.
func TestUninstallInTerminatingNamespace(t *testing.T) {
	ctx := t.Context()
	c, ns := policedNamespace(t)
	pod := workflowPod(t, c, ns, "held")
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.Delete(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, 60*time.Second, "Pod "+pod.Name+" deleted by the namespace controller and held", func(ctx context.Context) (bool, error) {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, err
		}
		return got.DeletionTimestamp != nil && slices.Equal(got.Finalizers, []string{guard.Finalizer}), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	rep, err := guard.Uninstall(ctx, c, guard.UninstallOptions{Namespace: ns, Wait: 30 * time.Second})
	if err != nil {
		t.Fatalf("Uninstall in a terminating namespace: %v", err)
	}
	// Uninstall works cluster-wide: other tests' bindings and marked Pods
	// may be counted too.
	if binding := guard.PolicyName + "-" + ns; !slices.Contains(rep.Bindings, binding) {
		t.Errorf("deleted bindings %v, want %s among them", rep.Bindings, binding)
	}
	if rep.Released < 1 || rep.Deleting < 1 {
		t.Errorf("released %d Pods, %d of them being deleted; want the held Pod among them", rep.Released, rep.Deleting)
	}
	// The namespace controller may delete the Lease itself once the Pod
	// is gone, before Uninstall does: Heartbeat is not compared.
	got := guard.UninstallReport{Policy: rep.Policy, ProbedIn: rep.ProbedIn}
	if diff := cmp.Diff(guard.UninstallReport{Policy: true, ProbedIn: metav1.NamespaceDefault}, got); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if err := controlplane.WaitGone(ctx, c, nsObj, namespaceGone); err != nil {
		t.Fatal(err)
	}
}

// TestUninstallFailureReleasesFirst: a step that fails part way (the
// binding's delete is refused) leaves the Pods already released, the
// policy and the heartbeat Lease (what finale audit and CheckPolicy read)
// in place, and says so: which step failed, how many Pods were released,
// what is still there, and to run it again. Run again, it finishes.
func TestUninstallFailureReleasesFirst(t *testing.T) {
	ctx := t.Context()
	c, ns := policedNamespace(t)
	pod := workflowPod(t, c, ns, "marked")
	base, err := client.NewWithWatch(testenv.ControlPlane(t).Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("injected: delete refused")
	failing := interceptor.NewClient(base, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*admissionv1.MutatingAdmissionPolicyBinding); ok {
				return refused
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	binding := guard.PolicyName + "-" + ns
	failed, err := guard.Uninstall(ctx, failing, guard.UninstallOptions{Namespace: ns, Wait: 30 * time.Second})
	if !errors.Is(err, guard.ErrUninstallIncomplete) || !errors.Is(err, refused) {
		t.Fatalf("Uninstall with the binding's delete refused = %v; want ErrUninstallIncomplete wrapping the refusal", err)
	}
	for _, part := range []string{
		fmt.Sprintf("removed %s from %d Pods", guard.Finalizer, failed.Released),
		"could not delete the policy's bindings",
		"MutatingAdmissionPolicyBinding " + binding,
		"MutatingAdmissionPolicy " + guard.PolicyName,
		"heartbeat Lease " + ns + "/" + guard.HeartbeatName,
		"re-run guard uninstall",
	} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the error does not say %q: %v", part, err)
		}
	}
	if failed.Released < 1 {
		t.Errorf("the failed uninstall released %d Pods; want the marked Pod released before the failing step", failed.Released)
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got.Finalizers, guard.Finalizer) {
		t.Errorf("Pod %s still has %s after the failed uninstall: %v", pod.Name, guard.Finalizer, got.Finalizers)
	}
	for _, obj := range []client.Object{
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: binding}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: guard.PolicyName}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: guard.HeartbeatName}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("%T %s after the failed uninstall: %v; want it still in place", obj, obj.GetName(), err)
		}
	}

	rep, err := guard.Uninstall(ctx, c, guard.UninstallOptions{Namespace: ns, Wait: 30 * time.Second})
	if err != nil {
		t.Fatalf("Uninstall again: %v", err)
	}
	if !slices.Contains(rep.Bindings, binding) || !rep.Policy || !rep.Heartbeat || rep.ProbedIn != ns {
		t.Errorf("Uninstall again: %+v; want the binding %s, the policy and the Lease deleted, probed in %s", rep, binding, ns)
	}
}
