package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// ProbedIn is the namespace whose admission was probed with a dry-run
	// Pod: the guard's, unless it refuses new objects (terminating).
	ProbedIn string
}

// Uninstall steps, named in its errors.
const (
	stepRelease  = "remove the finalizer from Pods"
	stepBindings = "delete the policy's bindings"
	stepPolicy   = "delete the policy"
	stepProbe    = "wait until new workflow Pods go unmarked"
	stepLease    = "delete the heartbeat Lease"
)

// ErrUninstallIncomplete is wrapped by every error of Uninstall: it stopped
// part way, the error names the step and what is still in place, and
// running it again resumes (every step is idempotent).
var ErrUninstallIncomplete = errors.New("guard uninstall incomplete")

// Uninstall removes the guard's effect from the cluster so that nothing is
// left that only the guard could undo. Its order is: release first, the
// evidence last.
//
//  1. Finalizer goes from every Pod in every namespace (terminating or
//     not), each with a JSON patch that tests the finalizer's index (other
//     finalizers, Argo's among them, are untouched).
//  2. What marks new Pods goes: every binding of Policy, then Policy.
//  3. It waits until a dry-run workflow Pod comes back without Finalizer:
//     in opts.Namespace, or, when that namespace refuses new objects (it is
//     terminating, or gone), in the namespace of a Pod it released, then in
//     default.
//  4. Finalizer goes from Pods marked meanwhile, pass after pass until one
//     finds none (at most a few).
//  5. The heartbeat Lease goes last.
//
// Decision: the Lease is the evidence `finale audit` reads to name the
// guard as the holder of a stuck Pod, and the policy is what CheckPolicy
// reads; deleting them before the Pods were released (as the first
// version did) turned a failure part way (a terminating guard namespace
// refused the probe) into Pods held for ever that nothing reported. Now a
// failure at any step leaves the Pods released so far released, and what
// is left in place still names the guard. Every error wraps
// ErrUninstallIncomplete and says which step failed, how many Pods were
// released, and what is still in place; running Uninstall again resumes.
//
// The guard's Deployment and RBAC stay: delete them afterwards (kubectl
// delete -k examples/argo/config/default). Removing the finalizer releases
// a deleted Pod without the rule: a Pod whose node Argo has not recorded
// is then Argo's stock behaviour (its result may be lost). Start the guard
// instead when it is only down.
func Uninstall(ctx context.Context, c client.Client, opts UninstallOptions) (UninstallReport, error) {
	var rep UninstallReport
	if opts.Namespace == "" {
		return rep, errors.New("guard: uninstall needs the guard's namespace (its heartbeat Lease is there, and admission is probed there)")
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultUninstallWait
	}
	u := &uninstall{c: c, rep: &rep, ns: opts.Namespace, namespaces: map[string]bool{}}
	if _, err := u.releaseAll(ctx); err != nil {
		return rep, u.fail(stepRelease, err)
	}

	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := c.List(ctx, &bindings); err != nil {
		return rep, u.fail(stepBindings, fmt.Errorf("list MutatingAdmissionPolicyBindings: %w", err))
	}
	for i := range bindings.Items {
		if bindings.Items[i].Spec.PolicyName == PolicyName {
			u.bindingsLeft = append(u.bindingsLeft, bindings.Items[i].Name)
		}
	}
	u.bindingsListed = true
	for len(u.bindingsLeft) > 0 {
		name := u.bindingsLeft[0]
		err := c.Delete(ctx, &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if client.IgnoreNotFound(err) != nil {
			return rep, u.fail(stepBindings, fmt.Errorf("delete MutatingAdmissionPolicyBinding %s: %w", name, err))
		}
		u.bindingsLeft = u.bindingsLeft[1:]
		rep.Bindings = append(rep.Bindings, name)
	}
	err := c.Delete(ctx, &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName}})
	if client.IgnoreNotFound(err) != nil {
		return rep, u.fail(stepPolicy, fmt.Errorf("delete MutatingAdmissionPolicy %s: %w", PolicyName, err))
	}
	rep.Policy, u.policyGone = err == nil, true

	// The admission chain learns of the deletion asynchronously: a Pod
	// created meanwhile could still be marked after the first pass.
	if err := u.waitUnmarked(ctx, opts.Wait); err != nil {
		return rep, u.fail(stepProbe, err)
	}
	for pass := 0; ; pass++ {
		found, err := u.releaseAll(ctx)
		if err != nil {
			return rep, u.fail(stepRelease, err)
		}
		if found == 0 {
			break
		}
		if pass+1 >= uninstallPasses {
			return rep, u.fail(stepRelease, fmt.Errorf("new Pods with %s keep appearing after %d passes; is another copy of the policy installed?", Finalizer, uninstallPasses))
		}
	}

	err = c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: HeartbeatName}})
	if client.IgnoreNotFound(err) != nil {
		return rep, u.fail(stepLease, fmt.Errorf("delete heartbeat Lease %s/%s: %w", opts.Namespace, HeartbeatName, err))
	}
	rep.Heartbeat = err == nil
	return rep, nil
}

// uninstall is one Uninstall's progress, for its error messages.
type uninstall struct {
	c   client.Client
	rep *UninstallReport
	// ns is the guard's namespace.
	ns string
	// namespaces are those of the Pods released, in the order first seen:
	// where the policy is known to apply, to probe when ns cannot be.
	namespaces map[string]bool
	order      []string
	// bindingsLeft: bindings of Policy listed and not deleted yet.
	bindingsLeft   []string
	bindingsListed bool
	policyGone     bool
}

// fail says what step failed, what was done, and what is still in place.
func (u *uninstall) fail(step string, err error) error {
	var left []string
	if !u.bindingsListed {
		left = append(left, "the MutatingAdmissionPolicyBindings of "+PolicyName)
	}
	for _, b := range u.bindingsLeft {
		left = append(left, "MutatingAdmissionPolicyBinding "+b)
	}
	if !u.policyGone {
		left = append(left, "MutatingAdmissionPolicy "+PolicyName)
	}
	// The Lease is always the last step: until it is done, it is there.
	left = append(left, "heartbeat Lease "+u.ns+"/"+HeartbeatName, Finalizer+" on any Pod not released yet")
	return fmt.Errorf("%w: removed %s from %d Pods (%d of them being deleted); could not %s: %w; still in place: %s; re-run guard uninstall",
		ErrUninstallIncomplete, Finalizer, u.rep.Released, u.rep.Deleting, step, err, strings.Join(left, ", "))
}

// waitUnmarked waits until a dry-run workflow Pod goes unmarked, probing
// the first namespace that accepts one: the guard's, those of the Pods
// released, then default. A terminating namespace refuses every new
// object, dry-run included, and no Pod can be created there anyway.
func (u *uninstall) waitUnmarked(ctx context.Context, timeout time.Duration) error {
	candidates := append([]string{u.ns}, u.order...)
	candidates = append(candidates, metav1.NamespaceDefault)
	i := 0
	return wait.PollUntilContextTimeout(ctx, probeInterval, timeout, true, func(ctx context.Context) (bool, error) {
		for ; i < len(candidates); i++ {
			marked, err := ProbeMarked(ctx, u.c, candidates[i])
			if refusesNew(err) {
				continue
			}
			if err != nil {
				return false, err
			}
			u.rep.ProbedIn = candidates[i]
			return !marked, nil
		}
		return false, fmt.Errorf("every namespace probed refuses new Pods: %v", candidates)
	})
}

// refusesNew reports whether err is the refusal of a create in a namespace
// that is terminating or gone.
func refusesNew(err error) bool {
	return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || apierrors.IsNotFound(err)
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
func (u *uninstall) releaseAll(ctx context.Context) (int, error) {
	c, rep := u.c, u.rep
	found := 0
	opts := []client.ListOption{client.Limit(uninstallPage)}
	for {
		var pods metav1.PartialObjectMetadataList
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := c.List(ctx, &pods, opts...); err != nil {
			return found, fmt.Errorf("list Pods: %w", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !slices.Contains(p.Finalizers, Finalizer) {
				continue
			}
			found++
			if !u.namespaces[p.Namespace] {
				u.namespaces[p.Namespace] = true
				u.order = append(u.order, p.Namespace)
			}
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
			return false, fmt.Errorf("remove %s from Pod %s: %w", Finalizer, key, err)
		}
		uid := p.UID
		if err := c.Get(ctx, key, p); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, fmt.Errorf("read Pod %s: %w", key, err)
		}
		if p.UID != uid {
			return false, nil // another Pod under the name; the next pass sees it
		}
	}
	return false, fmt.Errorf("remove %s from Pod %s: it changed under %d attempts", Finalizer, key, uninstallAttempts)
}
