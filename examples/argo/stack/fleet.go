package stack

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
)

// FleetOutcome is how the fleet sequence ended.
type FleetOutcome struct {
	Pods int
	// Kept: nodes recorded Succeeded with the output their executor
	// reported.
	Kept int
	// Lost: nodes recorded otherwise (Argo's "Error: pod deleted").
	Lost int
	// Held: Pods still there (Terminating) when the workers returned.
	Held int
	// Release: for each held Pod, from the workers' return to the Pod gone.
	Release []time.Duration
	// Lag: for each held Pod, from the first Workflow version that shows
	// its node final to the Pod gone: the guard's own part of Release.
	Lag []time.Duration
	// Recorded: from the workers' return to the Workflow's final phase.
	Recorded time.Duration
}

// Fleet runs the benchmark's sequence: one Workflow fans out to n Pods; they
// run; the workflow workers stop (--workflow-workers=0, Pod cleanup
// running); every Pod succeeds, its executor reports the output, and it is
// deleted; Argo's cleanup removes its finalizer from each; the workers
// return. ctl must be running with workers.
func Fleet(ctx context.Context, c client.WithWatch, ctl *Controller, ns, name string, n int, timeout time.Duration) (FleetOutcome, error) {
	out := FleetOutcome{Pods: n}
	if err := c.Create(ctx, FanOut(ns, name, n)); err != nil {
		return out, fmt.Errorf("argo: create Workflow: %w", err)
	}
	pods, err := WaitPods(ctx, c, ns, name, n, timeout)
	if err != nil {
		return out, ctl.explain(err)
	}
	if err := each(ctx, pods, func(p *corev1.Pod) error { return RunPod(ctx, c, p) }); err != nil {
		return out, err
	}
	err = controlplane.WaitFor(ctx, timeout, fmt.Sprintf("%d nodes Running", n), func(ctx context.Context) (bool, error) {
		wf, err := GetWorkflow(ctx, c, ns, name)
		if err != nil {
			return false, err
		}
		return countNodes(wf, pods, func(n Node) bool { return n.Phase == NodeRunning }) == len(pods), nil
	})
	if err != nil {
		return out, ctl.explain(err)
	}
	if err := ctl.Restart(0); err != nil {
		return out, err
	}
	err = each(ctx, pods, func(p *corev1.Pod) error {
		if err := ReportOutputs(ctx, c, p, Output); err != nil {
			return err
		}
		if err := SucceedPod(ctx, c, p, SeedAge); err != nil {
			return err
		}
		return client.IgnoreNotFound(c.Delete(ctx, p))
	})
	if err != nil {
		return out, err
	}
	uids := map[types.UID]bool{}
	for _, p := range pods {
		uids[p.UID] = true
	}
	err = controlplane.WaitFor(ctx, timeout, "Argo's cleanup to remove "+FinalizerStatus+" from every Pod", func(ctx context.Context) (bool, error) {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{LabelWorkflow: name}); err != nil {
			return false, err
		}
		held := 0
		for _, p := range list.Items {
			if !uids[p.UID] {
				continue
			}
			if slices.Contains(p.Finalizers, FinalizerStatus) {
				return false, nil
			}
			held++
		}
		out.Held = held
		return true, nil
	})
	if err != nil {
		return out, ctl.explain(err)
	}

	// The workers return; each held Pod's release is timed from here, on a
	// watch (no polling between the events).
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{LabelWorkflow: name}); err != nil {
		return out, err
	}
	left := map[types.UID]bool{}
	for _, p := range list.Items {
		if uids[p.UID] {
			left[p.UID] = true
		}
	}
	podRV := list.ResourceVersion
	w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{LabelWorkflow: name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: podRV}})
	if err != nil {
		return out, fmt.Errorf("argo: watch Pods: %w", err)
	}
	defer func() { w.Stop() }()
	wfs := &unstructured.UnstructuredList{}
	wfs.SetGroupVersionKind(WorkflowGVK.GroupVersion().WithKind(WorkflowGVK.Kind + "List"))
	ww, err := c.Watch(ctx, wfs, client.InNamespace(ns))
	if err != nil {
		return out, fmt.Errorf("argo: watch Workflows: %w", err)
	}
	defer func() { ww.Stop() }()
	wfRV := ""
	nodeOf := map[types.UID]string{}
	for _, p := range pods {
		nodeOf[p.UID] = p.Annotations[AnnotationNodeID]
	}
	recordedAt, goneAt := map[types.UID]time.Time{}, map[types.UID]time.Time{}
	back := time.Now()
	if err := ctl.Restart(SeedWorkers); err != nil {
		return out, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(left) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The apiserver ends watches now and then; go on from the
				// last version seen.
				if w, err = c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{LabelWorkflow: name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: podRV}}); err != nil {
					return out, fmt.Errorf("argo: watch Pods again with %d Pods left: %w", len(left), err)
				}
				continue
			}
			if ev.Type == watch.Error {
				return out, fmt.Errorf("argo: the Pod watch failed with %d Pods left: %v", len(left), ev.Object)
			}
			if o, isObj := ev.Object.(client.Object); isObj {
				podRV = o.GetResourceVersion()
			}
			if ev.Type != watch.Deleted {
				continue
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && left[p.UID] {
				delete(left, p.UID)
				goneAt[p.UID] = time.Now()
				out.Release = append(out.Release, time.Since(back))
			}
		case ev, ok := <-ww.ResultChan():
			if !ok {
				if ww, err = c.Watch(ctx, wfs, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: wfRV}}); err != nil {
					return out, fmt.Errorf("argo: watch Workflows again with %d Pods left: %w", len(left), err)
				}
				continue
			}
			if ev.Type == watch.Error {
				return out, fmt.Errorf("argo: the Workflow watch failed with %d Pods left: %v", len(left), ev.Object)
			}
			wf, isWF := ev.Object.(*unstructured.Unstructured)
			if !isWF {
				continue
			}
			wfRV = wf.GetResourceVersion()
			if wf.GetName() != name {
				continue
			}
			now := time.Now()
			for uid, id := range nodeOf {
				if _, seen := recordedAt[uid]; seen {
					continue
				}
				if n, found := NodeOf(wf, id); found && Fulfilled(n) {
					recordedAt[uid] = now
				}
			}
		case <-deadline.C:
			return out, ctl.explain(fmt.Errorf("argo: %d held Pods not released %s after the workers returned", len(left), timeout))
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	for uid, gone := range goneAt {
		if rec, ok := recordedAt[uid]; ok {
			out.Lag = append(out.Lag, gone.Sub(rec))
		}
	}
	err = controlplane.WaitFor(ctx, timeout, "the Workflow to finish", func(ctx context.Context) (bool, error) {
		wf, err := GetWorkflow(ctx, c, ns, name)
		if err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(wf.Object, "status", "phase")
		if phase != "Succeeded" && phase != "Failed" && phase != "Error" {
			return false, nil
		}
		out.Recorded = time.Since(back)
		out.Kept = countNodes(wf, pods, func(n Node) bool { return n.Phase == NodeSucceeded && n.Result == Output })
		out.Lost = len(pods) - out.Kept
		return true, nil
	})
	if err != nil {
		return out, ctl.explain(err)
	}
	return out, nil
}

// FanOut is a Workflow whose one step runs the seed's container n times in
// parallel.
func FanOut(ns, name string, n int) *unstructured.Unstructured {
	wf := Workflow(ns, name)
	main := wf.Object["spec"].(map[string]any)["templates"].([]any)[0]
	wf.Object["spec"] = map[string]any{
		"entrypoint": "fan",
		"templates": []any{
			map[string]any{
				"name": "fan",
				"steps": []any{[]any{map[string]any{
					"name": "work", "template": "main",
					"withSequence": map[string]any{"count": strconv.Itoa(n)},
				}}},
			},
			main,
		},
	}
	return wf
}

func countNodes(wf *unstructured.Unstructured, pods []corev1.Pod, ok func(Node) bool) int {
	k := 0
	for _, p := range pods {
		if n, found := NodeOf(wf, p.Annotations[AnnotationNodeID]); found && ok(n) {
			k++
		}
	}
	return k
}

// each runs f over pods with a few calls in flight: the kubelet and the
// executors of many nodes act at once.
func each(ctx context.Context, pods []corev1.Pod, f func(*corev1.Pod) error) error {
	const inFlight = 8
	sem := make(chan struct{}, inFlight)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i := range pods {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(&pods[i]); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
