package main

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/testenv"
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
	refused := guardCmd(t)
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
