package capture

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodTerminal reports whether child is a Pod that has finished: phase
// Succeeded or Failed. Anything that is not a Pod is not terminal.
func PodTerminal(child client.Object) bool {
	pod, ok := child.(*corev1.Pod)
	if !ok {
		return false
	}
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// PodResult is what a finished Pod tells its owner.
type PodResult struct {
	Phase      corev1.PodPhase   `json:"phase"`
	Containers []ContainerResult `json:"containers,omitempty"`
}

// ContainerResult is one terminated container.
type ContainerResult struct {
	Name     string `json:"name"`
	ExitCode int32  `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

// ErrNoResult means a child carries no readable result.
var ErrNoResult = errors.New("capture: child has no result")

// PodResultOf reads the result of a terminal Pod: its phase and each
// terminated container's exit code, reason and termination message. A Pod
// that is not terminal, or not a Pod, gives ErrNoResult.
func PodResultOf(child client.Object) (PodResult, error) {
	pod, ok := child.(*corev1.Pod)
	if !ok {
		return PodResult{}, fmt.Errorf("%w: %T is not a Pod", ErrNoResult, child)
	}
	if !PodTerminal(pod) {
		return PodResult{}, fmt.Errorf("%w: Pod %s/%s is in phase %q, not Succeeded or Failed", ErrNoResult, pod.Namespace, pod.Name, pod.Status.Phase)
	}
	res := PodResult{Phase: pod.Status.Phase}
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil {
			continue
		}
		res.Containers = append(res.Containers, ContainerResult{Name: cs.Name, ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message})
	}
	return res, nil
}
