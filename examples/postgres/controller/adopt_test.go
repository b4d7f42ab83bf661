package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// Spelled out rather than taken from the packages, so that these tests
// read as a user and an admin see the operator: the annotation a backup
// keeps, the one an admin sets on a record, the reason a claim across a
// re-created namespace waits on.
const (
	annotationUID       = "finale.dev/uid"
	annotationApproval  = "finale.dev/adoption-approved-for"
	reasonNeedsApproval = "AdoptionNeedsApproval"
)

// goByHand removes objs' finalizers and deletes them, as an admin forcing
// a deletion does (or a namespace deletion while the operator is down, once
// someone clears the finalizers): their records stay.
func (w *world) goByHand(objs ...client.Object) {
	w.t.Helper()
	for _, o := range objs {
		if err := w.c.Get(w.t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			w.t.Fatal(err)
		}
		o.SetFinalizers(nil)
		if err := w.c.Update(w.t.Context(), o); err != nil {
			w.t.Fatal(err)
		}
		if err := w.c.Delete(w.t.Context(), o); err != nil && client.IgnoreNotFound(err) != nil {
			w.t.Fatal(err)
		}
		w.waitGone(o)
	}
}

// A restore interrupted by a crash right after its first write (the
// restored Role's own record): the process dies there, PostgreSQL and the
// API server unreachable to it, the role still under the old tag. The next
// operator resumes the adoption while the claimed record exists: the Role
// is Ready on its old role, retagged, with one record. Before, it saw its
// own record, took the adoption for done, found nothing under its new tag
// and tried to create: the name being taken, it stayed NotOwned (with
// server-chosen IDs, a second, empty resource).
func TestRestoreResumesAfterACrash(t *testing.T) {
	w := start(t, controller.Options{})
	ns, proxy := w.serverBehindProxy()
	r := role(ns, "app", pgtarget.RandomName("resume_"))
	w.create(r)
	w.ready(r)
	backup := restorable(r).(*v1alpha1.Role)
	old := r.UID
	w.stop()
	w.goByHand(r)
	w.create(backup)

	crashed := make(chan struct{})
	script := faultinject.NewScript(faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 1, Crash: true})
	script.OnCrash = func() {
		proxy.Refuse(true) // the process is gone: nothing of it reaches PostgreSQL either
		proxy.ResetAll()
		close(crashed)
	}
	w2 := startWith(t, controller.Options{RecordsNamespace: w.recNS}, nil, func(c client.Client) client.Client { return faultinject.WrapClient(c, script) })
	select {
	case <-crashed:
	case <-time.After(wait):
		t.Fatal("the restarted operator never wrote the adopting record")
	}
	w2.stop()
	if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(backup), backup); err != nil {
		t.Fatal(err)
	}
	if w.record(string(old)) == nil || w.record(string(backup.UID)) == nil {
		t.Fatal("the crash did not come between the new record and the old record's removal: the test proves nothing")
	}
	if tag, _ := w.roleTag(r.Spec.RoleName); tag != tagOf(r) {
		t.Fatalf("role tag %q after the crash, want the old %q: the test proves nothing", tag, tagOf(r))
	}

	proxy.Refuse(false)
	w3 := w.restart(controller.Options{})
	w3.ready(backup)
	if tag, ok := w3.roleTag(r.Spec.RoleName); !ok || tag != tagOf(backup) {
		t.Errorf("role %s: exists %v, tag %q; want the restored Role's %q", r.Spec.RoleName, ok, tag, tagOf(backup))
	}
	if w3.record(string(old)) != nil {
		t.Error("the predecessor's record stays")
	}
	if rec := w3.record(string(backup.UID)); rec == nil || len(rec.ExternalIDs) != 1 || rec.ExternalIDs[0] != r.Spec.RoleName {
		t.Errorf("the restored Role's record = %+v, want one holding %s", rec, r.Spec.RoleName)
	}
}

// Retain, then restore: the Database's default policy keeps the database
// and, now, its record, marked Retain; the sweeper reports it and never
// removes it, and the restored Database adopts the database it left. Before,
// the Retain delete removed the record, so the restore sat in
// AdoptionRefused for ever.
func TestRetainThenRestoreAdopts(t *testing.T) {
	w := start(t, sweepFast)
	ns := w.server()
	d := database(ns, "data", pgtarget.RandomName("kept_"), "")
	d.Spec.DeletionPolicy = "" // the default: Retain
	w.create(d)
	w.ready(d)
	if d.Spec.DeletionPolicy != v1alpha1.DeletionPolicyRetain {
		t.Fatalf("default deletion policy %q, want Retain", d.Spec.DeletionPolicy)
	}
	backup := restorable(d).(*v1alpha1.Database)
	old := string(d.UID)
	if err := w.c.Delete(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	w.waitGone(d)
	if got, ok := w.database(d.Spec.DatabaseName); !ok || got.Tag != tagOf(d) {
		t.Fatalf("Retain: database exists %v with tag %q; want it kept with %q", ok, got.Tag, tagOf(d))
	}
	rec := w.record(old)
	if rec == nil {
		t.Fatal("the Retain delete removed the cleanup record: a restored Database has nothing to adopt")
	}
	if rec.Policy != ledger.PolicyRetain {
		t.Errorf("kept record's policy %q, want Retain (the sweeper must never delete through it)", rec.Policy)
	}
	// The sweeper sees it, reports it, and keeps it.
	if notes := w.recordEvents(sweep.ReasonRetained, []string{old}); !strings.Contains(strings.Join(notes, "\n"), d.Spec.DatabaseName) {
		t.Errorf("Retained events %q do not name the database", notes)
	}
	if w.record(old) == nil {
		t.Fatal("the sweeper removed a retained record")
	}

	w.create(backup)
	w.ready(backup)
	if got, ok := w.database(d.Spec.DatabaseName); !ok || got.Tag != tagOf(backup) {
		t.Errorf("database %s after the restore: exists %v, tag %q; want the restored Database's", d.Spec.DatabaseName, ok, got.Tag)
	}
	if w.record(old) != nil || w.record(string(backup.UID)) == nil {
		t.Errorf("records after the restore: old %v, new %v; want only the new", w.record(old) != nil, w.record(string(backup.UID)) != nil)
	}
	if l := w.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}
}

// Namespace reuse is not a takeover. A tenant's namespace is deleted with
// the operator down and its records stranded; whoever creates a namespace
// of that name again, with a Server of the same name reaching the same
// deployment and a Role of the same name claiming the old UID (readable by
// any PostgreSQL login in the role's comment), does not adopt the old role
// nor get a password that logs in as it: the claim waits for an admin, and
// says how an admin approves it. Once an admin approves, the same object
// adopts the old role, without a second one. Before, the claim was honoured
// at once and the newcomer's generated password logged in as the old role.
func TestNamespaceReuseIsNotATakeover(t *testing.T) {
	w := start(t, controller.Options{})
	ns := w.namespace()
	w.serverIn(ns)
	victim := role(ns, "app", pgtarget.RandomName("victim_"))
	victim.Spec.Login = true
	victim.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}}
	w.create(victim)
	w.ready(victim)
	victimPassword := string(w.secret(ns, victim.GeneratedSecretName()).Data[v1alpha1.DefaultPasswordSecretKey])
	w.waitLogin(victim.Spec.RoleName, victimPassword)
	old := string(victim.UID)

	// The namespace goes while the operator is down; its record stays.
	w.stop()
	w.goByHand(victim, &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-admin"}})
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)
	if w.record(old) == nil {
		t.Fatal("the record went with the namespace: nothing to take over, the test proves nothing")
	}

	// Someone else creates the namespace again, claiming the old UID.
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	w.serverIn(ns)
	claim := role(ns, "app", victim.Spec.RoleName)
	claim.Spec.Login = true
	claim.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}}
	claim.Annotations = map[string]string{annotationUID: old}
	w.create(claim)
	w2 := w.restart(controller.Options{})

	var synced *metav1.Condition
	err := controlplane.WaitFor(t.Context(), wait, "the claim decided", func(ctx context.Context) (bool, error) {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return false, err
		}
		synced = meta.FindStatusCondition(claim.Status.Conditions, "Synced")
		ready := meta.FindStatusCondition(claim.Status.Conditions, "Ready")
		return (synced != nil && synced.Reason == reasonNeedsApproval) || (ready != nil && ready.Status == metav1.ConditionTrue), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if synced == nil || synced.Reason != reasonNeedsApproval {
		t.Fatalf("the newcomer's claim was honoured (conditions %+v): it took over the old role", claim.Status.Conditions)
	}
	wantCmd := "kubectl -n " + w.recNS + " annotate configmap " + ledger.ConfigMapName(types.UID(old)) + " " + annotationApproval + "=" + string(claim.UID)
	if !strings.Contains(synced.Message, wantCmd) {
		t.Errorf("Synced message %q does not tell an admin how to approve (%q)", synced.Message, wantCmd)
	}
	if tag, _ := w2.roleTag(victim.Spec.RoleName); tag != tagOf(victim) {
		t.Errorf("old role's tag %q, want it untouched (%q)", tag, tagOf(victim))
	}
	w2.mustLogin(victim.Spec.RoleName, victimPassword)
	var s corev1.Secret
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: claim.GeneratedSecretName()}, &s); err == nil {
		w2.mustNotLogin(victim.Spec.RoleName, string(s.Data[v1alpha1.DefaultPasswordSecretKey]))
	}

	// An admin who trusts the claim approves it, as the condition says.
	var cm corev1.ConfigMap
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: w.recNS, Name: ledger.ConfigMapName(types.UID(old))}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[annotationApproval] = string(claim.UID)
	if err := w.c.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	w2.ready(claim)
	if tag, ok := w2.roleTag(victim.Spec.RoleName); !ok || tag != tagOf(claim) {
		t.Errorf("after the approval the role exists %v with tag %q; want it adopted (%q)", ok, tag, tagOf(claim))
	}
	if w2.record(old) != nil || w2.record(string(claim.UID)) == nil {
		t.Error("after the approval the record did not pass to the approved object")
	}
	if l := w2.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}
}

// A plain re-create is not a claim. A Role whose finalizer was removed by
// hand leaves its role and record; a new Role of the same name, without
// the claim annotation, gets its own role, and the sweeper drops the old
// one by its exact identity once its settle window has passed, while the
// namesake lives on. Before, any namesake made the old record "adoptable"
// and the old role leaked for the namesake's whole life. The Server is in
// plain text on loopback, which this admin vouches for
// (SweepTrustedHosts, its host and port): the sweeper acts only through an
// authenticated connection.
func TestPlainRecreateIsNotAClaim(t *testing.T) {
	opts := sweepFast
	opts.SweepTrustedHosts = []string{testenv.Postgres(t).Addr()}
	w := start(t, opts)
	ns := w.server()
	first := role(ns, "app", pgtarget.RandomName("first_"))
	w.create(first)
	w.ready(first)
	old := string(first.UID)
	w.stop()
	w.goByHand(first)

	again := role(ns, "app", pgtarget.RandomName("again_"))
	w.create(again)
	w2 := w.restart(opts)
	w2.ready(again)
	err := controlplane.WaitFor(t.Context(), wait, "the sweeper drops the predecessor's role", func(context.Context) (bool, error) {
		_, ok := w2.roleTag(first.Spec.RoleName)
		return !ok && w2.record(old) == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tag, ok := w2.roleTag(again.Spec.RoleName); !ok || tag != tagOf(again) {
		t.Errorf("the namesake's role: exists %v, tag %q; want it untouched", ok, tag)
	}
	if w2.record(string(again.UID)) == nil {
		t.Error("the namesake's record went")
	}
	w2.ready(again)
}

// A restored namespace needs one admin action, not one per object. A
// namespace with two Roles is deleted with the operator down, their
// records stranded; it is restored from a backup (a new namespace UID,
// the Roles with their finale.dev/uid claims). Both claims wait
// (AdoptionNeedsApproval) and print the one command for the whole
// namespace; ledger's ApproveNamespace, which `finale approve` runs, then
// approves exactly the objects that claim records of that namespace and
// its earlier UID, and both Roles adopt their old roles. A third record
// of the namespace, whose Role was not restored, is approved for nobody.
// Before, an admin annotated each record by hand.
func TestRestoredNamespaceIsApprovedInOneAction(t *testing.T) {
	w := start(t, controller.Options{})
	ns := w.namespace()
	w.serverIn(ns)
	var before []*v1alpha1.Role
	for _, name := range []string{"app", "report", "gone"} {
		r := role(ns, name, pgtarget.RandomName("restored_"))
		w.create(r)
		w.ready(r)
		before = append(before, r)
	}
	var nsObj corev1.Namespace
	if err := w.c.Get(t.Context(), client.ObjectKey{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	earlier := nsObj.UID

	w.stop()
	backups := []*v1alpha1.Role{restorable(before[0]).(*v1alpha1.Role), restorable(before[1]).(*v1alpha1.Role)}
	w.goByHand(before[0], before[1], before[2], &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-admin"}})
	if err := w.c.Delete(t.Context(), &nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(&nsObj)

	// The restore: the namespace, its Server, two of its Roles (a backup
	// keeps their claims).
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	w.serverIn(ns)
	for _, b := range backups {
		w.create(b)
	}
	w2 := w.restart(controller.Options{})
	wantCmd := "finale approve --records-namespace " + w.recNS + " --namespace " + ns + " --from-uid " + string(earlier)
	for _, b := range backups {
		err := controlplane.WaitFor(t.Context(), wait, "the claim of "+b.Name+" waits for an admin", func(ctx context.Context) (bool, error) {
			if err := w.c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return false, err
			}
			synced := meta.FindStatusCondition(b.Status.Conditions, "Synced")
			return synced != nil && synced.Reason == reasonNeedsApproval, nil
		})
		if err != nil {
			t.Fatalf("%v (conditions %+v)", err, b.Status.Conditions)
		}
		if msg := meta.FindStatusCondition(b.Status.Conditions, "Synced").Message; !strings.Contains(msg, wantCmd) {
			t.Errorf("%s: Synced message %q does not print the namespace's one command %q", b.Name, msg, wantCmd)
		}
	}

	store, err := ledger.NewConfigMapStore(w.c, w.recNS)
	if err != nil {
		t.Fatal(err)
	}
	done, err := store.ApproveNamespace(t.Context(), w.c, ledger.ApproveRequest{Namespace: ns, From: earlier})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.ApprovalOutcome{}
	for _, a := range done {
		got[a.Owner.Name] = a.Outcome
	}
	want := map[string]ledger.ApprovalOutcome{"app": ledger.Approved, "report": ledger.Approved, "gone": ledger.NoClaimant}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("approval outcomes (-want +got):\n%s", diff)
	}
	for i, b := range backups {
		w2.ready(b)
		if tag, ok := w2.roleTag(before[i].Spec.RoleName); !ok || tag != tagOf(b) {
			t.Errorf("%s: role %s exists %v with tag %q; want it adopted (%q)", b.Name, before[i].Spec.RoleName, ok, tag, tagOf(b))
		}
		if w2.record(string(before[i].UID)) != nil || w2.record(string(b.UID)) == nil {
			t.Errorf("%s: the record did not pass to the restored Role", b.Name)
		}
	}
	if rec := w2.record(string(before[2].UID)); rec == nil || rec.Approval != "" {
		t.Errorf("the record of the Role not restored: %+v, want it kept and approved for nobody", rec)
	}
	// The Role not restored is the sweeper's after its settle window
	// (minutes at the defaults) or an admin's: the admin's part here, so
	// that the tests after this one find nothing of it in the shared
	// PostgreSQL.
	w2.stop()
	if _, err := w.admin.Exec(t.Context(), "DROP ROLE IF EXISTS "+pgx.Identifier{before[2].Spec.RoleName}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	rec := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.recNS, Name: ledger.ConfigMapName(before[2].UID)}}
	if err := w.c.Delete(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
}
