package controlplane_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

const (
	orderedGate = "OrderedNamespaceDeletion"
	podHold     = "test.finale.dev/hold"
)

// namespaceWithHeldPod makes a namespace holding a ConfigMap and a Pod
// with a finalizer, deletes the namespace, and waits until the namespace
// controller has finished one pass over its content (its status carries
// the deletion conditions, written at the end of every pass).
func namespaceWithHeldPod(t *testing.T, c client.Client) (*corev1.ConfigMap, *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	ns := testenv.Namespace(t, c)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "config"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held", Finalizers: []string{podHold}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	for _, o := range []client.Object{cm, pod} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, wait, "the namespace controller to finish a pass (status conditions) and delete the Pod", func(ctx context.Context) (bool, error) {
		var got corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &got); err != nil {
			return false, err
		}
		if len(got.Status.Conditions) == 0 {
			return false, nil
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return cm, pod
}

// release removes the Pod's finalizer and waits for the namespace to go.
func release(t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	pod.Finalizers = nil
	if err := c.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(t.Context(), c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace}}, wait); err != nil {
		t.Fatal(err)
	}
}

// TestPodsAreDeletedFirst: on every supported server (v1.33, where the
// OrderedNamespaceDeletion gate is beta and on by default, and v1.37,
// where it is gone and ordering always holds) the namespace controller
// deletes a namespace's Pods first and nothing else while one remains: a
// Pod held by a finalizer (a result capture's, say) holds every other
// object of its namespace, the Secrets and custom objects its cleanup may
// need among them.
func TestPodsAreDeletedFirst(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	cm, pod := namespaceWithHeldPod(t, c)
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatalf("the ConfigMap went while a Pod of its namespace remained: %v", err)
	}
	if cm.DeletionTimestamp != nil {
		t.Fatal("the ConfigMap is being deleted while a Pod of its namespace remains")
	}
	release(t, c, pod)
}

// TestOrderedNamespaceDeletionGate: the difference between the supported
// servers. On v1.33 a cluster may turn ordering off
// (--feature-gates=OrderedNamespaceDeletion=false on the controller
// manager), and a namespace's other objects then go beside its Pods; from
// the server that removed the gate on, the flag is refused and ordering
// cannot be turned off. Runs a control plane of its own.
func TestOrderedNamespaceDeletionGate(t *testing.T) {
	shared := testenv.ControlPlane(t)
	opts := controlplane.Options{
		KubernetesVersion:      shared.KubernetesVersion,
		ControllerManagerFlags: []string{"--feature-gates=" + orderedGate + "=false"},
	}
	cp, err := controlplane.Start(t.Context(), opts)
	gated := shared.KubernetesVersion < "v1.34" // v1.33.x only: the releases finale builds are v1.33.13 and v1.37.2
	if !gated {
		if err == nil {
			_ = cp.Stop()
			t.Fatalf("Kubernetes %s: the controller manager accepted %s=false", shared.KubernetesVersion, orderedGate)
		}
		if !strings.Contains(err.Error(), orderedGate) {
			t.Fatalf("Kubernetes %s: the controller manager failed, but not on the gate: %v", shared.KubernetesVersion, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(cp.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cm, pod := namespaceWithHeldPod(t, c)
	if err := controlplane.WaitGone(t.Context(), c, cm, wait); err != nil {
		t.Fatalf("Kubernetes %s with %s=false: %v", shared.KubernetesVersion, orderedGate, err)
	}
	release(t, c, pod)
}
