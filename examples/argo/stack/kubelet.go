package stack

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RunPod plays the kubelet starting a Pod: every init container terminated
// with exit code 0, every container running, phase Running.
func RunPod(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	return setStatus(ctx, c, pod, func(p *corev1.Pod, now metav1.Time) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = conditions(now, corev1.ConditionTrue, "")
		p.Status.InitContainerStatuses = terminated(p.Spec.InitContainers, now)
		p.Status.ContainerStatuses = nil
		for _, ct := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ct.Name, Image: ct.Image, Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
	})
}

// SucceedPod plays the kubelet finishing a Pod: every container terminated
// with exit code 0, phase Succeeded, and every condition's transition
// back-dated by age (the report waited 190 s past the last transition, so
// that Argo's two-minute floor had passed).
func SucceedPod(ctx context.Context, c client.Client, pod *corev1.Pod, age time.Duration) error {
	return setStatus(ctx, c, pod, func(p *corev1.Pod, now metav1.Time) {
		then := metav1.NewTime(now.Add(-age))
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = conditions(then, corev1.ConditionFalse, "PodCompleted")
		p.Status.InitContainerStatuses = terminated(p.Spec.InitContainers, then)
		p.Status.ContainerStatuses = terminated(p.Spec.Containers, then)
	})
}

func setStatus(ctx context.Context, c client.Client, pod *corev1.Pod, set func(*corev1.Pod, metav1.Time)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		set(pod, metav1.NewTime(time.Now().Truncate(time.Second)))
		return c.Status().Update(ctx, pod)
	})
	if err != nil {
		return fmt.Errorf("argo: set status of Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func conditions(at metav1.Time, ready corev1.ConditionStatus, reason string) []corev1.PodCondition {
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.ContainersReady, Status: ready, Reason: reason, LastTransitionTime: at},
		{Type: corev1.PodReady, Status: ready, Reason: reason, LastTransitionTime: at},
	}
}

func terminated(cts []corev1.Container, at metav1.Time) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(cts))
	for _, ct := range cts {
		out = append(out, corev1.ContainerStatus{
			Name: ct.Name, Image: ct.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: at, FinishedAt: at,
			}},
		})
	}
	return out
}

// ReportOutputs plays argoexec's wait container: it creates the Pod's
// WorkflowTaskResult (named after the node ID, labelled with the Workflow
// and as complete, owned by the Workflow) carrying result as
// outputs.result.
func ReportOutputs(ctx context.Context, c client.Client, pod *corev1.Pod, result string) error {
	nodeID := pod.Annotations[AnnotationNodeID]
	wf := pod.Labels[LabelWorkflow]
	if nodeID == "" || wf == "" {
		return fmt.Errorf("argo: Pod %s/%s has no %s annotation or %s label: not a workflow Pod", pod.Namespace, pod.Name, AnnotationNodeID, LabelWorkflow)
	}
	var owner *metav1.OwnerReference
	for i, ref := range pod.OwnerReferences {
		if ref.Kind == WorkflowGVK.Kind && ref.Name == wf {
			owner = &pod.OwnerReferences[i]
		}
	}
	if owner == nil {
		return fmt.Errorf("argo: Pod %s/%s has no owner reference to Workflow %s", pod.Namespace, pod.Name, wf)
	}
	tr := &unstructured.Unstructured{}
	tr.SetGroupVersionKind(WorkflowTaskResultGVK)
	tr.SetNamespace(pod.Namespace)
	tr.SetName(nodeID)
	tr.SetLabels(map[string]string{LabelWorkflow: wf, LabelReportOutputsCompleted: "true"})
	tr.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID}})
	if err := unstructured.SetNestedField(tr.Object, result, "outputs", "result"); err != nil {
		return fmt.Errorf("argo: %w", err)
	}
	if err := c.Create(ctx, tr); err != nil {
		return fmt.Errorf("argo: create WorkflowTaskResult %s/%s: %w", pod.Namespace, nodeID, err)
	}
	return nil
}
