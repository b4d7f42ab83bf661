package lifecycle_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/lifecycle"
)

func newHold(t *testing.T, e *env, clk *clocktesting.FakeClock) *hold.Hold {
	t.Helper()
	h, err := hold.New(hold.Config{
		Parent: &corev1.ConfigMap{}, Scheme: e.c.Scheme(), Clock: clk, Timeout: time.Minute,
		SecretName: func(client.Object) string { return "" },
		Dependents: []hold.Dependent{{
			Object: &Widget{}, CleanupFinalizer: finalizer,
			ParentName: func(o client.Object) string { return o.(*Widget).Spec.Parent },
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *env) parent() *corev1.ConfigMap {
	e.t.Helper()
	var cm corev1.ConfigMap
	if err := e.c.Get(e.t.Context(), client.ObjectKey{Namespace: e.ns, Name: "conn"}, &cm); err != nil {
		e.t.Fatal(err)
	}
	return &cm
}

// holdParent puts the hold finalizer on the parent, as the hold's parent
// reconciler does once a dependent exists.
func (e *env) holdParent() {
	e.t.Helper()
	cm := e.parent()
	cm.Finalizers = append(cm.Finalizers, hold.Finalizer)
	if err := e.c.Update(e.t.Context(), cm); err != nil {
		e.t.Fatal(err)
	}
}

// Nothing is created until the parent carries its hold: otherwise the
// parent (and its credentials) could go before this object's cleanup.
func TestNoCreateUntilParentHeld(t *testing.T) {
	e := newEnv(t, nil)
	clk := clocktesting.NewFakeClock(time.Now())
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led, Hold: newHold(t, e, clk), Clock: clk})
	w := e.widget("a", "")
	reconcileOnce(t, r, w)
	if e.creates.Load() != 0 || e.roleExists(w.Spec.RoleName) {
		t.Fatal("created before the parent was held")
	}
	// A new object waits for the hold quietly: it usually comes at once.
	if st, reason := condition(e.get(w), lifecycle.ConditionSynced); st != "" {
		t.Errorf("Synced = %s/%s within RetryInterval of the creation, want no condition yet", st, reason)
	}
	// A longer wait is reported.
	clk.SetTime(e.get(w).CreationTimestamp.Add(lifecycle.DefaultRetryInterval + time.Second))
	reconcileOnce(t, r, w)
	if e.creates.Load() != 0 || e.roleExists(w.Spec.RoleName) {
		t.Fatal("created before the parent was held")
	}
	if st, reason := condition(e.get(w), lifecycle.ConditionSynced); st != metav1.ConditionFalse || reason != lifecycle.ReasonWaitingForHold {
		t.Errorf("Synced = %s/%s, want False/%s", st, reason, lifecycle.ReasonWaitingForHold)
	}
	e.holdParent()
	reconcileOnce(t, r, w)
	if !e.roleExists(w.Spec.RoleName) {
		t.Error("not created once the parent was held")
	}
}

// While the parent is deleting and held, the dependent deletes through it.
// Once the hold is over (the injected clock passes its end: an operator
// that was down past it) the delete is still tried first while the parent
// is there, and only a delete that cannot succeed releases the dependent
// without it, its record left for the sweeper.
func TestDeletionWithinAndAfterTheHold(t *testing.T) {
	cases := map[string]struct {
		advance     time.Duration
		broken      bool // the service refuses every delete
		wantDropped bool
	}{
		"within the hold":                       {advance: 30 * time.Second, wantDropped: true},
		"after the hold end, service reachable": {advance: 2 * time.Minute, wantDropped: true},
		"after the hold end, delete failing":    {advance: 2 * time.Minute, broken: true, wantDropped: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.holdParent()
			w := e.widget("a", "")
			if err := e.c.Delete(t.Context(), e.parent()); err != nil {
				t.Fatal(err)
			}
			// The hold starts on its first look at the deletion (the
			// parent reconciler's, not run here, or a dependent's); here
			// that is at the deletion, and the clock starts there.
			p := e.parent()
			clk := clocktesting.NewFakeClock(p.DeletionTimestamp.Time)
			h := newHold(t, e, clk)
			if _, release := h.DependentDeadline(p); release {
				t.Fatal("the hold is over on its first look at the deletion")
			}
			r := e.reconciler(nil, lifecycle.Options{Ledger: e.led, Hold: h})
			// The parent is deleting: nothing new is created through it.
			reconcileOnce(t, r, w)
			if e.roleExists(w.Spec.RoleName) {
				t.Fatal("created through a deleting parent")
			}
			// Create through a live-looking parent first, then delete.
			e.holdParentAlive(t, r, w)
			uid := e.get(w).UID
			clk.Step(tc.advance)
			if tc.broken {
				e.deleteErr = func() error { return errors.New("connection reset by peer") }
			}
			if err := e.c.Delete(t.Context(), w); err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, w)
			if err := waitGone(t, e, w); err != nil {
				t.Fatal(err)
			}
			if got := !e.roleExists(w.Spec.RoleName); got != tc.wantDropped {
				t.Errorf("role dropped = %v, want %v", got, tc.wantDropped)
			}
			if got := e.record(uid) != nil; got == tc.wantDropped {
				t.Errorf("record kept = %v, want %v", got, !tc.wantDropped)
			}
		})
	}
}

// holdParentAlive creates w's role through a reconciler whose hold sees a
// parent that is not deleting, so the deletion cases have something to
// delete.
func (e *env) holdParentAlive(t *testing.T, r *lifecycle.Reconciler[*Widget, string, *pgtarget.Target], w *Widget) {
	t.Helper()
	plain := e.reconciler(nil, lifecycle.Options{Ledger: e.led})
	reconcileOnce(t, plain, w)
	if !e.roleExists(w.Spec.RoleName) || !slices.Contains(e.get(w).Finalizers, finalizer) {
		t.Fatal("setup: role not created")
	}
	_ = r
}
