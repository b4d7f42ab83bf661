package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
)

// The reported outage, on the binary as deployed (the
// manifests' RBAC, by impersonation): the operator is SIGKILLed, the
// credential Secret, the Server and the namespace are deleted, and the
// operator comes back only after the hold timeout has passed since. It
// must not release the Server by timeout on its first look: PostgreSQL is
// reachable and the Secret held, so every Role is dropped, none is
// released without its delete, and the namespace goes.
func TestOutagePastTheHoldTimeoutStillDeletes(t *testing.T) {
	// Long enough for the ten deletions after the restart on a loaded
	// machine: at 4s, a warm make test (four test jobs on two cores, the
	// operator's apiserver reads timing out) saw the hold end with two
	// Roles left, released to the sweeper as the hold should.
	const holdTimeout = 15 * time.Second
	cp, pg, c := stack(t)
	applyManifests(t, c)
	kubeconfig := impersonating(t, cp, manifestNamespace, manifestSA)
	args := []string{"--hold-timeout=" + holdTimeout.String(), "--metrics-bind-address=0", "--health-probe-bind-address=0"}
	first := startOperator(t, kubeconfig, manifestNamespace, nil, args...)

	ns := testenv.Namespace(t, c)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"}, Data: map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(pg.Password)}}
	server := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, Spec: v1alpha1.ServerSpec{Host: pg.Host, Port: int32(pg.Port), SSLMode: v1alpha1.SSLModeDisable, CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "admin"}}}
	for _, o := range []client.Object{secret, server} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	var roles []*v1alpha1.Role
	for i := range 10 {
		r := &v1alpha1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app%d", i)}, Spec: v1alpha1.RoleSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: pgtarget.RandomName("outage_")}}
		if err := c.Create(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		roles = append(roles, r)
	}
	for _, r := range roles {
		err := controlplane.WaitFor(t.Context(), 90*time.Second, "Role "+r.Name+" Ready", func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
				return false, err
			}
			return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady), nil
		})
		if err != nil {
			t.Fatalf("%v; conditions %+v", err, r.Status.Conditions)
		}
	}

	// The outage: no graceful stop, then everything deleted, as a user or
	// a namespace deletion would.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.stop()
	for _, o := range []client.Object{secret, server, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}} {
		if err := c.Delete(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(server), server); err != nil || server.DeletionTimestamp == nil {
		t.Fatalf("the Server is not held in deletion (err %v): the test proves nothing", err)
	}
	// The operator stays down until the hold timeout, counted from the
	// Server's deletion, is well past (the timestamp has whole seconds).
	past := server.DeletionTimestamp.Add(holdTimeout + 2*time.Second)
	if err := controlplane.WaitFor(t.Context(), time.Minute, "the hold timeout to pass while the operator is down", func(context.Context) (bool, error) {
		return time.Now().After(past), nil
	}); err != nil {
		t.Fatal(err)
	}
	startOperator(t, kubeconfig, manifestNamespace, nil, args...)

	if err := controlplane.WaitGone(t.Context(), c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	store, err := ledger.NewConfigMapStore(c, manifestNamespace)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range roles {
		if _, ok, err := catalog.ObserveRole(t.Context(), admin, r.Spec.RoleName); err != nil || ok {
			left = append(left, fmt.Sprintf("role %s still in PostgreSQL (err %v)", r.Spec.RoleName, err))
		}
		if _, err := store.Get(t.Context(), r.UID); !errors.Is(err, ledger.ErrNotFound) {
			left = append(left, fmt.Sprintf("Role %s's record still there (err %v)", r.Name, err))
		}
	}
	var evs eventsv1.EventList
	if err := c.List(t.Context(), &evs, client.InNamespace(manifestNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == hold.ReasonReleasedWithoutDelete && (ev.Regarding.Namespace == ns || ev.Related != nil && ev.Related.Namespace == ns) {
			left = append(left, fmt.Sprintf("%s %s/%s: %s", ev.Reason, ev.Regarding.Kind, ev.Regarding.Name, ev.Note))
		}
	}
	if len(left) > 0 {
		t.Errorf("after an outage past the hold timeout, %d thing(s) not cleaned up:\n  %s", len(left), strings.Join(left, "\n  "))
	}
}
