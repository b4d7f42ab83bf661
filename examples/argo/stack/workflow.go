package stack

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
)

// Node phases and messages Argo writes.
const (
	NodeRunning   = "Running"
	NodeSucceeded = "Succeeded"
	NodeError     = "Error"
	// MessagePodDeleted is what Argo records for a node whose Pod vanished
	// before its result was read: the seed's failure.
	MessagePodDeleted = "pod deleted"
	// Output is what the seed's container prints, the result the executor
	// reports.
	Output = "capture-ok"
)

// Workflow returns the seed's minimal Workflow: one container template,
// busybox printing Output (never pulled: there is no kubelet).
func Workflow(ns, name string) *unstructured.Unstructured {
	wf := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"entrypoint": "main",
			"templates": []any{map[string]any{
				"name": "main",
				"container": map[string]any{
					"image":   "busybox:1.37",
					"command": []any{"sh", "-c"},
					"args":    []any{"sleep 30; echo " + Output},
				},
			}},
		},
	}}
	wf.SetGroupVersionKind(WorkflowGVK)
	wf.SetNamespace(ns)
	wf.SetName(name)
	return wf
}

// Node is what a Workflow records for one node.
type Node struct {
	Phase, Message string
	// Result is outputs.result.
	Result string
}

// NodeOf reads node id from wf's status.nodes; ok is false when absent.
func NodeOf(wf *unstructured.Unstructured, id string) (Node, bool) {
	n, ok, _ := unstructured.NestedMap(wf.Object, "status", "nodes", id)
	if !ok {
		return Node{}, false
	}
	var out Node
	out.Phase, _, _ = unstructured.NestedString(n, "phase")
	out.Message, _, _ = unstructured.NestedString(n, "message")
	out.Result, _, _ = unstructured.NestedString(n, "outputs", "result")
	return out, true
}

// GetWorkflow reads the Workflow ns/name.
func GetWorkflow(ctx context.Context, c client.Reader, ns, name string) (*unstructured.Unstructured, error) {
	wf := &unstructured.Unstructured{}
	wf.SetGroupVersionKind(WorkflowGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, wf); err != nil {
		return nil, fmt.Errorf("argo: get Workflow %s/%s: %w", ns, name, err)
	}
	return wf, nil
}

// WaitPods waits until the Workflow's controller has created n Pods and
// returns them.
func WaitPods(ctx context.Context, c client.Reader, ns, wf string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := controlplane.WaitFor(ctx, timeout, fmt.Sprintf("%d Pods of Workflow %s/%s", n, ns, wf), func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelWorkflow: wf}); err != nil {
			return false, err
		}
		return len(pods.Items) >= n, nil
	})
	return pods.Items, err
}

// WaitNode waits until node id of Workflow ns/name satisfies ok.
func WaitNode(ctx context.Context, c client.Reader, ns, name, id string, timeout time.Duration, what string, ok func(Node) bool) (Node, error) {
	var last Node
	err := controlplane.WaitFor(ctx, timeout, fmt.Sprintf("node %s of Workflow %s/%s %s", id, ns, name, what), func(ctx context.Context) (bool, error) {
		wf, err := GetWorkflow(ctx, c, ns, name)
		if err != nil {
			return false, err
		}
		n, found := NodeOf(wf, id)
		last = n
		return found && ok(n), nil
	})
	return last, err
}

// Fulfilled reports whether a node's phase is final.
func Fulfilled(n Node) bool {
	switch n.Phase {
	case "Succeeded", "Failed", "Error", "Skipped", "Omitted":
		return true
	}
	return false
}

// WaitFinalizerOff waits until pod has lost fin, or is gone; it reports
// whether the Pod is gone.
func WaitFinalizerOff(ctx context.Context, c client.Reader, pod *corev1.Pod, fin string, timeout time.Duration) (gone bool, err error) {
	err = controlplane.WaitFor(ctx, timeout, fmt.Sprintf("finalizer %s off Pod %s/%s", fin, pod.Namespace, pod.Name), func(ctx context.Context) (bool, error) {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			if apierrors.IsNotFound(err) {
				gone = true
				return true, nil
			}
			return false, err
		}
		if got.UID != pod.UID {
			gone = true
			return true, nil
		}
		for _, f := range got.Finalizers {
			if f == fin {
				return false, nil
			}
		}
		return true, nil
	})
	return gone, err
}
