package guard_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/testenv"
)

// namespaceGone bounds a namespace deletion that nothing holds: the
// namespace controller deletes the Pods, waits for them to go, then
// deletes the rest, with its own requeue delays in between.
const namespaceGone = 90 * time.Second

// TestNamespaceDeletionFinishes: Kubernetes 1.37
// deletes a namespace's Pods first and nothing else while a Pod remains
// (ordered namespace deletion, always on in the kube-controller-manager
// this project runs). With the guard healthy and nothing recording the
// Pods' nodes, the guard used to hold each deleted Pod for its Workflow
// while the Workflow's deletion waited for the Pods: the namespace hung
// for ever. Now a Pod being deleted in a terminating namespace is released
// (NamespaceTerminating), with an Event saying so, and the namespace goes.
//
//   - stock controller, workers stopped: the stock v4.1.4 controller runs
//     with its workflow workers stopped (its Pod cleanup still removes its
//     own finalizer); the Pod Succeeded and its node is not recorded.
//   - no controller: Argo is absent (as when its own Pod went first); the
//     Pod never started.
func TestNamespaceDeletionFinishes(t *testing.T) {
	t.Run("stock controller, workers stopped", func(t *testing.T) {
		events := &reasons{}
		w := newWorldWith(t, &argo.GuardOptions{Guard: guard.Options{Events: events}})
		pod := runningPod(t, w, "doomed")
		if err := argo.SucceedPod(t.Context(), w.c, pod, argo.SeedAge); err != nil {
			t.Fatal(err)
		}
		deleteNamespace(t, w, pod)
		waitReleases(t, w.guard, map[capture.Reason]int{capture.ReasonNamespaceTerminating: 1})
		events.want(t, capture.EventReasonReleasedNamespaceTerminating)
	})
	t.Run("no controller", func(t *testing.T) {
		events := &reasons{}
		w := newWorldWithoutArgo(t, guard.Options{Events: events})
		pod := workflowPod(t, w.c, w.ns, "doomed")
		deleteNamespace(t, w, pod)
		waitReleases(t, w.guard, map[capture.Reason]int{capture.ReasonNamespaceTerminating: 1})
		events.want(t, capture.EventReasonReleasedNamespaceTerminating)
	})
}

// deleteNamespace deletes the world's namespace and waits until it is
// gone; on a timeout it says what still holds pod.
func deleteNamespace(t *testing.T, w *world, pod *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}
	if err := w.c.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(ctx, w.c, ns, namespaceGone); err != nil {
		var got corev1.Pod
		state := "gone"
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err == nil {
			state = fmt.Sprintf("deleting %v, finalizers %v", got.DeletionTimestamp != nil, got.Finalizers)
		} else if !apierrors.IsNotFound(err) {
			state = err.Error()
		}
		t.Fatalf("%v; Pod %s: %s; the guard's releases: %v", err, pod.Name, state, w.guard.Guard.Releaser().Stats().Releases)
	}
}

// newWorldWithoutArgo is a guarded world (Argo's CRDs, the guard's policy,
// RBAC and the guard) with no workflow-controller at all.
func newWorldWithoutArgo(t *testing.T, gopts guard.Options) *world {
	t.Helper()
	c, ns := policedNamespace(t)
	applyRBAC(t, c, ns)
	w := &world{c: c, ns: ns}
	w.guard = w.startGuard(t, argo.GuardOptions{Guard: gopts})
	return w
}

// policedNamespace is a new namespace with Argo's CRDs and the guard's
// admission policy bound to it, and nothing running.
func policedNamespace(t *testing.T) (client.Client, string) {
	t.Helper()
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	if err := argo.Install(t.Context(), c, ns); err != nil {
		t.Fatal(err)
	}
	if err := argo.InstallPolicy(t.Context(), c, ns); err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// workflowPod creates a Workflow in ns and, as Argo would, a Pod it owns
// with Argo's label, and checks the policy marked it.
func workflowPod(t *testing.T, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	wf := argo.Workflow(ns, name)
	if err := c.Create(ctx, wf); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name + "-main",
			Labels:      map[string]string{guard.LabelWorkflow: name},
			Annotations: map[string]string{guard.AnnotationNodeID: name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: argo.WorkflowGVK.GroupVersion().String(), Kind: argo.WorkflowGVK.Kind,
				Name: name, UID: wf.GetUID(), Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.37"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pod.Finalizers, guard.Finalizer) {
		t.Fatalf("Pod %s created without the guard's finalizer: %v", pod.Name, pod.Finalizers)
	}
	return pod
}

// reasons records the reasons of the Events the guard emits.
type reasons struct {
	mu  sync.Mutex // guards got
	got []string
}

func (r *reasons) Eventf(_, _ runtime.Object, _, reason, _, _ string, _ ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, reason)
}

func (r *reasons) want(t *testing.T, reason string) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), 10*time.Second, "an Event "+reason, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Contains(r.got, reason), nil
	})
	if err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Errorf("%v; the guard's Event reasons: %v", err, r.got)
	}
}
