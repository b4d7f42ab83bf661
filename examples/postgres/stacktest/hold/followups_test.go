package hold_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
)

// releases sums the Server's releases for reasons.
func releases(reasons ...hold.Reason) float64 {
	var n float64
	for _, r := range reasons {
		n += metric("finale_hold_releases_total", "kind", "Server", "reason", string(r)).GetCounter().GetValue()
	}
	return n
}

// waitReleases waits until releases(reasons...) has grown from base by
// want: the hold counts a release just after its finalizer patch returns,
// so a test that sees the parent gone can read the counter a moment early.
func waitReleases(t *testing.T, base, want float64, reasons ...hold.Reason) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), 10*time.Second, fmt.Sprintf("%v releases", reasons), func(context.Context) (bool, error) {
		return releases(reasons...)-base >= want, nil
	})
	if got := releases(reasons...) - base; err != nil || got != want {
		t.Errorf("%v releases grew by %v, want %v", reasons, got, want)
	}
}

func releasedWithoutDelete() float64 {
	return metric("finale_released_without_delete_total", "kind", "Role").GetCounter().GetValue()
}

// metric is the series of the named metric with exactly these label
// pairs, read from controller-runtime's registry as a dashboard reads
// it (the collectors are hold's own); nil, which reads as zero, if the
// series does not exist yet.
func metric(name string, labelPairs ...string) *dto.Metric {
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labelPairs); i += 2 {
		want[labelPairs[i]] = labelPairs[i+1]
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, want) {
				return m
			}
		}
	}
	return nil
}

// setPassword writes the Secret's password, reading it again on a
// conflict: once its namespace is being deleted, others write the Secret
// too (the namespace controller's delete, which the hold's finalizer turns
// into setting deletionTimestamp), and an update from a stale read fails
// (seen once in a warm make test).
func setPassword(t *testing.T, c client.Client, key types.NamespacedName, password string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		if err := c.Get(t.Context(), key, &s); err != nil {
			return err
		}
		s.Data["password"] = []byte(password)
		return c.Update(t.Context(), &s)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func role(ns, name string) client.Object {
	r := newRole()
	r.SetNamespace(ns)
	r.SetName(name)
	return r
}

// Follow-up 1, decided as "keep repairing during the hold": access is
// broken when the namespace is deleted (the Secret's password is wrong),
// the hold keeps Server and Secret and keeps checking access, and once the
// Secret is fixed during the hold every role is dropped.
func TestAccessRepairedDuringHold(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	op := startOperator(t, operatorOptions{clock: clk, access: serverAccess})
	const n = 3
	f := newFixture(t, c, n)
	f.waitReady(t, c, n)
	done, notReady := releases(hold.ReleasedDependentsDone), releases(hold.ReleasedAccessNotReady)

	setPassword(t, c, f.secret, "wrong")
	deleteNamespace(t, c, f.ns)
	err := controlplane.WaitFor(t.Context(), waitLong, "the hold to report access not ready", func(context.Context) (bool, error) {
		return op.events.count(hold.ReasonAccessNotReady) >= 2, nil // seen on two passes: it keeps checking
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pgRolesIn(t.Context(), f.ns); err != nil || len(got) != n {
		t.Fatalf("roles while access is broken: %d (%v), want %d", len(got), err, n)
	}
	f.waitHeld(t, c, true)

	setPassword(t, c, f.secret, admin(t).Password) // the repair, during the hold
	waitPGRoles(t, f.ns, 0, waitLong)
	waitNamespaceGone(t, c, f.ns, waitLong)
	waitReleases(t, done, 1, hold.ReleasedDependentsDone)
	if got := releases(hold.ReleasedAccessNotReady) - notReady; got != 0 {
		t.Errorf("access_not_ready releases grew by %v, want 0", got)
	}
}

// Follow-up 1, the other policy: SkipHold releases at once when access is
// not ready, and the dependents then release without delete, counted.
func TestSkipHoldWhenAccessNotReady(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	startOperator(t, operatorOptions{clock: clk, access: serverAccess, policy: hold.SkipHold})
	const n = 3
	f := newFixture(t, c, n)
	f.waitReady(t, c, n)
	notReady, without := releases(hold.ReleasedAccessNotReady), releasedWithoutDelete()

	setPassword(t, c, f.secret, "wrong")
	if err := controlplane.DeleteAndWait(t.Context(), c, f.server.DeepCopy(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReleases(t, notReady, 1, hold.ReleasedAccessNotReady)
	deleteNamespace(t, c, f.ns)
	waitNamespaceGone(t, c, f.ns, waitLong)
	if got := releasedWithoutDelete() - without; got != n {
		t.Errorf("released without delete grew by %v, want %d", got, n)
	}
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != n {
		t.Errorf("cleanup records left: %d, want %d", got, n)
	}
	other := testenv.Namespace(t, c)
	sweepThrough(t, c, clk, createServer(t, c, other, "pg", ""))
	waitPGRoles(t, f.ns, 0, 10*time.Second)
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != 0 {
		t.Errorf("cleanup records after the sweep: %d, want 0", got)
	}
}

// Follow-up 2: a terminating dependent whose cleanup finalizer is gone no
// longer holds the parent, even though another finalizer keeps it around.
func TestTerminatingDependentWithOtherFinalizerDoesNotHold(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	startOperator(t, operatorOptions{clock: clocktesting.NewFakeClock(time.Now())})
	f := newFixture(t, c, 2)
	f.waitReady(t, c, 2)

	lingering := role(f.ns, "role-0000")
	if err := c.Get(ctx, client.ObjectKeyFromObject(lingering), lingering); err != nil {
		t.Fatal(err)
	}
	controllerutil.AddFinalizer(lingering, "hold.test.finale.dev/other")
	if err := c.Update(ctx, lingering); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, lingering); err != nil {
		t.Fatal(err)
	}
	waitPGRoles(t, f.ns, 1, waitLong) // its cleanup ran; it is still there, terminating

	if err := c.Delete(ctx, f.server.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	f.waitHeld(t, c, true) // role-0001 still needs it
	if err := controlplane.DeleteAndWait(ctx, c, role(f.ns, "role-0001"), waitLong); err != nil {
		t.Fatal(err)
	}
	// The FakeClock never moves here, so only the rule for terminating
	// dependents can
	// release the Server.
	if err := controlplane.WaitGone(ctx, c, f.server, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lingering), lingering); err != nil {
		t.Fatalf("the lingering role should still exist: %v", err)
	}
	controllerutil.RemoveFinalizer(lingering, "hold.test.finale.dev/other")
	if err := c.Update(ctx, lingering); err != nil {
		t.Fatal(err)
	}
}

// Follow-up 4: the operator is down during a foreground delete of the
// Server; the garbage collector removes what the Server owns (a ConfigMap
// standing in for the Deployment running the service) and its
// foregroundDeletion marker before the first reconcile. The hold checks
// what the Server owns, finds it gone, and does not hold.
func TestForegroundDeletionFinishedBeforeFirstReconcile(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	ownedExists := func(r client.Reader) hold.Owned {
		return hold.OwnedFn(func(ctx context.Context, parent client.Object) (bool, error) {
			var cm corev1.ConfigMap
			err := r.Get(ctx, types.NamespacedName{Namespace: parent.GetNamespace(), Name: parent.GetName() + "-deployment"}, &cm)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		})
	}
	op := startOperator(t, operatorOptions{clock: clk, owned: ownedExists})
	const n = 3
	f := newFixture(t, c, n)
	f.waitReady(t, c, n)
	deployment := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.ns, Name: f.server.GetName() + "-deployment",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: serverGVK.GroupVersion().String(), Kind: serverGVK.Kind,
			Name: f.server.GetName(), UID: f.server.GetUID(),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}}
	if err := c.Create(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	op.stop()
	ownedGone := releases(hold.ReleasedOwnedGone)

	if err := c.Delete(ctx, f.server.DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(ctx, c, deployment, waitLong); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, waitLong, "the foregroundDeletion marker to go", func(ctx context.Context) (bool, error) {
		srv := newServer()
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.server), srv); err != nil {
			return false, err
		}
		return !controllerutil.ContainsFinalizer(srv, metav1.FinalizerDeleteDependents) &&
			controllerutil.ContainsFinalizer(srv, hold.Finalizer), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	startOperator(t, operatorOptions{clock: clk, owned: ownedExists})
	if err := controlplane.WaitGone(ctx, c, f.server, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReleases(t, ownedGone, 1, hold.ReleasedOwnedGone)
	f.waitSecretReleased(t, c)
	deleteNamespace(t, c, f.ns)
	waitNamespaceGone(t, c, f.ns, waitLong)
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != n {
		t.Errorf("cleanup records left: %d, want %d", got, n)
	}
	other := testenv.Namespace(t, c)
	sweepThrough(t, c, clk, createServer(t, c, other, "pg", ""))
	waitPGRoles(t, f.ns, 0, 10*time.Second)
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != 0 {
		t.Errorf("cleanup records after the sweep: %d, want 0", got)
	}
}
