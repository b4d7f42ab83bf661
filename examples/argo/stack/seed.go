package stack

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SeedAge is how far the Pod's condition transitions are back-dated: the
// report waited at least 190 s after the last one, past Argo's two-minute
// floor.
const SeedAge = 200 * time.Second

// SeedWorkers is the number of workflow workers when they run (the report's
// two).
const SeedWorkers = 2

// Timeouts of the sequence's waits.
const (
	waitStart = 90 * time.Second
	waitStep  = 90 * time.Second
)

// Outcome is how the report's sequence ended.
type Outcome struct {
	// Pod is the workflow Pod as it was created.
	Pod corev1.Pod
	// GoneWhileStopped: the Pod was gone before the workflow workers came
	// back (Argo's cleanup removed its finalizer and nothing else held it).
	GoneWhileStopped bool
	// HeldBy: the Pod's finalizers once Argo's cleanup had removed its own,
	// while the workers were stopped (empty when it was gone).
	HeldBy []string
	// Node is the Workflow's record of the Pod's node once the workers
	// were back.
	Node Node
}

// Seed runs the sequence of argo-workflows #17024 against ctl, which must be
// running with workflow workers: a one-container Workflow runs; the
// controller stops; the Pod succeeds (its executor reports the output) and
// its conditions are older than the two-minute floor; the Pod is deleted;
// the controller comes back with --workflow-workers=0 and its Pod cleanup
// removes workflows.argoproj.io/status; then it comes back with workers.
// say, when not nil, narrates each step.
func Seed(ctx context.Context, c client.Client, ctl *Controller, ns, name string, say func(format string, args ...any)) (Outcome, error) {
	if say == nil {
		say = func(string, ...any) {}
	}
	var out Outcome
	if err := c.Create(ctx, Workflow(ns, name)); err != nil {
		return out, fmt.Errorf("argo: create Workflow: %w", err)
	}
	pods, err := WaitPods(ctx, c, ns, name, 1, waitStart)
	if err != nil {
		return out, ctl.explain(err)
	}
	pod := pods[0]
	out.Pod = *pod.DeepCopy()
	id := pod.Annotations[AnnotationNodeID]
	say("Workflow %s created Pod %s (node %s), finalizers %v", name, pod.Name, id, pod.Finalizers)
	if err := RunPod(ctx, c, &pod); err != nil {
		return out, err
	}
	if _, err := WaitNode(ctx, c, ns, name, id, waitStep, "Running", func(n Node) bool { return n.Phase == NodeRunning }); err != nil {
		return out, ctl.explain(err)
	}
	say("node %s is Running; the controller stops", id)
	ctl.Pause()

	if err := ReportOutputs(ctx, c, &pod, Output); err != nil {
		return out, err
	}
	if err := SucceedPod(ctx, c, &pod, SeedAge); err != nil {
		return out, err
	}
	say("the executor reported %q and the Pod Succeeded; its conditions are %s old", Output, SeedAge)
	if err := c.Delete(ctx, &pod); err != nil {
		return out, fmt.Errorf("argo: delete Pod %s: %w", pod.Name, err)
	}
	var deleting corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&pod), &deleting); err != nil {
		return out, fmt.Errorf("argo: the deleted Pod must stay while the controller is stopped: %w", err)
	}
	if deleting.DeletionTimestamp == nil || !slices.Contains(deleting.Finalizers, FinalizerStatus) {
		return out, fmt.Errorf("argo: deleted Pod %s: want a deletion timestamp and %s, got %v and %v", pod.Name, FinalizerStatus, deleting.DeletionTimestamp, deleting.Finalizers)
	}
	say("Pod %s deleted: Terminating, finalizers %v", pod.Name, deleting.Finalizers)

	if err := ctl.Restart(0); err != nil {
		return out, err
	}
	say("the controller is back with --workflow-workers=0 (Pod cleanup workers running)")
	gone, err := WaitFinalizerOff(ctx, c, &pod, FinalizerStatus, waitStep)
	if err != nil {
		return out, ctl.explain(err)
	}
	out.GoneWhileStopped = gone
	if !gone {
		var held corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(&pod), &held); err == nil && held.UID == pod.UID {
			out.HeldBy = held.Finalizers
		} else {
			out.GoneWhileStopped = true
		}
	}
	if out.GoneWhileStopped {
		say("Argo's cleanup removed %s and the Pod is gone; the Workflow has not recorded the node", FinalizerStatus)
	} else {
		say("Argo's cleanup removed %s; the Pod stays Terminating, held by %v", FinalizerStatus, out.HeldBy)
	}

	if err := ctl.Restart(SeedWorkers); err != nil {
		return out, err
	}
	say("the controller is back with --workflow-workers=%d", SeedWorkers)
	n, err := WaitNode(ctx, c, ns, name, id, waitStep, "final", Fulfilled)
	if err != nil {
		return out, ctl.explain(err)
	}
	out.Node = n
	say("node %s: %s %q, outputs.result %q", id, n.Phase, n.Message, n.Result)
	return out, nil
}

// explain adds the controller's state to a failed wait.
func (ctl *Controller) explain(err error) error {
	if rerr := ctl.Running(); rerr != nil {
		return fmt.Errorf("%w; %w", err, rerr)
	}
	return fmt.Errorf("%w; last lines of the controller's log:\n%s", err, ctl.LogTail(logTailLines))
}
