package watchdog_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/watchdog"
)

// A finalizer whose cleanup keeps timing out: the first failure past the
// threshold emits one Warning, later retries emit nothing, the success that
// follows emits one Normal. In a controller, Recorder is
// mgr.GetEventRecorder("my-controller") and Conditions is
// watchdog.StatusConditions{Reader: mgr.GetAPIReader(), Status: mgr.GetClient()}.
func Example() {
	deleted := time.Date(2026, 5, 21, 11, 14, 55, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(deleted.Add(2 * time.Minute))
	w := watchdog.New(watchdog.Options{
		Clock:     clk,
		Threshold: 5 * time.Minute,
		Recorder: watchdog.RecorderFn(func(_, _ runtime.Object, eventtype, reason, _, note string, args ...interface{}) {
			fmt.Printf("%s %s: %s\n", eventtype, reason, fmt.Sprintf(note, args...))
		}),
	})

	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("example.finale.dev/v1")
	obj.SetKind("WorkerDeployment")
	obj.SetNamespace("review")
	obj.SetName("worker")
	obj.SetUID("6d1f")
	obj.SetDeletionTimestamp(&metav1.Time{Time: deleted})
	const finalizer = "example.finale.dev/cleanup"
	ctx := context.Background()

	for range 3 {
		w.Attempt(ctx, obj, finalizer, context.DeadlineExceeded)
		clk.SetTime(clk.Now().Add(2 * time.Minute))
	}
	d := w.Pending()[0]
	fmt.Println(d.Finalizer, d.Age, d.Attempts, d.LastClass, d.Blocked)
	w.Attempt(ctx, obj, finalizer, nil)
	w.Done(ctx, obj, finalizer)
	fmt.Println(len(w.Pending()), "pending")
	// Output:
	// Warning CleanupBlocked: finalizer example.finale.dev/cleanup has held the deletion for 6m0s: 3 cleanup attempts, last error class Transport
	// example.finale.dev/cleanup 8m0s 3 Transport true
	// Normal CleanupRecovered: finalizer example.finale.dev/cleanup is no longer blocked after 8m0s and 4 cleanup attempts
	// 0 pending
}
