package hold_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const dependents = 20

// Scenario 1: deleting the namespace drops every role, whatever order the
// namespace controller deletes Server, Secret and Roles in.
func TestNamespaceDeletionDropsEveryRole(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	op := startOperator(t, operatorOptions{clock: clk})
	f := newFixture(t, c, dependents)
	f.waitReady(t, c, dependents)

	before := releasedWithoutDelete()
	deleteNamespace(t, c, f.ns)
	waitPGRoles(t, f.ns, 0, waitLong)
	waitNamespaceGone(t, c, f.ns, waitLong)
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != 0 {
		t.Errorf("cleanup records left: %d, want 0", got)
	}
	if got := releasedWithoutDelete() - before; got != 0 {
		t.Errorf("released without delete: %v, want 0", got)
	}
	if got := op.events.count(hold.ReasonReleasedWithoutDelete); got != 0 {
		t.Errorf("%s events: %d, want 0", hold.ReasonReleasedWithoutDelete, got)
	}
}

// Scenario 2: the Secret is deleted first, then the Server, then the
// namespace. Both stay (terminating, readable) until the roles are dropped.
func TestSecretThenServerThenNamespace(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	startOperator(t, operatorOptions{clock: clk})
	f := newFixture(t, c, dependents)
	f.waitReady(t, c, dependents)

	active := metric("finale_hold_active", "kind", "Server").GetGauge().GetValue()
	var sec corev1.Secret
	if err := c.Get(ctx, f.secret, &sec); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, f.server.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	// Both are held: terminating, still there, with the hold finalizer.
	for _, o := range []client.Object{&corev1.Secret{}, newServer()} {
		key := f.secret
		if _, ok := o.(*corev1.Secret); !ok {
			key = client.ObjectKeyFromObject(f.server)
		}
		err := controlplane.WaitFor(ctx, 30*time.Second, "held and terminating "+key.String(), func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, key, o); err != nil {
				return false, err
			}
			return !o.GetDeletionTimestamp().IsZero() && controllerutil.ContainsFinalizer(o, hold.Finalizer), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, err := pgRolesIn(ctx, f.ns); err != nil || len(got) != dependents {
		t.Fatalf("roles while held: %d (%v), want %d", len(got), err, dependents)
	}
	waitGauge(t, active+1)
	durations := histogramCount(t, "Server")

	deleteNamespace(t, c, f.ns)
	waitPGRoles(t, f.ns, 0, waitLong)
	waitNamespaceGone(t, c, f.ns, waitLong)
	waitGauge(t, active)
	if got := histogramCount(t, "Server") - durations; got != 1 {
		t.Errorf("finale_hold_duration_seconds{kind=Server} observations grew by %d, want 1", got)
	}
}

// waitGauge waits until finale_hold_active{kind=Server} is want.
func waitGauge(t *testing.T, want float64) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), 30*time.Second, fmt.Sprintf("finale_hold_active{kind=Server} = %v", want), func(context.Context) (bool, error) {
		return metric("finale_hold_active", "kind", "Server").GetGauge().GetValue() == want, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func histogramCount(t *testing.T, kind string) uint64 {
	t.Helper()
	return metric("finale_hold_duration_seconds", "kind", kind).GetHistogram().GetSampleCount()
}

// waitTerminatingAndPlainGone waits until the namespace is terminating,
// its plain ConfigMap is gone and every Role is marked for deletion: the
// namespace controller has done all it can without the operator. This
// replaces the fixed 60 s pause with a condition.
func waitTerminatingAndPlainGone(t *testing.T, c client.Client, ns string) {
	t.Helper()
	ctx := t.Context()
	err := controlplane.WaitFor(ctx, waitLong, "namespace "+ns+" terminating with plain objects gone", func(ctx context.Context) (bool, error) {
		var n corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			return false, err
		}
		if n.Status.Phase != corev1.NamespaceTerminating {
			return false, nil
		}
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, cm := range cms.Items {
			if cm.Name == "plain" {
				return false, nil
			}
		}
		roles := newRoleList()
		if err := c.List(ctx, roles, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, r := range roles.Items {
			if r.GetDeletionTimestamp().IsZero() {
				return false, nil
			}
		}
		return len(roles.Items) == dependents, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Scenario 3: the operator is down while the namespace is deleted; when it
// comes back (before the hold timeout), every role is still dropped.
func TestOperatorDownDuringNamespaceDeletion(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	op := startOperator(t, operatorOptions{clock: clk})
	f := newFixture(t, c, dependents)
	f.waitReady(t, c, dependents)
	op.stop()

	deleteNamespace(t, c, f.ns)
	waitTerminatingAndPlainGone(t, c, f.ns)
	if got, err := pgRolesIn(ctx, f.ns); err != nil || len(got) != dependents {
		t.Fatalf("roles while the operator is down: %d (%v), want %d", len(got), err, dependents)
	}
	f.waitHeld(t, c, true) // Server and Secret outlived the namespace controller's pass

	startOperator(t, operatorOptions{clock: clk})
	waitPGRoles(t, f.ns, 0, waitLong)
	waitNamespaceGone(t, c, f.ns, waitLong)
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != 0 {
		t.Errorf("cleanup records left: %d, want 0", got)
	}
}

// Scenario 4: the operator is down past the hold timeout, and meanwhile
// the credentials stop working (the Secret's password changed). The hold
// does not end on the operator's first look (it counts from there): the
// Server stays held, its hold started, the Roles
// keep trying. Once the timeout has passed since, the Server and Secret
// are released, every Role is released without its drop (counted and
// evented), the PostgreSQL roles are left for the sweeper, and the cleanup
// finishes through another Server reaching the same PostgreSQL.
func TestHoldTimeoutReleasesWithoutDelete(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	clk := clocktesting.NewFakeClock(time.Now())
	op := startOperator(t, operatorOptions{clock: clk})
	f := newFixture(t, c, dependents)
	f.waitReady(t, c, dependents)
	op.stop()

	var sec corev1.Secret
	if err := c.Get(ctx, f.secret, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["password"] = []byte("not-the-password")
	if err := c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	deleteNamespace(t, c, f.ns)
	waitTerminatingAndPlainGone(t, c, f.ns)
	clk.Step(hold.DefaultTimeout + time.Minute) // the outage

	before := releasedWithoutDelete()
	releasesBefore := releases(hold.ReleasedTimeout, hold.ReleasedDependentsDone)
	op = startOperator(t, operatorOptions{clock: clk})
	err := controlplane.WaitFor(ctx, waitLong, "the hold on the Server to start counting", func(ctx context.Context) (bool, error) {
		srv := newServer()
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.server), srv); err != nil {
			return false, err
		}
		_, ok := op.hold.Started(srv)
		return ok, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitHeld(t, c, true)
	if got := releasedWithoutDelete() - before; got != 0 {
		t.Fatalf("%v Roles released without delete on the operator's first look after the outage, want 0", got)
	}
	clk.Step(hold.DefaultTimeout + time.Second)
	waitNamespaceGone(t, c, f.ns, waitLong)

	if got := releasedWithoutDelete() - before; got != dependents {
		t.Errorf("finale_released_without_delete_total{kind=Role} grew by %v, want %d", got, dependents)
	}
	if got := op.events.count(hold.ReasonReleasedWithoutDelete); got != dependents {
		t.Errorf("%s events: %d, want %d", hold.ReasonReleasedWithoutDelete, got, dependents)
	}
	// The Server goes once, at its timeout or right after: each Role's own
	// pass past the hold end releases it, and the Server's pass that
	// follows may find no dependent left (dependents_done) before its own
	// timeout pass comes. Which one counts it is a race; that it goes once,
	// and only after every Role was released without its drop, is not.
	waitReleases(t, releasesBefore, 1, hold.ReleasedTimeout, hold.ReleasedDependentsDone)
	left, err := pgRolesIn(ctx, f.ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != dependents {
		t.Fatalf("roles left for the sweeper: %d, want %d", len(left), dependents)
	}
	store := recordStore(t, c)
	if got := len(recordsIn(t, store, f.ns)); got != dependents {
		t.Fatalf("cleanup records left: %d, want %d", got, dependents)
	}

	// The sweep, through another Server reaching the same PostgreSQL.
	other := testenv.Namespace(t, c)
	rep := sweepThrough(t, c, clk, createServer(t, c, other, "pg", ""))
	if rep.Removed < dependents || rep.Deleted < dependents {
		t.Errorf("sweep report %+v: want at least %d deleted and removed", rep, dependents)
	}
	waitPGRoles(t, f.ns, 0, 10*time.Second)
	if got := len(recordsIn(t, store, f.ns)); got != 0 {
		t.Errorf("cleanup records after the sweep: %d, want 0", got)
	}
}

// Scenario 5: a Server without dependents is never held.
func TestServerWithoutDependentsIsDeletedAtOnce(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	startOperator(t, operatorOptions{clock: clocktesting.NewFakeClock(time.Now())})
	f := newFixture(t, c, 0)
	// Give the operator a chance to (wrongly) hold: wait until it has seen
	// the Server, by holding and releasing a dependent first.
	createRoles(t, c, f.ns, f.server.GetName(), 1)
	f.waitReady(t, c, 1)
	role := newRole()
	role.SetNamespace(f.ns)
	role.SetName("role-0000")
	if err := controlplane.DeleteAndWait(ctx, c, role, waitLong); err != nil {
		t.Fatal(err)
	}
	f.waitHeld(t, c, false)

	if err := controlplane.DeleteAndWait(ctx, c, f.server.DeepCopy(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.DeleteAndWait(ctx, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.secret.Name}}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
