package hold_test

// Issue 36, item 5: the hold's start is not where the tenant writes. These
// tests run the hold on the real clock with a short Timeout (holdTimeout, a
// test setting; the default is hold.DefaultTimeout), against the real
// control plane and PostgreSQL.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
)

// startRoles is how many Roles these tests give a Server.
const startRoles = 10

// A tenant that sets the hold's old start annotation to 2000-01-01 on its
// live Server does not shorten the hold: with the operator down for longer
// than the Timeout while the namespace is deleted, the hold still gives the
// Roles the Timeout from the operator's return, and every PostgreSQL role
// is dropped. (Before, the hold read the annotation, was over on the first
// look, and released every Role without its drop.)
func TestTenantStartInThePastDoesNotEndTheHold(t *testing.T) {
	const holdTimeout = 30 * time.Second // long enough for 10 drops on a loaded machine
	c := testenv.Client(t, testenv.Scheme())
	opts := operatorOptions{clock: clock.RealClock{}, timeout: holdTimeout}
	op := startOperator(t, opts)
	f := newFixture(t, c, startRoles)
	f.waitReady(t, c, startRoles)
	setStartAnnotation(t, c, f, "2000-01-01T00:00:00Z")
	op.stop()

	deleteNamespace(t, c, f.ns)
	outlast(t, waitServerDeleting(t, c, f), holdTimeout+time.Second)

	before := releasedWithoutDelete()
	startOperator(t, opts)
	waitPGRoles(t, f.ns, 0, waitLong)
	waitNamespaceGone(t, c, f.ns, waitLong)
	if got := releasedWithoutDelete() - before; got != 0 {
		t.Errorf("Roles released without their drop: %v, want 0", got)
	}
	if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != 0 {
		t.Errorf("cleanup records left: %d, want 0", got)
	}
}

// The hold ends at its bound whatever the tenant writes on the Server and
// whatever admission does to the operator's writes: a start annotation in
// 9999 (which used to hold the Server for ever), or a policy refusing every
// change to the Server's annotations (which used to fail the write of the
// start mark, so the hold never started counting, and never ended). The
// Roles cannot drop (their Secret's password is wrong), so only the bound
// ends the hold: the namespace goes, each Role is released without its
// drop and counted, and the Server's release is a timeout.
func TestHoldEndsAtItsBound(t *testing.T) {
	const holdTimeout = 10 * time.Second
	cases := map[string]func(t *testing.T, c client.Client, f fixture){
		"a tenant's start in 9999": func(t *testing.T, c client.Client, f fixture) {
			setStartAnnotation(t, c, f, "9999-12-31T23:59:59Z")
		},
		"a policy refusing changes to the Server's annotations": func(t *testing.T, c client.Client, f fixture) {
			freezeAnnotations(t, c, f)
		},
	}
	for name, arrange := range cases {
		t.Run(name, func(t *testing.T) {
			c := testenv.Client(t, testenv.Scheme())
			op := startOperator(t, operatorOptions{clock: clock.RealClock{}, timeout: holdTimeout})
			f := newFixture(t, c, startRoles)
			f.waitReady(t, c, startRoles)
			t.Cleanup(func() { dropLeftovers(t, c, f.ns) })
			breakPassword(t, c, f)
			arrange(t, c, f)

			before := releasedWithoutDelete()
			timeouts := releases(hold.ReleasedTimeout)
			deleteNamespace(t, c, f.ns)
			deleted := waitServerDeleting(t, c, f)
			// The bound plus the hold's recheck, the Roles' last pass and the
			// namespace controller's, with room for a loaded machine.
			waitNamespaceGone(t, c, f.ns, holdTimeout+waitLong)
			if took := time.Since(deleted); took < holdTimeout {
				t.Errorf("namespace gone %v after the deletion, before the hold's %v", took, holdTimeout)
			}
			if got := releasedWithoutDelete() - before; got != startRoles {
				t.Errorf("Roles released without their drop: %v, want %d", got, startRoles)
			}
			if got := op.events.count(hold.ReasonReleasedWithoutDelete); got != startRoles {
				t.Errorf("%s events: %d, want %d", hold.ReasonReleasedWithoutDelete, got, startRoles)
			}
			if got := releases(hold.ReleasedTimeout) - timeouts; got != 1 {
				t.Errorf("timeout releases of the Server: %v, want 1", got)
			}
			if got := len(recordsIn(t, recordStore(t, c), f.ns)); got != startRoles {
				t.Errorf("cleanup records left for the sweeper: %d, want %d", got, startRoles)
			}
		})
	}
}

// setStartAnnotation writes the hold's old start annotation on the Server,
// as its tenant can.
func setStartAnnotation(t *testing.T, c client.Client, f fixture, value string) {
	t.Helper()
	srv := newServer()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(f.server), srv); err != nil {
		t.Fatal(err)
	}
	base := srv.DeepCopy()
	a := srv.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[hold.AnnotationStarted] = value
	srv.SetAnnotations(a)
	if err := c.Patch(t.Context(), srv, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// breakPassword changes the password in the Server's Secret: every Role's
// drop then fails, so only the hold's bound ends the hold.
func breakPassword(t *testing.T, c client.Client, f fixture) {
	t.Helper()
	var sec corev1.Secret
	if err := c.Get(t.Context(), f.secret, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["password"] = []byte("not-the-password")
	if err := c.Update(t.Context(), &sec); err != nil {
		t.Fatal(err)
	}
}

// waitServerDeleting waits until the namespace controller has deleted the
// Server (held, so it stays, terminating) and returns its
// deletionTimestamp.
func waitServerDeleting(t *testing.T, c client.Client, f fixture) time.Time {
	t.Helper()
	var deleted time.Time
	err := controlplane.WaitFor(t.Context(), waitLong, "the Server to be deleted", func(ctx context.Context) (bool, error) {
		srv := newServer()
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.server), srv); err != nil {
			return false, err
		}
		if ts := srv.GetDeletionTimestamp(); ts != nil {
			deleted = ts.Time
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return deleted
}

// outlast waits until d has passed since deleted: an operator outage
// longer than the hold's Timeout. It waits on the condition itself (the
// real clock passing the bound), with a deadline.
func outlast(t *testing.T, deleted time.Time, d time.Duration) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), d+waitLong, fmt.Sprintf("an outage of %v since the deletion", d), func(context.Context) (bool, error) {
		return time.Since(deleted) > d, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// freezeAnnotations installs a ValidatingAdmissionPolicy that refuses
// every change to the annotations of Servers in f's namespace (by anyone,
// the operator included), and waits until the API server enforces it.
func freezeAnnotations(t *testing.T, c client.Client, f fixture) {
	t.Helper()
	ctx := t.Context()
	name := "holdtest-frozen-annotations-" + f.ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{testGroup}, APIVersions: []string{"v1"}, Resources: []string{"servers"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "(has(object.metadata.annotations) ? object.metadata.annotations : {}) == " +
					"(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})",
				Message: "the annotations of Servers are frozen",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: f.ns}},
			},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	// Enforced once a tenant's annotation change is refused.
	err := controlplane.WaitFor(ctx, 30*time.Second, "the policy freezing Server annotations to be enforced", func(ctx context.Context) (bool, error) {
		srv := newServer()
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.server), srv); err != nil {
			return false, err
		}
		base := srv.DeepCopy()
		srv.SetAnnotations(map[string]string{"probe": time.Now().Format(time.RFC3339Nano)})
		err := c.Patch(ctx, srv, client.MergeFrom(base))
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dropLeftovers drops the PostgreSQL roles and removes the cleanup records
// left for namespace ns (released without their drop), so the shared
// server and records namespace do not accumulate them.
func dropLeftovers(t *testing.T, c client.Client, ns string) {
	ctx := context.Background()
	store := recordStore(t, c)
	for _, r := range recordsIn(t, store, ns) {
		if err := store.Delete(ctx, r); err != nil {
			t.Errorf("remove record %s: %v", r.Owner.UID, err)
		}
	}
	names, err := pgRolesIn(ctx, ns)
	if err != nil {
		t.Errorf("list the roles left: %v", err)
		return
	}
	conn, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		t.Errorf("drop the roles left: %v", err)
		return
	}
	defer conn.Close(ctx)
	for _, n := range names {
		if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{n}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", n, err)
		}
	}
}
