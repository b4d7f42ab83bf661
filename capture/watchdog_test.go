package capture_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/watchdog"
)

var _ capture.Watchdog = (*watchdog.Watchdog)(nil)

// TestWatchdogSeesHeldCapture: with the G1 watchdog wired in, a child
// deleted before it finished, under an active owner, shows as a pending
// deletion that becomes blocked once the clock passes the watchdog's
// threshold, is still not released, and leaves the watchdog's list when its
// result is persisted and it is released.
func TestWatchdogSeesHeldCapture(t *testing.T) {
	c, ns := env(t)
	clk := clocktesting.NewFakeClock(time.Now())
	wd := watchdog.New(watchdog.Options{Clock: clk, Threshold: time.Minute, Scheme: scheme()})
	st := startStack(t, ns, stackOptions{clock: clk, watchdog: wd})
	_, pods := launch(t, c, ns, "owner", 1, captureFin)
	pod := pods[0]
	deletePod(t, c, pod)
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "first held attempt", func(context.Context) (bool, error) {
		return st.watchdog.heldCount(pod.Name) > 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Minute)
	before := st.watchdog.heldCount(pod.Name)
	touch(t, c, pod)
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "held attempt after the clock moved", func(context.Context) (bool, error) {
		return st.watchdog.heldCount(pod.Name) > before, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := wd.Pending()
	want := []watchdog.Deletion{{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID, Finalizer: captureFin, Blocked: true}}
	opts := cmpopts.IgnoreFields(watchdog.Deletion{}, "Since", "Age", "Attempts", "AttemptsByClass", "LastClass", "LastError", "LastAttempt", "LastFailed")
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("watchdog pending (-want +got):\n%s", diff)
	}
	if len(st.rel.Stats().Releases) != 0 {
		t.Errorf("releases = %v, want none while the owner is active and the child unfinished", st.rel.Stats().Releases)
	}

	succeed(t, c, pod, successfulWords)
	waitGone(t, c, pod)
	// Done follows the finalizer removal in the same pass.
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "watchdog to see the release", func(context.Context) (bool, error) {
		return len(wd.Pending()) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v; pending: %+v", err, wd.Pending())
	}
}
