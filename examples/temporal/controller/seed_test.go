package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.temporal.io/api/serviceerror"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
	"github.com/finale-dev/finale/examples/temporal/controller"
	"github.com/finale-dev/finale/examples/temporal/stack"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/watchdog"
)

func TestMain(m *testing.M) {
	// The operator's own log (errors made on purpose by the faults) would
	// bury the tests' output; conditions, Events and the watchdog say what
	// matters.
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m)
}

// start runs one build of the operator on the package's control plane and
// Temporal server until the test ends. Tests that start one do not run in
// parallel: each operator watches every namespace.
func start(t *testing.T, naive bool) *stack.Stack {
	t.Helper()
	ts := testenv.Temporal(t)
	s, err := stack.Start(t.Context(), stack.Options{
		Config: testenv.ControlPlane(t).Config, HostPort: ts.HostPort, Namespace: ts.Namespace, Naive: naive,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitCond(t *testing.T, s *stack.Stack, w *v1alpha1.WorkerDeployment, typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	c, err := s.WaitCondition(t.Context(), w, typ, st, reason)
	must(t, err)
	return c
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	must(t, controlplane.WaitFor(t.Context(), stack.DefaultWait, what, func(context.Context) (bool, error) { return cond(), nil }))
}

// ready runs the seed's steps 1 and 2 in a fresh namespace: the Connection
// exists before its Secret (reconciles fail with a clear condition, nothing
// is dialled or cached), then the Secret appears (one client is dialled
// and cached, the server-side deployment is created and claimed).
func ready(t *testing.T, s *stack.Stack) *v1alpha1.WorkerDeployment {
	t.Helper()
	ctx := t.Context()
	dials, cached := s.Op.Dials(), s.Op.Pool.Len()
	ns, err := s.Namespace(ctx, "g1-")
	must(t, err)
	must(t, s.Connection(ctx, ns))
	w, err := s.WorkerDeployment(ctx, ns, "app")
	must(t, err)

	c := waitCond(t, s, w, lifecycle.ConditionSynced, metav1.ConditionFalse, controller.ReasonAPIKeyMissing)
	if want := "create Secret " + ns + "/" + stack.SecretName; !strings.Contains(c.Message, want) {
		t.Errorf("step 1: condition message %q does not say %q", c.Message, want)
	}
	if got := s.Op.Dials() - dials; got != 0 {
		t.Errorf("step 1: %d dials before the Secret exists, want 0", got)
	}
	if got := s.Op.Pool.Len() - cached; got != 0 {
		t.Errorf("step 1: %d clients cached before the Secret exists, want 0", got)
	}

	must(t, s.APIKeySecret(ctx, ns))
	waitCond(t, s, w, lifecycle.ConditionReady, metav1.ConditionTrue, lifecycle.ReasonAvailable)
	if got := s.Op.Dials() - dials; got != 1 {
		t.Errorf("step 2: %d dials, want 1", got)
	}
	if got := s.Op.Pool.Len() - cached; got != 1 {
		t.Errorf("step 2: %d clients cached, want 1", got)
	}
	d, err := s.Describe(ctx, w.Spec.DeploymentName)
	must(t, err)
	if got, want := d.Info.ManagerIdentity, stack.Tag(w); got != want {
		t.Errorf("step 2: the deployment's manager identity is %q, want the object's tag %q", got, want)
	}
	return w
}

// TestSeedDeletion is the seed's steps 1 to 4: the cached client is
// poisoned (a stall the SDK's keepalive cannot see) and the object is
// deleted. finale's pool evicts on the first timed-out call and the
// deletion finishes on the next attempt; the naive build is still stuck
// after ten minutes (a stepped clock stands for most of them), with the
// watchdog's CleanupBlocked condition and one Warning Event.
func TestSeedDeletion(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(map[bool]string{false: "finale", true: "naive"}[naive], func(t *testing.T) {
			ctx := t.Context()
			s := start(t, naive)
			w := ready(t, s)
			must(t, s.AddVersion(ctx, w.Spec.DeploymentName, "v1"))

			n, err := s.Poison()
			must(t, err)
			if n < 1 {
				t.Fatalf("step 3: stalled %d connections, want the operator's", n)
			}
			dials, accepted := s.Op.Dials(), s.Proxy.Accepted()
			must(t, s.C.Delete(ctx, w))

			if !naive {
				must(t, controlplane.WaitGone(ctx, s.C, w, stack.DefaultWait))
				if got := s.Op.Dials() - dials; got != 1 {
					t.Errorf("step 4: %d redials, want 1 (the first timed-out call evicts, the next attempt dials)", got)
				}
				if got := s.Proxy.Accepted() - accepted; got != 1 {
					t.Errorf("step 4: %d new connections, want 1", got)
				}
				if _, err := s.Describe(ctx, w.Spec.DeploymentName); !isNotFound(err) {
					t.Errorf("step 4: the server-side deployment after the deletion: %v, want NotFound", err)
				}
				return
			}

			wait(t, "three failed cleanup attempts", func() bool { return s.Attempts(w) >= 3 })
			must(t, s.AgeDeletion(ctx, w, 10*time.Minute))
			waitCond(t, s, w, watchdog.ConditionType, metav1.ConditionTrue, watchdog.ReasonCleanupBlocked)
			blockedAt := s.Attempts(w)
			wait(t, "two more failed attempts after the block", func() bool { return s.Attempts(w) >= blockedAt+2 })
			events := 0
			wait(t, "the CleanupBlocked Warning Event", func() bool {
				events, err = s.WarningEvents(ctx, w, watchdog.ReasonCleanupBlocked)
				return err == nil && events > 0
			})
			if events != 1 {
				t.Errorf("step 4: %d CleanupBlocked Warning Events, want 1 (per transition, not per retry)", events)
			}
			exists, err := s.Exists(ctx, w)
			must(t, err)
			if !exists {
				t.Fatal("step 4: the naive build finished the deletion; the fault proves nothing")
			}
			if got := s.Op.Dials() - dials; got != 0 {
				t.Errorf("step 4: the naive build redialled %d times, want 0 (it never evicts in the deletion path)", got)
			}
			if _, err := s.Describe(ctx, w.Spec.DeploymentName); err != nil {
				t.Errorf("step 4: the server-side deployment must still be there: %v", err)
			}
			must(t, s.Release(ctx, w))
		})
	}
}

// TestSeedMainPath is step 5: the same fault on the main reconcile path
// (the maintainers' point in the thread). finale evicts and recovers; the
// naive build, which evicts only on PermissionDenied and Unauthenticated,
// keeps failing on the poisoned client.
func TestSeedMainPath(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(map[bool]string{false: "finale", true: "naive"}[naive], func(t *testing.T) {
			ctx := t.Context()
			s := start(t, naive)
			w := ready(t, s)
			n, err := s.Poison()
			must(t, err)
			if n < 1 {
				t.Fatalf("stalled %d connections, want the operator's", n)
			}
			dials := s.Op.Dials()
			_, failedBefore := s.Op.Calls()
			must(t, s.Touch(ctx, w, "poisoned"))

			if !naive {
				// The failed reconcile writes Synced=False before the next
				// one dials, so Synced=True after the redial is a recovery.
				wait(t, "a failed reconcile and a redial", func() bool {
					_, failed := s.Op.Calls()
					return failed > failedBefore && s.Op.Dials() > dials
				})
				waitCond(t, s, w, lifecycle.ConditionSynced, metav1.ConditionTrue, lifecycle.ReasonReconcileSuccess)
				if got := s.Op.Dials() - dials; got != 1 {
					t.Errorf("%d redials, want 1", got)
				}
				must(t, s.C.Delete(ctx, w))
				must(t, controlplane.WaitGone(ctx, s.C, w, stack.DefaultWait))
				return
			}

			waitCond(t, s, w, lifecycle.ConditionSynced, metav1.ConditionFalse, lifecycle.ReasonReconcileError)
			wait(t, "three failed reconciles", func() bool {
				_, failed := s.Op.Calls()
				return failed-failedBefore >= 3
			})
			if got := s.Op.Dials() - dials; got != 0 {
				t.Errorf("the naive build redialled %d times, want 0", got)
			}
			must(t, s.C.Get(ctx, client.ObjectKeyFromObject(w), w))
			if c := meta.FindStatusCondition(w.Status.Conditions, lifecycle.ConditionSynced); c == nil || c.Status != metav1.ConditionFalse {
				t.Errorf("the naive build recovered (%v); the fault proves nothing", c)
			}
			must(t, s.Release(ctx, w))
		})
	}
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// TestForeignDeploymentIsNeverTouched: a deployment of the same name that
// workers created before the object (no manager identity) is refused, not
// adopted, and deleting the object leaves it and its version in place.
func TestForeignDeploymentIsNeverTouched(t *testing.T) {
	ctx := t.Context()
	s := start(t, false)
	ns, err := s.Namespace(ctx, "g1-foreign-")
	must(t, err)
	must(t, s.Connection(ctx, ns))
	must(t, s.APIKeySecret(ctx, ns))
	name := ns + "-app" // the deployment s.WorkerDeployment(ns, "app") names
	must(t, s.AddVersion(ctx, name, "v1"))
	w, err := s.WorkerDeployment(ctx, ns, "app")
	must(t, err)
	waitCond(t, s, w, lifecycle.ConditionSynced, metav1.ConditionFalse, controller.ReasonDeploymentUnclaimed)
	must(t, s.C.Delete(ctx, w))
	must(t, controlplane.WaitGone(ctx, s.C, w, stack.DefaultWait))
	d, err := s.Describe(ctx, name)
	must(t, err)
	if d.Info.ManagerIdentity != "" || len(d.Info.VersionSummaries) != 1 {
		t.Errorf("the foreign deployment was changed: manager %q, %d versions", d.Info.ManagerIdentity, len(d.Info.VersionSummaries))
	}
}
