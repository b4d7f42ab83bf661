package guard_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/examples/argo/guard"
)

// A Workflow has recorded a Pod's node once the node's phase is final; the
// Pod is found by its node-id annotation.
func ExampleRecorded() {
	wf := guard.NewWorkflow()
	wf.Object["status"] = map[string]any{"nodes": map[string]any{
		"repro-1": map[string]any{"id": "repro-1", "phase": "Running"},
	}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{guard.AnnotationNodeID: "repro-1"}}}
	fmt.Println(guard.Recorded(wf, pod))
	wf.Object["status"].(map[string]any)["nodes"].(map[string]any)["repro-1"].(map[string]any)["phase"] = "Succeeded"
	fmt.Println(guard.Recorded(wf, pod))
	// Output:
	// false
	// true
}

// The guard as its command runs it: live reads for the rule, the manager's
// client for the finalizer patch.
func ExampleNew() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	g, err := guard.New(mgr.GetAPIReader(), mgr.GetClient(), guard.Options{Events: mgr.GetEventRecorder("argo-guard")})
	if err != nil {
		panic(err)
	}
	if err := g.SetupWithManager(mgr); err != nil {
		panic(err)
	}
}
