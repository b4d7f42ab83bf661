package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/pgserver"
)

// The default setup sweeps (issue 36, item 1). A Server that says nothing
// of TLS, whose credential Secret holds the server's CA under ca.crt, is
// verify-full: Ready and SweepVerified together. A Role whose finalizer an
// admin removes by hand while the operator is down leaves its role and its
// record behind; the sweeper drops the role through the record's own
// Server and removes the record. Before, the default was require: the
// Server read SweepVerified False and the role stayed for ever.
func TestDefaultServerIsAuthenticatedAndSwept(t *testing.T) {
	pg, ca := ownTLSServer(t)
	w := start(t, sweepFast)
	ns := w.namespace()
	w.defaultServer(ns, "pg", pg, map[string][]byte{v1alpha1.DefaultCAKey: ca.CertPEM})
	srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
	w.waitCondition(srv, lifecycle.ConditionReady, metav1.ConditionTrue, controller.ReasonConnected)
	if c := meta.FindStatusCondition(srv.Status.Conditions, controller.ConditionSweepVerified); c == nil || c.Status != metav1.ConditionTrue || c.Reason != controller.ReasonAuthenticated {
		t.Fatalf("a default Server, Ready, has SweepVerified %+v; want True, %s", c, controller.ReasonAuthenticated)
	}
	if srv.Spec.SSLMode != v1alpha1.SSLModeVerifyFull || srv.Spec.CredentialsSecretRef.CAKey != v1alpha1.DefaultCAKey {
		t.Fatalf("the CRD defaulted sslMode %q caKey %q; want verify-full and ca.crt", srv.Spec.SSLMode, srv.Spec.CredentialsSecretRef.CAKey)
	}

	r := role(ns, "leaked", pgtarget.RandomName("leaked_"))
	w.create(r)
	w.ready(r)
	w.stop()
	// The admin's shortcut: the Role deleted and its finalizer removed by
	// hand while nothing cleans up.
	if err := w.c.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(r), r); err != nil {
		t.Fatal(err)
	}
	r.SetFinalizers(nil)
	if err := w.c.Update(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	w.waitGone(r)
	st := stranded{roles: []string{r.Spec.RoleName}, uids: []string{string(r.UID)}}
	w.kept(st, pg) // the outage left both behind

	w2 := w.restart(sweepFast)
	w2.swept(st, pg)
}

// A Server whose sslMode does not authenticate the server (require, here
// against a PostgreSQL that serves TLS, so it connects) says so from the
// status that makes it Ready: SweepVerified False, with the reason, before
// any record strands.
func TestUnauthenticatedServerSaysSoWhenReady(t *testing.T) {
	pg, _ := ownTLSServer(t)
	w := start(t, controller.Options{})
	ns := w.namespace()
	w.serverOn(ns, "pg", pg, pg.Addr(), v1alpha1.SSLModeRequire)
	srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
	w.waitCondition(srv, lifecycle.ConditionReady, metav1.ConditionTrue, controller.ReasonConnected)
	if c := meta.FindStatusCondition(srv.Status.Conditions, controller.ConditionSweepVerified); c == nil || c.Status != metav1.ConditionFalse || c.Reason != controller.ReasonSweepUnverified {
		t.Fatalf("a require Server, Ready, has SweepVerified %+v; want False, %s", c, controller.ReasonSweepUnverified)
	}
}

// A default (verify-full) Server whose Secret holds no CA is not used with
// anything weaker: it reads CACertificateMissing, naming the key and the
// ways out, and its Roles wait.
func TestDefaultServerWithoutCAIsAnError(t *testing.T) {
	pg, _ := ownTLSServer(t)
	w := start(t, controller.Options{})
	ns := w.namespace()
	w.defaultServer(ns, "pg", pg, nil)
	srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
	w.waitCondition(srv, lifecycle.ConditionReady, metav1.ConditionFalse, controller.ReasonCAMissing)
	c := meta.FindStatusCondition(srv.Status.Conditions, lifecycle.ConditionReady)
	want := "sslMode verify-full verifies the server's certificate, but credential Secret \"pg-admin\" has no key \"ca.crt\""
	if c == nil || len(c.Message) < len(want) || c.Message[:len(want)] != want {
		t.Errorf("Ready message %q; want it to start %q", c.Message, want)
	}
}

// defaultServer creates Server name in ns at pg with nothing but its host,
// port and credential Secret (pg's admin login plus extra keys): every
// other field is the CRD's default.
func (w *world) defaultServer(ns, name string, pg *pgserver.Server, extra map[string][]byte) {
	w.t.Helper()
	data := map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(pg.Password)}
	for k, v := range extra {
		data[k] = v
	}
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-admin"}, Data: data})
	w.create(&v1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ServerSpec{Host: pg.Host, Port: int32(pg.Port),
			CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: name + "-admin"}},
	})
}

// editServer changes Server ns/name with f, retrying conflicts until the
// test's deadline.
func (w *world) editServer(ns, name string, f func(*v1alpha1.Server)) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, "edit Server "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		srv := &v1alpha1.Server{}
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, srv); err != nil {
			return false, err
		}
		f(srv)
		return w.c.Update(ctx, srv) == nil, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
}
