package capture_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/capture"
)

// The owner's controller places the finalizer on each child it creates.
func ExamplePlace() {
	pod := &corev1.Pod{}
	capture.Place(pod, capture.DefaultFinalizer)
	fmt.Println(pod.Finalizers)
	// Output: [capture.finale.dev/result]
}

// The release rule on its own: an active owner that has not recorded the
// result of a child that finished and is being deleted: persist, then
// release. Nothing in the rule is a time.
func ExampleRule() {
	d := capture.Rule(capture.Facts{
		HasOwnerRef: true, OwnerFound: true, OwnerUIDMatches: true,
		ChildTerminal: true, ChildDeleting: true,
	})
	fmt.Println(d.Action, d.Reason)
	// Output: Persist Persisted
}

// Wiring the release controller for Pods owned by a Job kind whose status
// holds results keyed by Pod UID. It runs on the manager independently of
// the Job controller's workers.
func ExampleReleaser_SetupWithManager() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme()})
	if err != nil {
		panic(err)
	}
	rel, err := capture.New(mgr.GetAPIReader(), mgr.GetClient(), capture.Options[*Job]{
		Name:      "job-capture",
		OwnerKind: jobKind,
		NewOwner:  func() *Job { return &Job{} },
		Results: capture.ResultReaderFn[*Job](func(j *Job, child types.UID) bool {
			_, ok := j.Status.Results[string(child)]
			return ok
		}),
		Writer: capture.ResultWriterFn[*Job](func(j *Job, child client.Object) error {
			res, err := capture.PodResultOf(child)
			if err != nil {
				return err
			}
			if j.Status.Results == nil {
				j.Status.Results = map[string]Result{}
			}
			j.Status.Results[string(child.GetUID())] = Result{Phase: string(res.Phase), By: "capture"}
			return nil
		}),
		Completion: capture.CompletionFn[*Job](func(j *Job) bool { return j.Spec.Cancel }),
		Clock:      clock.RealClock{},
		// Events: the manager's recorder (mgr.GetEventRecorder("job-capture")
		// with controller-runtime v0.23 or later); nil sends none.
	})
	if err != nil {
		panic(err)
	}
	if err := rel.SetupWithManager(mgr); err != nil {
		panic(err)
	}
}
