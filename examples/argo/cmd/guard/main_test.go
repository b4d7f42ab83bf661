package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/watchdog"
)

// asGuard makes the test binary act as the guard binary, so the test runs
// the real main against a kubeconfig without a separate build.
const asGuard = "FINALE_TEST_RUN_GUARD"

func TestMain(m *testing.M) {
	if os.Getenv(asGuard) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{os.Args[0]}, os.Args[i+1:]...)
				break
			}
		}
		main()
		return
	}
	testenv.Main(m)
}

func guardCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--", "--kubeconfig", testenv.ControlPlane(t).Kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	cmd.Env = append(os.Environ(), asGuard+"=1")
	return cmd
}

// The guard binary refuses to start without its admission policy (new Pods
// would go unprotected), and with it releases a workflow Pod by the rule:
// here its Workflow finished.
func TestGuardBinary(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	if err := argo.Install(ctx, c, ns); err != nil {
		t.Fatal(err)
	}

	var stderr bytes.Buffer
	refused := guardCmd(t, "--namespace", ns)
	refused.Stderr = &stderr
	if err := refused.Run(); err == nil || !strings.Contains(stderr.String(), "is not installed") {
		t.Fatalf("without the policy: err %v, stderr %q; want a refusal naming the missing policy", err, stderr.String())
	}

	if err := argo.InstallPolicy(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	cmd := guardCmd(t, "--namespace", ns)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})

	// The binary renews its heartbeat, a finalizer holder Lease, in its
	// namespace (--namespace here: no $POD_NAMESPACE out of a cluster).
	err := controlplane.WaitFor(ctx, 60*time.Second, "the guard's heartbeat Lease", func(ctx context.Context) (bool, error) {
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: guard.HeartbeatName}, &l); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "install" && slices.Equal(watchdog.HeldFinalizers(&l), []string{guard.Finalizer}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wf := argo.Workflow(ns, "wf")
	if err := c.Create(ctx, wf); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wf", Labels: map[string]string{argo.LabelWorkflow: "wf"},
			Annotations:     map[string]string{argo.AnnotationNodeID: "wf"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(wf, argo.WorkflowGVK)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.37"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pod.Finalizers, guard.Finalizer) {
		t.Fatalf("Pod created with finalizers %v, want %s from the policy", pod.Finalizers, guard.Finalizer)
	}
	// The Workflow finishes: it no longer needs the Pod's result.
	if err := c.Patch(ctx, wf, client.RawPatch("application/merge-patch+json", []byte(`{"status":{"phase":"Succeeded"}}`))); err != nil {
		t.Fatal(err)
	}
	if _, err := argo.WaitFinalizerOff(ctx, c, pod, guard.Finalizer, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited = true
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("guard exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("guard did not exit within 30 s of SIGTERM")
	}
}

// TestUninstall: with the guard down, a namespace whose Workflows' Pods
// carry its finalizer hangs in deletion. (kube-controller-manager 1.37
// deletes Pods first and, while any remain, reports neither
// NamespaceContentRemaining nor NamespaceFinalizersRemaining: the
// namespace's conditions say all content is removed. finale audit names
// the Pods and the guard's expired Lease.) guard uninstall deletes the policy, its bindings
// and the heartbeat, waits until new workflow Pods go unmarked, and removes
// the finalizer from every Pod, printing the counts; Argo's own finalizer
// stays where it was, and the namespace deletion then completes.
func TestUninstall(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	ns, guardNS := testenv.Namespace(t, c), testenv.Namespace(t, c)
	if err := argo.Install(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	// The guard's namespace is not the workload's: it holds the heartbeat
	// and takes uninstall's dry-run probe, which a terminating namespace
	// would refuse.
	if err := c.Create(ctx, guard.Policy()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	both := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{ns, guardNS}}}}
	if err := c.Create(ctx, guard.Binding(guard.PolicyName+"-"+ns, both, guardNS)); err != nil {
		t.Fatal(err)
	}
	hb, err := guard.NewHeartbeat(c, c, guard.HeartbeatOptions{Namespace: guardNS, Identity: "a guard now down"})
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := argo.WaitMarked(ctx, c, ns, true, 60*time.Second); err != nil {
		t.Fatal(err)
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
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"done", "running"} {
		if err := c.Create(ctx, argo.Workflow(ns, name)); err != nil {
			t.Fatal(err)
		}
		got, err := argo.WaitPods(ctx, c, ns, name, 1, 90*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p := &got[0]
		if !slices.Contains(p.Finalizers, guard.Finalizer) || !slices.Contains(p.Finalizers, argo.FinalizerStatus) {
			t.Fatalf("Pod %s created with finalizers %v, want %s and %s", p.Name, p.Finalizers, guard.Finalizer, argo.FinalizerStatus)
		}
		if err := argo.RunPod(ctx, c, p); err != nil {
			t.Fatal(err)
		}
		pods[name] = p
	}
	// "done" succeeded long ago, so Argo's cleanup drops its own
	// finalizer as soon as it is deleted; "running" keeps Argo's (two
	// minutes after its last transition).
	if err := argo.SucceedPod(ctx, c, pods["done"], argo.SeedAge); err != nil {
		t.Fatal(err)
	}

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.Delete(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	if _, err := argo.WaitFinalizerOff(ctx, c, pods["done"], argo.FinalizerStatus, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	// Held by the guard's finalizer alone, and the namespace with it.
	var done corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pods["done"]), &done); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{guard.Finalizer}, done.Finalizers); diff != "" || done.DeletionTimestamp == nil {
		t.Fatalf("Pod done: deleting %v, finalizers (-want +got):\n%s", done.DeletionTimestamp, diff)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(nsObj), nsObj); err != nil || nsObj.DeletionTimestamp == nil {
		t.Fatalf("namespace %s: %v, deleting %v; want it Terminating", ns, err, nsObj.DeletionTimestamp)
	}

	marked := markedPods(t, c)
	var stdout bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "uninstall", "--kubeconfig", testenv.ControlPlane(t).Kubeconfig, "--namespace", guardNS)
	cmd.Env = append(os.Environ(), asGuard+"=1")
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("guard uninstall: %v\n%s", err, stdout.String())
	}
	t.Logf("guard uninstall:\n%s", stdout.String())
	for _, want := range []string{
		"deleted MutatingAdmissionPolicyBinding " + guard.PolicyName + "-" + ns,
		"deleted MutatingAdmissionPolicy " + guard.PolicyName,
		"deleted Lease " + guardNS + "/" + guard.HeartbeatName,
		fmt.Sprintf("removed %s from %d Pods (%d of them being deleted)", guard.Finalizer, len(marked), 2),
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("guard uninstall printed no %q", want)
		}
	}
	if left := markedPods(t, c); len(left) > 0 {
		t.Errorf("after uninstall, Pods with %s: %v", guard.Finalizer, left)
	}
	var running corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pods["running"]), &running); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{argo.FinalizerStatus}, running.Finalizers); diff != "" {
		t.Errorf("the running Pod's finalizers after uninstall (-want +got):\n%s", diff)
	}
	if m, err := argo.Marked(ctx, c, guardNS); err != nil || m {
		t.Errorf("after uninstall a new workflow Pod is marked: %v, %v", m, err)
	}
	// Argo lets its own go once the Pod is old enough; then nothing holds
	// the namespace.
	if err := argo.SucceedPod(ctx, c, &running, argo.SeedAge); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(ctx, c, nsObj, 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

// markedPods lists every Pod in the cluster that carries the guard's
// finalizer, as namespace/name.
func markedPods(t *testing.T, c client.Client) []string {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(t.Context(), &pods); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if slices.Contains(p.Finalizers, guard.Finalizer) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// TestExitCodes: the guard exits with finale's table (internal/exitcode):
// a wrong command line is 64 (flag.CommandLine would have exited 2,
// finale's "violation found"), help 0; none of these connects anywhere.
func TestExitCodes(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want int
	}{
		"help":            {[]string{"-h"}, exitcode.OK},
		"uninstall help":  {[]string{"uninstall", "-h"}, exitcode.OK},
		"unknown flag":    {[]string{"--no-such-flag"}, exitcode.Usage},
		"bad value":       {[]string{"--workers", "many"}, exitcode.Usage},
		"extra argument":  {[]string{"now"}, exitcode.Usage},
		"uninstall extra": {[]string{"uninstall", "now"}, exitcode.Usage},
		"uninstall flag":  {[]string{"uninstall", "--no-such-flag"}, exitcode.Usage},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], append([]string{"-test.run=^$", "--"}, tc.args...)...)
			cmd.Env = append(os.Environ(), asGuard+"=1")
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("guard %q exits %d, want %d:\n%s", tc.args, code, tc.want, out)
			}
		})
	}
}
