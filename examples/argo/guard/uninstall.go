package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultUninstallWait bounds how long Uninstall waits for the apiserver to
// stop adding the finalizer once the policy is deleted.
const DefaultUninstallWait = 60 * time.Second

// Uninstall's steps are bounded: a page of Pods, attempts per Pod, passes.
const (
	uninstallPage     = 500
	uninstallAttempts = 5
	uninstallPasses   = 3
	probeInterval     = 500 * time.Millisecond
)

// UninstallOptions configure Uninstall. Namespace is required.
type UninstallOptions struct {
	// Namespace is the guard's namespace: its heartbeat Lease is deleted
	// there, and the apiserver's admission is probed there with a dry-run
	// workflow Pod (nothing is stored).
	Namespace string
	// Wait bounds the wait for the apiserver to stop adding the finalizer;
	// DefaultUninstallWait when zero.
	Wait time.Duration
}

// UninstallReport is what Uninstall did.
type UninstallReport struct {
	// Bindings: the MutatingAdmissionPolicyBindings of Policy it deleted.
	Bindings []string
	// Policy: it deleted the MutatingAdmissionPolicy (false: there was none).
	Policy bool
	// Heartbeat: it deleted the heartbeat Lease (false: there was none).
	Heartbeat bool
	// Released: Pods it removed Finalizer from; Deleting of them were being
	// deleted, and go now unless another finalizer holds them.
	Released, Deleting int
}

// Uninstall removes the guard's effect from the cluster so that nothing is
// left that only the guard could undo: first what marks new Pods (every
// binding of Policy, then Policy, then the heartbeat Lease), then, once a
// dry-run workflow Pod in opts.Namespace comes back without Finalizer,
// Finalizer from every Pod in every namespace, each with a JSON patch that
// tests the finalizer's index (other finalizers, Argo's among them, are
// untouched). It repeats the Pod pass until one finds none, at most a few
// times. The guard's Deployment and RBAC stay: delete them afterwards
// (kubectl delete -k examples/argo/config/default).
//
// Removing the finalizer releases a deleted Pod without the rule: a Pod
// whose node Argo has not recorded is then Argo's stock behaviour (its
// result may be lost). Start the guard instead when it is only down.
func Uninstall(ctx context.Context, c client.Client, opts UninstallOptions) (UninstallReport, error) {
	var rep UninstallReport
	if opts.Namespace == "" {
		return rep, errors.New("guard: uninstall needs the guard's namespace (its heartbeat Lease is there, and admission is probed there)")
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultUninstallWait
	}
	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := c.List(ctx, &bindings); err != nil {
		return rep, fmt.Errorf("guard: list MutatingAdmissionPolicyBindings: %w", err)
	}
	for i := range bindings.Items {
		b := &bindings.Items[i]
		if b.Spec.PolicyName != PolicyName {
			continue
		}
		if err := c.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			return rep, fmt.Errorf("guard: delete MutatingAdmissionPolicyBinding %s: %w", b.Name, err)
		}
		rep.Bindings = append(rep.Bindings, b.Name)
	}
	err := c.Delete(ctx, &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName}})
	if client.IgnoreNotFound(err) != nil {
		return rep, fmt.Errorf("guard: delete MutatingAdmissionPolicy %s: %w", PolicyName, err)
	}
	rep.Policy = err == nil
	err = c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: HeartbeatName}})
	if client.IgnoreNotFound(err) != nil {
		return rep, fmt.Errorf("guard: delete heartbeat Lease %s/%s: %w", opts.Namespace, HeartbeatName, err)
	}
	rep.Heartbeat = err == nil

	// The admission chain learns of the deletion asynchronously: a Pod
	// created meanwhile could still be marked after the pass below.
	err = wait.PollUntilContextTimeout(ctx, probeInterval, opts.Wait, true, func(ctx context.Context) (bool, error) {
		marked, err := ProbeMarked(ctx, c, opts.Namespace)
		return !marked, err
	})
	if err != nil {
		return rep, fmt.Errorf("guard: the apiserver still adds %s to new workflow Pods in %s %s after the policy was deleted: %w", Finalizer, opts.Namespace, opts.Wait, err)
	}

	for pass := 0; pass < uninstallPasses; pass++ {
		found, err := releaseAll(ctx, c, &rep)
		if err != nil {
			return rep, err
		}
		if found == 0 {
			return rep, nil
		}
	}
	return rep, fmt.Errorf("guard: Pods with %s keep appearing after %d passes; is another copy of the policy installed?", Finalizer, uninstallPasses)
}

// ProbeMarked reports whether a workflow Pod created in ns now would get
// Finalizer: it creates one with dry-run (nothing is stored) and reads the
// finalizers the admission chain gave it.
func ProbeMarked(ctx context.Context, c client.Writer, ns string) (bool, error) {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "finale-guard-probe-", Labels: map[string]string{LabelWorkflow: "probe"}, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: WorkflowGVK.GroupVersion().String(), Kind: WorkflowGVK.Kind, Name: "probe", UID: types.UID("probe"),
		}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.37"}}},
	}
	if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
		return false, fmt.Errorf("guard: dry-run workflow Pod in %s: %w", ns, err)
	}
	return slices.Contains(probe.Finalizers, Finalizer), nil
}

// releaseAll removes Finalizer from every Pod that has it, page by page,
// and returns how many it found.
func releaseAll(ctx context.Context, c client.Client, rep *UninstallReport) (int, error) {
	found := 0
	opts := []client.ListOption{client.Limit(uninstallPage)}
	for {
		var pods metav1.PartialObjectMetadataList
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := c.List(ctx, &pods, opts...); err != nil {
			return found, fmt.Errorf("guard: list Pods: %w", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !slices.Contains(p.Finalizers, Finalizer) {
				continue
			}
			found++
			p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
			released, err := unmark(ctx, c, p)
			if err != nil {
				return found, err
			}
			if released {
				rep.Released++
				if p.DeletionTimestamp != nil {
					rep.Deleting++
				}
			}
		}
		if pods.Continue == "" {
			return found, nil
		}
		opts = []client.ListOption{client.Limit(uninstallPage), client.Continue(pods.Continue)}
	}
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// unmark removes Finalizer from p: a JSON patch that tests the Pod's UID and
// the finalizer at its index, then removes that index, so a concurrent
// change to the list (Argo removing its own) fails the test instead of
// removing the wrong entry; then it reads the Pod again and retries.
func unmark(ctx context.Context, c client.Client, p *metav1.PartialObjectMetadata) (bool, error) {
	key := client.ObjectKeyFromObject(p)
	for attempt := 0; attempt < uninstallAttempts; attempt++ {
		i := slices.Index(p.Finalizers, Finalizer)
		if i < 0 {
			return false, nil
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		patch, err := json.Marshal([]jsonPatchOp{
			{Op: "test", Path: "/metadata/uid", Value: string(p.UID)},
			{Op: "test", Path: path, Value: Finalizer},
			{Op: "remove", Path: path},
		})
		if err != nil {
			return false, fmt.Errorf("guard: %w", err)
		}
		err = c.Patch(ctx, p, client.RawPatch(types.JSONPatchType, patch))
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsInvalid(err) && !apierrors.IsConflict(err):
			return false, fmt.Errorf("guard: remove %s from Pod %s: %w", Finalizer, key, err)
		}
		uid := p.UID
		if err := c.Get(ctx, key, p); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, fmt.Errorf("guard: read Pod %s: %w", key, err)
		}
		if p.UID != uid {
			return false, nil // another Pod under the name; the next pass sees it
		}
	}
	return false, fmt.Errorf("guard: Pod %s changed under %d attempts to remove %s; run uninstall again", key, uninstallAttempts, Finalizer)
}
