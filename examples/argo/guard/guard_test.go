package guard_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m)
}

const guardSA = "finale-argo-guard"

type world struct {
	c     client.Client
	ns    string
	ctl   *argo.Controller
	guard *argo.GuardRun
}

// newWorld: a namespace with Argo's CRDs and configuration, the stock
// controller on it with workflow workers, and (guarded) the guard's policy
// bound to it and the guard running as its own ServiceAccount under the
// RBAC it ships.
func newWorld(t *testing.T, guarded bool) *world {
	t.Helper()
	if guarded {
		return newWorldWith(t, &argo.GuardOptions{})
	}
	return newWorldWith(t, nil)
}

// newWorldWith is newWorld with the guard's options; nil: no guard.
func newWorldWith(t *testing.T, gopts *argo.GuardOptions) *world {
	t.Helper()
	s := testenv.Scheme()
	c := testenv.Client(t, s)
	ns := testenv.Namespace(t, c)
	ctx := t.Context()
	if err := argo.Install(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	w := &world{c: c, ns: ns}
	if gopts != nil {
		if err := argo.InstallPolicy(ctx, c, ns); err != nil {
			t.Fatal(err)
		}
		applyRBAC(t, c, ns)
		w.guard = w.startGuard(t, *gopts)
	}
	ctl, err := argo.Start(ctx, argo.Options{Kubeconfig: testenv.ControlPlane(t).Kubeconfig, Namespace: ns, Workers: argo.SeedWorkers, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("workflow-controller log tail:\n%s", ctl.LogTail(60))
		}
		_ = ctl.Stop()
	})
	w.ctl = ctl
	return w
}

// startGuard starts a guard on the world's namespace as its ServiceAccount,
// stopped at the end of the test.
func (w *world) startGuard(t *testing.T, gopts argo.GuardOptions) *argo.GuardRun {
	t.Helper()
	g, err := argo.StartGuardWith(t.Context(), testenv.ControlPlane(t).AsServiceAccount(w.ns, guardSA), testenv.Scheme(), w.ns, gopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Errorf("guard: %v", err)
		}
	})
	return g
}

// applyRBAC applies config/rbac with the guard's ServiceAccount in ns; the
// cluster-scoped names get ns as a suffix so tests do not collide.
func applyRBAC(t *testing.T, c client.Client, ns string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(configDir, "rbac", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("rbac manifests: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch u.GetKind() {
			case "ClusterRole", "ClusterRoleBinding":
				u.SetName(u.GetName() + "-" + ns)
			default:
				u.SetNamespace(ns)
			}
			if ref, ok, _ := unstructured.NestedString(u.Object, "roleRef", "kind"); ok && ref == "ClusterRole" {
				name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
				_ = unstructured.SetNestedField(u.Object, name+"-"+ns, "roleRef", "name")
			}
			if subs, ok, _ := unstructured.NestedSlice(u.Object, "subjects"); ok {
				for _, s := range subs {
					s.(map[string]any)["namespace"] = ns
				}
				_ = unstructured.SetNestedSlice(u.Object, subs, "subjects")
			}
			if err := c.Create(t.Context(), u); err != nil {
				t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// TestSeedOnTheStockController is the seed's "must fail": the report's
// sequence on the stock v4.1.4 controller alone. Argo's Pod cleanup removes
// its status finalizer from the aged, deleted Pod while the workflow
// workers are stopped, the Pod is gone, and once they are back the node is
// "Error: pod deleted" although the Pod succeeded and its executor reported
// the output.
func TestSeedOnTheStockController(t *testing.T) {
	w := newWorld(t, false)
	res, err := argo.Seed(t.Context(), w.c, w.ctl, w.ns, "status-capture-repro", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if !res.GoneWhileStopped {
		t.Errorf("the Pod was not gone while the workers were stopped (held by %v); the seed did not reproduce", res.HeldBy)
	}
	if diff := cmp.Diff(argo.Node{Phase: argo.NodeError, Message: argo.MessagePodDeleted}, argo.Node{Phase: res.Node.Phase, Message: res.Node.Message}); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
}

// TestSeedWithTheGuard: the same sequence with the guard installed. The
// Pod carries the guard's finalizer from its creation; Argo's cleanup
// removes only its own, the Pod stays Terminating; with the workers back
// the node is Succeeded with its output, and only then is the Pod released
// (Recorded) and gone.
func TestSeedWithTheGuard(t *testing.T) {
	w := newWorld(t, true)
	res, err := argo.Seed(t.Context(), w.c, w.ctl, w.ns, "status-capture-repro", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Pod.Finalizers, guard.Finalizer) || !slices.Contains(res.Pod.Finalizers, argo.FinalizerStatus) {
		t.Errorf("Pod created with finalizers %v, want both %s and %s", res.Pod.Finalizers, guard.Finalizer, argo.FinalizerStatus)
	}
	if res.GoneWhileStopped || !slices.Equal(res.HeldBy, []string{guard.Finalizer}) {
		t.Errorf("while the workers were stopped: gone %v, held by %v; want held by [%s] only", res.GoneWhileStopped, res.HeldBy, guard.Finalizer)
	}
	if diff := cmp.Diff(argo.Node{Phase: argo.NodeSucceeded, Result: argo.Output}, argo.Node{Phase: res.Node.Phase, Result: res.Node.Result}); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	if err := controlplane.WaitGone(t.Context(), w.c, &res.Pod, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReleases(t, w.guard, map[capture.Reason]int{capture.ReasonRecorded: 1})
}

func waitReleases(t *testing.T, g *argo.GuardRun, want map[capture.Reason]int) {
	t.Helper()
	var got map[capture.Reason]int
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "the guard's releases", func(context.Context) (bool, error) {
		got = g.Guard.Releaser().Stats().Releases
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Errorf("releases by reason (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// runningPod submits the seed's Workflow and plays the kubelet until its
// node is Running; then the workflow workers stop (the controller comes
// back with --workflow-workers=0), so that only the guard can move.
func runningPod(t *testing.T, w *world, name string) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	if err := w.c.Create(ctx, argo.Workflow(w.ns, name)); err != nil {
		t.Fatal(err)
	}
	pods, err := argo.WaitPods(ctx, w.c, w.ns, name, 1, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pod := &pods[0]
	if !slices.Contains(pod.Finalizers, guard.Finalizer) {
		t.Fatalf("Pod %s created without the guard's finalizer: %v", pod.Name, pod.Finalizers)
	}
	if err := argo.RunPod(ctx, w.c, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := argo.WaitNode(ctx, w.c, w.ns, name, pod.Annotations[argo.AnnotationNodeID], 90*time.Second, "Running", func(n argo.Node) bool { return n.Phase == argo.NodeRunning }); err != nil {
		t.Fatal(err)
	}
	if err := w.ctl.Restart(0); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestCancellationReleases: a Workflow shut down (argo stop/terminate set
// spec.shutdown) no longer needs results: a deleted Pod of it is released
// although its node was never recorded, with the workflow workers stopped.
func TestCancellationReleases(t *testing.T) {
	w := newWorld(t, true)
	pod := runningPod(t, w, "cancelled")
	if err := argo.SucceedPod(t.Context(), w.c, pod, argo.SeedAge); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	// Held: terminal, deleted, the Workflow active and not recorded.
	waitHeld(t, w, pod, capture.ReasonAwaitingOwner)
	wf := argo.Workflow(w.ns, "cancelled")
	if err := w.c.Patch(t.Context(), wf, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"shutdown":"Terminate"}}`))); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(t.Context(), w.c, pod, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReleases(t, w.guard, map[capture.Reason]int{capture.ReasonOwnerFinished: 1})
}

// TestStopKeepsResults: a Stop (spec.shutdown Stop) is a graceful end, not
// an abandonment: Argo v4.1.4 terminates only Pods still Pending or
// Running, skips those already finished, records their nodes from their
// results and runs the exit handler, which reads them. So a Succeeded,
// deleted Pod whose node is not recorded stays held while the workflow
// workers are stopped, and once they are back Argo records the node
// Succeeded with its output, and only then is the Pod released
// (Recorded).
func TestStopKeepsResults(t *testing.T) {
	w := newWorld(t, true)
	pod := runningPod(t, w, "stopped")
	if err := argo.ReportOutputs(t.Context(), w.c, pod, argo.Output); err != nil {
		t.Fatal(err)
	}
	if err := argo.SucceedPod(t.Context(), w.c, pod, argo.SeedAge); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, w, pod, capture.ReasonAwaitingOwner)
	wf := argo.Workflow(w.ns, "stopped")
	if err := w.c.Patch(t.Context(), wf, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"shutdown":"Stop"}}`))); err != nil {
		t.Fatal(err)
	}
	// Held after the Stop: the guard decides on the stopped Workflow (a
	// live read) and keeps the Pod.
	waitHeld(t, w, pod, capture.ReasonAwaitingOwner)
	if _, err := argo.WaitFinalizerOff(t.Context(), w.c, pod, argo.FinalizerStatus, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := w.ctl.Restart(argo.SeedWorkers); err != nil {
		t.Fatal(err)
	}
	n, err := argo.WaitNode(t.Context(), w.c, w.ns, "stopped", pod.Annotations[argo.AnnotationNodeID], 90*time.Second, "final", argo.Fulfilled)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(argo.Node{Phase: argo.NodeSucceeded, Result: argo.Output}, argo.Node{Phase: n.Phase, Result: n.Result}); diff != "" {
		t.Errorf("node after the Stop (-want +got):\n%s", diff)
	}
	if err := controlplane.WaitGone(t.Context(), w.c, pod, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReleases(t, w.guard, map[capture.Reason]int{capture.ReasonRecorded: 1})
}

// waitHeld waits until the guard has passed over pod and kept it for reason.
func waitHeld(t *testing.T, w *world, pod *corev1.Pod, reason capture.Reason) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "the guard to hold "+pod.Name, func(ctx context.Context) (bool, error) {
		var got corev1.Pod
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, err
		}
		d, _, err := w.guard.Guard.Releaser().Decide(ctx, &got)
		if err != nil {
			return false, err
		}
		return d.Reason == reason && got.DeletionTimestamp != nil && slices.Contains(got.Finalizers, guard.Finalizer), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowDeletionReleases: deleting the Workflow releases its running
// Pod, in the background (the garbage collector deletes the Pod once the
// Workflow is gone: OwnerGone) and in the foreground (the Workflow waits
// for its Pods: OwnerDeleting), with the workflow workers stopped.
func TestWorkflowDeletionReleases(t *testing.T) {
	for name, tc := range map[string]struct {
		policy metav1.DeletionPropagation
		reason capture.Reason
	}{
		"background": {metav1.DeletePropagationBackground, capture.ReasonOwnerGone},
		"foreground": {metav1.DeletePropagationForeground, capture.ReasonOwnerDeleting},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, true)
			pod := runningPod(t, w, "deleted")
			if err := w.c.Delete(t.Context(), argo.Workflow(w.ns, "deleted"), client.PropagationPolicy(tc.policy)); err != nil {
				t.Fatal(err)
			}
			// The guard's finalizer goes; Argo's own, on this Running Pod,
			// waits out Argo's two minutes after the last transition.
			if _, err := argo.WaitFinalizerOff(t.Context(), w.c, pod, guard.Finalizer, 90*time.Second); err != nil {
				t.Fatal(err)
			}
			waitReleases(t, w.guard, map[capture.Reason]int{tc.reason: 1})
		})
	}
}

// TestOrphanReleases: a Pod whose Workflow owner reference is gone (taken
// off, as the garbage collector does when its Workflow is deleted with
// orphan propagation) is released without being deleted, while its
// Workflow is still active.
func TestOrphanReleases(t *testing.T) {
	w := newWorld(t, true)
	pod := runningPod(t, w, "orphaned")
	if err := w.c.Patch(t.Context(), pod, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"ownerReferences":null}}`))); err != nil {
		t.Fatal(err)
	}
	if _, err := argo.WaitFinalizerOff(t.Context(), w.c, pod, guard.Finalizer, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatalf("the orphaned Pod must stay (only its finalizer goes): %v", err)
	}
	if len(got.OwnerReferences) != 0 || got.DeletionTimestamp != nil {
		t.Errorf("orphaned Pod: owner references %v, deletion %v; want none and not deleted", got.OwnerReferences, got.DeletionTimestamp)
	}
	waitReleases(t, w.guard, map[capture.Reason]int{capture.ReasonOrphan: 1})
}

// TestCheckPolicy: the guard refuses to start while new Pods would go
// unprotected: no policy, a policy that fails open, or one that adds
// another finalizer; an installed and bound policy passes.
func TestCheckPolicy(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ctx := t.Context()
	ns := testenv.Namespace(t, c)
	put := func(ctx context.Context, mod func(*admissionv1.MutatingAdmissionPolicy)) {
		t.Helper()
		p := guard.Policy()
		if err := c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := controlplane.WaitGone(ctx, c, p, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if mod == nil {
			return
		}
		p = guard.Policy()
		mod(p)
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever this test leaves, the next test finds the real policy.
	t.Cleanup(func() { put(context.WithoutCancel(ctx), func(*admissionv1.MutatingAdmissionPolicy) {}) })
	for _, tc := range []struct {
		name    string
		mod     func(*admissionv1.MutatingAdmissionPolicy)
		wantErr string
	}{
		{"missing", nil, "is not installed"},
		{"fails open", func(p *admissionv1.MutatingAdmissionPolicy) { p.Spec.FailurePolicy = ptr.To(admissionv1.Ignore) }, "failurePolicy Ignore"},
		{"another finalizer", func(p *admissionv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{metadata: Object.metadata{finalizers: ["example.com/other"]}}`
		}, "does not add the finalizer"},
		{"marks without a heartbeat", func(p *admissionv1.MutatingAdmissionPolicy) {
			p.Spec.ParamKind = nil
			p.Spec.Variables = nil
			p.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{metadata: Object.metadata{finalizers: ["` + guard.Finalizer + `"]}}`
		}, "does not read the guard's heartbeat"},
	} {
		put(ctx, tc.mod)
		if err := guard.CheckPolicy(ctx, c, ns); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: CheckPolicy = %v, want an error containing %q", tc.name, err, tc.wantErr)
		}
	}
	put(ctx, func(*admissionv1.MutatingAdmissionPolicy) {})
	only := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	elsewhere := guard.Binding(guard.PolicyName+"-"+ns+"-elsewhere", only, "elsewhere")
	if err := c.Create(ctx, elsewhere); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.WithoutCancel(ctx), elsewhere) })
	if err := guard.CheckPolicy(ctx, c, ns); err == nil || !strings.Contains(err.Error(), "paramRef {name: "+guard.HeartbeatName+", namespace: "+ns) {
		t.Errorf("bound to another namespace's heartbeat: CheckPolicy = %v, want an error naming the paramRef it needs", err)
	}
	if err := c.Create(ctx, guard.Binding(guard.PolicyName+"-"+ns, only, ns)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := guard.CheckPolicy(ctx, c, ns); err != nil {
		t.Errorf("installed and bound: CheckPolicy = %v", err)
	}
}

// TestPolicyPlacesOnlyWhatTheGuardSees: the policy adds the finalizer to a
// Pod the guard command caches and can release (an argoproj.io Workflow
// owns it and it carries Argo's workflow label), and to no other: a Pod it
// marked but never saw would stay Terminating for ever, unreported.
func TestPolicyPlacesOnlyWhatTheGuardSees(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ctx := t.Context()
	ns := testenv.Namespace(t, c)
	if err := argo.InstallPolicy(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	owner := []metav1.OwnerReference{{APIVersion: argo.WorkflowGVK.GroupVersion().String(), Kind: argo.WorkflowGVK.Kind, Name: "wf", UID: "wf-uid"}}
	other := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "wf", UID: "job-uid"}}
	label := map[string]string{guard.LabelWorkflow: "wf"}
	for name, tc := range map[string]struct {
		labels map[string]string
		owners []metav1.OwnerReference
		want   bool
	}{
		"workflow Pod":             {labels: label, owners: owner, want: true},
		"owned, without the label": {owners: owner},
		"labelled, owned by a Job": {labels: label, owners: other},
		"labelled, without owner":  {labels: label},
		"neither label nor owner":  {},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "match-", Labels: tc.labels, OwnerReferences: tc.owners},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.37"}}},
		}
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			t.Fatalf("%s: dry-run create: %v", name, err)
		}
		if diff := cmp.Diff(tc.want, slices.Contains(pod.Finalizers, guard.Finalizer)); diff != "" {
			t.Errorf("%s: finalizers %v: the guard's finalizer placed (-want +got):\n%s", name, pod.Finalizers, diff)
		}
	}
}
