package capture_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSeed reproduces the seed step by step. The owner's workers are stopped,
// the child succeeds, the clock moves far past upstream's two-minute timer and
// the child is deleted. The capture-finalized child goes only after its result
// is on the owner; the naive timer-released child goes without it. When the
// owner's workers return, the first owner records success with the child's
// output and the second records "Error: pod deleted".
func TestSeed(t *testing.T) {
	c, ns := env(t)
	clk := clocktesting.NewFakeClock(time.Now())
	st := startStack(t, ns, stackOptions{ownerOpen: true, clock: clk, naive: true})

	safe, safePods := launch(t, c, ns, "safe", 2, captureFin)
	naive, naivePods := launch(t, c, ns, "naive", 1, naiveFin)
	done, held := safePods[0], safePods[1]
	// The owner's workers have seen everything running; now they stop.
	waitJobPhase(t, c, safe, phaseRunning)
	st.gate.Close(t)

	succeed(t, c, done, successfulWords)
	succeed(t, c, naivePods[0], successfulWords)
	clk.Step(10 * time.Minute)
	deletePod(t, c, done)
	deletePod(t, c, naivePods[0])
	// held is deleted while still running: nothing to persist, the owner is
	// active, so it must stay, however long it waits.
	deletePod(t, c, held)

	waitGone(t, c, done, naivePods[0])

	got := getJob(t, c, safe)
	want := Result{Phase: string(corev1.PodSucceeded), ExitCode: 0, Message: successfulWords, By: byCapture}
	if diff := cmp.Diff(want, got.Status.Results[string(done.UID)]); diff != "" {
		t.Errorf("persisted result of %s (-want +got):\n%s", done.Name, diff)
	}
	ops, _, _ := st.writes.snapshot()
	persistAt, releaseAt := indexOf(ops, "status safe"), indexOf(ops, "patch "+done.Name)
	if persistAt < 0 || releaseAt < 0 || persistAt > releaseAt {
		t.Errorf("release path writes %q: want the owner status write before the finalizer removal", ops)
	}
	if _, ok := getJob(t, c, naive).Status.Results[string(naivePods[0].UID)]; ok {
		t.Errorf("naive release: a result for %s was recorded, want it lost (the seed's failure)", naivePods[0].Name)
	}

	// Time drives visibility only: the held child is overdue, warned once,
	// and still there.
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "pending warning", func(context.Context) (bool, error) {
		return st.events.count(corev1.EventTypeWarning+" "+capture.EventReasonPending+" "+held.Name) == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Further passes over the held child, an hour later still, must neither
	// warn again nor release.
	before := st.watchdog.heldCount(held.Name)
	clk.Step(time.Hour)
	touch(t, c, held)
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "another pass over the held child", func(ctx context.Context) (bool, error) {
		return st.watchdog.heldCount(held.Name) > before, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var still corev1.Pod
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(held), &still); err != nil || !controllerutil.ContainsFinalizer(&still, captureFin) {
		t.Fatalf("held child: want it present with its finalizer after the clock passed every threshold, got err=%v finalizers=%v", err, still.Finalizers)
	}
	if n := st.events.count(corev1.EventTypeWarning + " " + capture.EventReasonPending + " " + held.Name); n != 1 {
		t.Errorf("pending warnings for %s = %d, want 1", held.Name, n)
	}

	// The held child finishes: now its result is persisted and it goes.
	succeed(t, c, held, "late")
	waitGone(t, c, held)

	// The owner's workers return.
	st.gate.Open()
	gotSafe := waitJobPhase(t, c, safe, phaseSucceeded)
	if diff := cmp.Diff(Node{PodName: done.Name, PodUID: string(done.UID), Phase: phaseSucceeded, Message: successfulWords}, gotSafe.Status.Nodes[done.Name]); diff != "" {
		t.Errorf("owner's node for the captured child (-want +got):\n%s", diff)
	}
	gotNaive := waitJobPhase(t, c, naive, phaseFailed)
	if diff := cmp.Diff(Node{PodName: naivePods[0].Name, PodUID: string(naivePods[0].UID), Phase: phaseError, Message: msgPodDeleted}, gotNaive.Status.Nodes[naivePods[0].Name]); diff != "" {
		t.Errorf("owner's node for the naive child (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[capture.Reason]int{capture.ReasonPersisted: 2}, st.rel.Stats().Releases); diff != "" {
		t.Errorf("releases by reason (-want +got):\n%s", diff)
	}
}

// touch changes a label, so that every controller looks at obj again.
func touch(t testing.TB, c client.Client, pod *corev1.Pod) {
	t.Helper()
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"touched":"`+time.Now().Format("150405.000000")+`"}}}`))
	if err := c.Patch(t.Context(), pod.DeepCopy(), patch); err != nil {
		t.Fatalf("touch %s: %v", pod.Name, err)
	}
}

// TestOwnerDeleted: deleting the owner, in the background or in the
// foreground, releases its children (the garbage collector deletes them) and
// they go, while the owner's workers are stopped.
func TestOwnerDeleted(t *testing.T) {
	for name, tc := range map[string]struct {
		policy metav1.DeletionPropagation
		reason capture.Reason
	}{
		"background": {policy: metav1.DeletePropagationBackground, reason: capture.ReasonOwnerGone},
		"foreground": {policy: metav1.DeletePropagationForeground, reason: capture.ReasonOwnerDeleting},
	} {
		t.Run(name, func(t *testing.T) {
			c, ns := env(t)
			st := startStack(t, ns, stackOptions{})
			job, pods := launch(t, c, ns, "owner", 3, captureFin)
			succeed(t, c, pods[0], successfulWords)
			if err := c.Delete(t.Context(), job, client.PropagationPolicy(tc.policy)); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods {
				waitGone(t, c, p)
			}
			waitGone(t, c, job)
			if diff := cmp.Diff(map[capture.Reason]int{tc.reason: 3}, st.rel.Stats().Releases); diff != "" {
				t.Errorf("releases by reason (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOwnerFinished: an owner that is cancelled, or finished, no longer needs
// results: its children lose the finalizer without being deleted, then go
// as soon as they are deleted.
func TestOwnerFinished(t *testing.T) {
	for name, finish := range map[string]func(*Job){
		"cancelled": func(j *Job) { j.Spec.Cancel = true },
		"finished":  func(j *Job) { j.Status.Phase = phaseSucceeded },
	} {
		t.Run(name, func(t *testing.T) {
			c, ns := env(t)
			st := startStack(t, ns, stackOptions{})
			job, pods := launch(t, c, ns, "owner", 2, captureFin)
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				j := getJob(t, c, job)
				finish(j)
				if j.Spec.Cancel {
					return c.Update(t.Context(), j)
				}
				return c.Status().Update(t.Context(), j)
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods {
				waitFinalizerGone(t, c, p, captureFin)
				deletePod(t, c, p)
			}
			waitGone(t, c, pods[0], pods[1])
			if diff := cmp.Diff(map[capture.Reason]int{capture.ReasonOwnerFinished: 2}, st.rel.Stats().Releases); diff != "" {
				t.Errorf("releases by reason (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOrphan: a child without an owner reference of the owner kind is
// released: created without one, or with its owner reference removed.
func TestOrphan(t *testing.T) {
	for name, orphan := range map[string]func(t *testing.T, c client.Client, ns string) *corev1.Pod{
		"created without owner": func(t *testing.T, c client.Client, ns string) *corev1.Pod {
			pod := newPod(ns, "lonely", captureFin)
			if err := c.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			return pod
		},
		"owner reference removed": func(t *testing.T, c client.Client, ns string) *corev1.Pod {
			_, pods := launch(t, c, ns, "owner", 1, captureFin)
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"ownerReferences":null}}`))
			if err := c.Patch(t.Context(), pods[0], patch); err != nil {
				t.Fatal(err)
			}
			return pods[0]
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, ns := env(t)
			st := startStack(t, ns, stackOptions{})
			pod := orphan(t, c, ns)
			waitFinalizerGone(t, c, pod, captureFin)
			deletePod(t, c, pod)
			waitGone(t, c, pod)
			if diff := cmp.Diff(map[capture.Reason]int{capture.ReasonOrphan: 1}, st.rel.Stats().Releases); diff != "" {
				t.Errorf("releases by reason (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRestart: the operator stops between the child's success and its
// deletion (or crashes between persisting and releasing); the next operator
// process loses nothing.
func TestRestart(t *testing.T) {
	for name, tc := range map[string]struct {
		// crashAfterPersist: the first process persists, then dies before
		// the finalizer removal.
		crashAfterPersist bool
		wantReason        capture.Reason
	}{
		"stopped before deletion": {wantReason: capture.ReasonPersisted},
		"crash after persist":     {crashAfterPersist: true, wantReason: capture.ReasonRecorded},
	} {
		t.Run(name, func(t *testing.T) {
			c, ns := env(t)
			first := startStack(t, ns, stackOptions{failChildPatch: tc.crashAfterPersist})
			job, pods := launch(t, c, ns, "owner", 1, captureFin)
			pod := pods[0]
			succeed(t, c, pod, successfulWords)
			if tc.crashAfterPersist {
				deletePod(t, c, pod)
				err := controlplane.WaitFor(t.Context(), 30*time.Second, "result persisted by the first process", func(ctx context.Context) (bool, error) {
					_, ok := getJob(t, c, job).Status.Results[string(pod.UID)]
					return ok, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				first.stop()
			} else {
				first.stop()
				deletePod(t, c, pod)
			}
			var got corev1.Pod
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), &got); err != nil || got.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(&got, captureFin) {
				t.Fatalf("between processes: want the child present, deleting, finalized; got err=%v deletion=%v finalizers=%v", err, got.DeletionTimestamp, got.Finalizers)
			}

			second := startStack(t, ns, stackOptions{})
			waitGone(t, c, pod)
			want := Result{Phase: string(corev1.PodSucceeded), Message: successfulWords, By: byCapture}
			if diff := cmp.Diff(want, getJob(t, c, job).Status.Results[string(pod.UID)]); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[capture.Reason]int{tc.wantReason: 1}, second.rel.Stats().Releases); diff != "" {
				t.Errorf("second process releases (-want +got):\n%s", diff)
			}
			second.gate.Open()
			got2 := waitJobPhase(t, c, job, phaseSucceeded)
			if m := got2.Status.Nodes[pod.Name].Message; m != successfulWords {
				t.Errorf("owner's node message = %q, want %q", m, successfulWords)
			}
		})
	}
}

// TestManyChildren: 200 children finish and are deleted at once while the
// owner's workers are stopped. Every result is persisted on the one owner,
// none is lost, and every conflict on the owner's status was retried.
func TestManyChildren(t *testing.T) {
	const n = 200
	c, ns := env(t)
	st := startStack(t, ns, stackOptions{workers: 4})
	job, pods := launch(t, c, ns, "wide", n, captureFin)
	t.Logf("launched %d children", n)
	for _, p := range pods {
		succeed(t, c, p, "out-"+p.Name)
	}
	t.Logf("all %d succeeded", n)
	start := time.Now()
	if err := c.DeleteAllOf(t.Context(), &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels{jobLabel: job.Name}); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(t.Context(), 3*time.Minute, "all children gone", func(ctx context.Context) (bool, error) {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{jobLabel: job.Name}); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("all %d released and gone %s after the delete", n, time.Since(start).Round(time.Millisecond))
	got := getJob(t, c, job)
	lost := 0
	for _, p := range pods {
		want := Result{Phase: string(corev1.PodSucceeded), Message: "out-" + p.Name, By: byCapture}
		if diff := cmp.Diff(want, got.Status.Results[string(p.UID)]); diff != "" {
			lost++
			if lost < 5 {
				t.Errorf("result of %s (-want +got):\n%s", p.Name, diff)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d results lost", lost, n)
	}
	stats := st.rel.Stats()
	_, writes, conflicts := st.writes.snapshot()
	t.Logf("%d children: %d API writes by the release path (%.2f per child), %d conflicts on the owner's status, all retried; %d Release errors retried by the reconciler",
		n, writes, float64(writes)/n, conflicts, stats.Errors)
	if diff := cmp.Diff(map[capture.Reason]int{capture.ReasonPersisted: n}, stats.Releases); diff != "" {
		t.Errorf("releases by reason (-want +got):\n%s", diff)
	}
	if stats.Persisted != n {
		t.Errorf("persisted = %d, want %d (each exactly once)", stats.Persisted, n)
	}
	// Every conflict the apiserver returned was seen and retried by the
	// Releaser: the counts at the client and in the Releaser agree.
	if stats.Conflicts != conflicts {
		t.Errorf("conflicts retried by the Releaser = %d, conflicts returned by the apiserver = %d; want equal", stats.Conflicts, conflicts)
	}
	st.gate.Open()
	waitJobPhase(t, c, job, phaseSucceeded)
}

// TestBadWriterKeepsFinalizer: a ResultWriter that does not make the result
// recorded (adapters that disagree about where results live) is an error
// with an actionable message and a Warning Event, never a release.
func TestBadWriterKeepsFinalizer(t *testing.T) {
	c, ns := env(t)
	forgetful := capture.ResultWriterFn[*Job](func(*Job, client.Object) error { return nil })
	st := startStack(t, ns, stackOptions{writer: forgetful})
	_, pods := launch(t, c, ns, "owner", 1, captureFin)
	pod := pods[0]
	succeed(t, c, pod, successfulWords)
	deletePod(t, c, pod)
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "persist failure reported", func(context.Context) (bool, error) {
		return st.events.count(corev1.EventTypeWarning+" "+capture.EventReasonPersistFailed+" "+pod.Name) > 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), &got); err != nil || !controllerutil.ContainsFinalizer(&got, captureFin) {
		t.Fatalf("want the child present with its finalizer, got err=%v finalizers=%v", err, got.Finalizers)
	}
	if s := st.rel.Stats(); s.Errors == 0 || len(s.Releases) != 0 {
		t.Errorf("stats = %+v, want errors and no release", s)
	}
	// A direct call reports the sentinel, so the cause is actionable.
	if _, err := st.rel.Release(t.Context(), &got); !errors.Is(err, capture.ErrNotRecordedAfterPersist) {
		t.Errorf("Release error = %v, want ErrNotRecordedAfterPersist", err)
	}
	// Unstick it the way an operator would after fixing the adapters:
	// cancel the owner. The rule then releases it.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))
	if err := c.Patch(t.Context(), &Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}, patch); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, pod)
}
