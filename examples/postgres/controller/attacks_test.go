package controller_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/sweep"
)

// The attacks on the sweeper (issue: the sweeper fails closed). Each one
// strands cleanup records the way an outage does (the owners' namespace
// deleted while the operator was down), then tries to make the sweeper
// remove them while the roles live on, or delete someone else's role. Each
// must end with the records kept and reported and every real role in
// place.

// sweepFast are operator options whose sweeper acts within a second.
var sweepFast = controller.Options{SweepSettle: time.Millisecond, SweepClockSkew: time.Millisecond, SweepInterval: 200 * time.Millisecond}

// ownServer starts a PostgreSQL server of the test's own (the attacks copy
// it and stop it).
func ownServer(t *testing.T) *pgserver.Server {
	t.Helper()
	pg, err := pgserver.Start(t.Context(), pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	return pg
}

// serverOn creates Server name (and its credential Secret) in ns, pointing
// at addr with pg's admin login.
func (w *world) serverOn(ns, name string, pg *pgserver.Server, addr string, ssl v1alpha1.SSLMode) {
	w.t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		w.t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	w.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-admin"},
		Data:       map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(pg.Password)},
	})
	w.create(&v1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ServerSpec{
			Host: host, Port: int32(p), SSLMode: ssl,
			CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: name + "-admin"},
		},
	})
}

// stranded is what an outage leaves: roles in PostgreSQL, their records in
// the operator's namespace, no owners.
type stranded struct {
	roles []string
	uids  []string
}

// strand creates n Roles through a tenant's Server on pg, stops the
// operator, and deletes the tenant's namespace by hand (finalizers
// removed, as an admin forcing it would), so records and roles outlive
// their owners.
func (w *world) strand(pg *pgserver.Server, n int) stranded {
	w.t.Helper()
	ns := w.namespace()
	w.serverOn(ns, "pg", pg, pg.Addr(), v1alpha1.SSLModeDisable)
	var st stranded
	var rs []*v1alpha1.Role
	for i := range n {
		r := role(ns, fmt.Sprintf("r%d", i), pgtarget.RandomName("stranded_"))
		w.create(r)
		rs = append(rs, r)
	}
	for _, r := range rs {
		w.ready(r)
		st.roles = append(st.roles, r.Spec.RoleName)
		st.uids = append(st.uids, string(r.UID))
	}
	w.stop()
	objs := []client.Object{&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-admin"}}}
	for _, r := range rs {
		objs = append(objs, r)
	}
	for _, o := range objs {
		if err := w.c.Get(w.t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			w.t.Fatal(err)
		}
		o.SetFinalizers(nil)
		if err := w.c.Update(w.t.Context(), o); err != nil {
			w.t.Fatal(err)
		}
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(w.t.Context(), nsObj); err != nil {
		w.t.Fatal(err)
	}
	if err := controlplane.WaitGone(w.t.Context(), w.c, nsObj, wait); err != nil {
		w.t.Fatal(err)
	}
	for _, u := range st.uids {
		if w.record(u) == nil {
			w.t.Fatalf("record %s went with the outage; nothing to attack", u)
		}
	}
	return st
}

// restart runs the operator again on the same records namespace.
func (w *world) restart(o controller.Options) *world {
	w.t.Helper()
	o.RecordsNamespace = w.recNS
	return start(w.t, o)
}

func roleOn(t testing.TB, pg *pgserver.Server, name string) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	_, ok, err := catalog.ObserveRole(t.Context(), conn, name)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func execOn(t testing.TB, pg *pgserver.Server, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatal(err)
	}
}

// recordEvents waits until the record of every owner UID has an Event of
// reason and returns the notes, so a test knows the sweeper (or the
// release) looked and decided.
func (w *world) recordEvents(reason string, uids []string) []string {
	w.t.Helper()
	var notes []string
	err := controlplane.WaitFor(w.t.Context(), wait, "sweep events "+reason, func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := w.c.List(ctx, &evs, client.InNamespace(w.recNS)); err != nil {
			return false, err
		}
		notes = nil
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if ev.Reason == reason {
				seen[ev.Regarding.Name] = true
				notes = append(notes, ev.Note)
			}
		}
		for _, u := range uids {
			if !seen[ledger.ConfigMapName(typesUID(u))] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return notes
}

// kept checks the records are there and the roles live in pg.
func (w *world) kept(st stranded, pg *pgserver.Server) {
	w.t.Helper()
	for i, u := range st.uids {
		if w.record(u) == nil {
			w.t.Errorf("record of role %s removed while the role lives on", st.roles[i])
		}
		if !roleOn(w.t, pg, st.roles[i]) {
			w.t.Errorf("role %s gone from the original deployment", st.roles[i])
		}
	}
}

// swept waits until the records are removed and the roles dropped in pg.
func (w *world) swept(st stranded, pg *pgserver.Server) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, "the sweeper drops the roles and removes their records", func(context.Context) (bool, error) {
		for i, u := range st.uids {
			if w.record(u) != nil || roleOn(w.t, pg, st.roles[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// A copy of the deployment (pg_basebackup after the sentinel existed: the
// same system identifier, the same sentinel) with the roles dropped there,
// reached by a tenant's own Server, must not confirm anything; nor may
// another tenant's Server to the original be borrowed. The sweeper uses
// only the record's own Server (gone with its namespace) and Servers an
// admin designated: once one to the original is designated (verify-full,
// the one sslMode the sweeper acts through), it sweeps there, and says
// which connection it used.
func TestCopyOfTheDeploymentConfirmsNothing(t *testing.T) {
	pg, ca := ownTLSServer(t)
	w := start(t, sweepFast)
	st := w.strand(pg, 2)
	cp, err := pg.Copy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	for _, r := range st.roles {
		execOn(t, cp, "DROP ROLE "+r)
	}
	tenant := w.namespace()
	w.serverOn(tenant, "copy", cp, cp.Addr(), v1alpha1.SSLModeDisable)
	other := w.namespace()
	w.serverOn(other, "pg", pg, pg.Addr(), v1alpha1.SSLModeDisable)

	w2 := w.restart(sweepFast)
	notes := w2.recordEvents(sweep.ReasonUnreachable, st.uids)
	w2.kept(st, pg)
	for _, n := range notes {
		if !strings.Contains(n, "tried: none available") {
			t.Errorf("the sweeper tried a connection it may not use: %q", n)
		}
	}

	// The admin designates a Server to the original.
	w2.serverOnTLS(w2.recNS, "sweeper", pg, pg.Addr(), v1alpha1.SSLModeVerifyFull, ca)
	w2.swept(st, pg)
	for _, n := range w2.recordEvents(sweep.ReasonSwept, st.uids) {
		if !strings.Contains(n, "designated Server "+w2.recNS+"/sweeper") {
			t.Errorf("swept event does not name the connection used: %q", n)
		}
	}
}

// Whoever can write the records namespace edits a stranded record to name
// a live tenant's role (its ID and its tag) and another owner: the record's
// MAC no longer verifies, so the sweeper reports it and deletes nothing,
// though a designated Server could reach the role.
func TestEditedRecordDeletesNothing(t *testing.T) {
	pg := ownServer(t)
	w := start(t, sweepFast)
	victimNS := w.namespace()
	w.serverOn(victimNS, "pg", pg, pg.Addr(), v1alpha1.SSLModeDisable)
	victim := role(victimNS, "victim", pgtarget.RandomName("victim_"))
	w.create(victim)
	w.ready(victim)
	st := w.strand(pg, 1)
	var cm corev1.ConfigMap
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: w.recNS, Name: ledger.ConfigMapName(typesUID(st.uids[0]))}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["externalIDs"] = `["` + victim.Spec.RoleName + `"]`
	if err := w.c.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	w2 := w.restart(sweepFast)
	w2.serverOn(w2.recNS, "sweeper", pg, pg.Addr(), v1alpha1.SSLModeDisable)
	notes := w2.recordEvents(sweep.ReasonInvalid, st.uids)
	if !strings.Contains(strings.Join(notes, "\n"), "not signed by this operator's key") {
		t.Errorf("invalid-record events do not say why: %q", notes)
	}
	if !roleOn(t, pg, victim.Spec.RoleName) {
		t.Fatal("the edited record deleted the victim's role")
	}
	w2.kept(st, pg)
	// The victim is untouched in Kubernetes too.
	w2.ready(victim)
}

// restorable is an object as a backup keeps it: metadata (annotations
// included) and spec, without what the apiserver assigns.
func restorable(o client.Object) client.Object {
	c := o.DeepCopyObject().(client.Object)
	c.SetUID("")
	c.SetResourceVersion("")
	c.SetCreationTimestamp(metav1.Time{})
	c.SetDeletionTimestamp(nil)
	c.SetFinalizers(nil)
	c.SetGeneration(0)
	c.SetManagedFields(nil)
	switch x := c.(type) {
	case *v1alpha1.Role:
		x.Status = v1alpha1.RoleStatus{}
	case *v1alpha1.Database:
		x.Status = v1alpha1.DatabaseStatus{}
	case *v1alpha1.Server:
		x.Status = v1alpha1.ServerStatus{}
	}
	return c
}

// A Velero-style restore: objects and records backed up, the namespace
// deleted with the operator down, the namespace and its objects restored
// with new UIDs (annotations kept, as a restore keeps them), the records
// restored too. The namespace is a new one of the same name, so each claim
// waits for an admin's approval (whoever re-creates a namespace must not
// inherit what was in it); the admin restoring approves each, as the
// condition says. Nothing is dropped, every object is Ready and owns its
// old resource under its new UID; a copy of one object restored into
// another namespace adopts nothing.
func TestRestoreAdoptsAcrossUIDs(t *testing.T) {
	w := start(t, sweepFast)
	ns := w.namespace()
	w.serverOn(ns, "pg", w.pg, w.pg.Addr(), v1alpha1.SSLModeDisable)
	roles := []*v1alpha1.Role{role(ns, "r0", pgtarget.RandomName("restore_")), role(ns, "r1", pgtarget.RandomName("restore_"))}
	db := database(ns, "d0", pgtarget.RandomName("restore_"), "")
	objs := []client.Object{roles[0], roles[1], db}
	for _, o := range objs {
		w.create(o)
	}
	for _, o := range objs {
		w.ready(o)
	}
	// The backup.
	var backup []client.Object
	for _, o := range append([]client.Object{
		&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-admin"}}}, objs...) {
		if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		backup = append(backup, restorable(o))
	}
	var records []*corev1.ConfigMap
	for _, o := range objs {
		var cm corev1.ConfigMap
		if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: w.recNS, Name: ledger.ConfigMapName(o.GetUID())}, &cm); err != nil {
			t.Fatal(err)
		}
		records = append(records, cm.DeepCopy())
	}
	oldUIDs := map[string]string{}
	for _, o := range objs {
		oldUIDs[o.GetName()] = string(o.GetUID())
	}

	// The disaster: the operator is down, the namespace goes (forced), the
	// records are lost.
	w.stop()
	for _, o := range backup {
		live := o.DeepCopyObject().(client.Object)
		if err := w.c.Get(t.Context(), client.ObjectKeyFromObject(o), live); err != nil {
			t.Fatal(err)
		}
		live.SetFinalizers(nil)
		if err := w.c.Update(t.Context(), live); err != nil {
			t.Fatal(err)
		}
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)
	for _, cm := range records {
		if err := w.c.Delete(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}

	// The restore.
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for _, cm := range records {
		r := cm.DeepCopy()
		r.UID, r.ResourceVersion, r.CreationTimestamp = "", "", metav1.Time{}
		w.create(r)
	}
	for _, o := range backup {
		w.create(o.DeepCopyObject().(client.Object))
	}
	// A copy of r0 restored into another namespace, claiming the same UID.
	elsewhere := w.namespace()
	w.serverOn(elsewhere, "pg", w.pg, w.pg.Addr(), v1alpha1.SSLModeDisable)
	intruder := restorable(roles[0]).(*v1alpha1.Role)
	intruder.Namespace = elsewhere
	intruder.Spec.RoleName = pgtarget.RandomName("intruder_")
	w.create(intruder)

	w2 := w.restart(sweepFast)
	for _, o := range backup[2:] {
		w2.waitCondition(o, "Synced", metav1.ConditionFalse, reasonNeedsApproval)
		var cm corev1.ConfigMap
		if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: w.recNS, Name: ledger.ConfigMapName(typesUID(oldUIDs[o.GetName()]))}, &cm); err != nil {
			t.Fatal(err)
		}
		cm.Annotations = map[string]string{annotationApproval: string(o.GetUID())}
		if err := w.c.Update(t.Context(), &cm); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range backup[2:] {
		w2.ready(o)
		if string(o.GetUID()) == oldUIDs[o.GetName()] {
			t.Fatalf("%s kept its UID: the test proves nothing", o.GetName())
		}
		if a := o.GetAnnotations()["finale.dev/uid"]; a != string(o.GetUID()) {
			t.Errorf("%s: annotation finale.dev/uid = %q after adoption, want its own UID", o.GetName(), a)
		}
		if rec := w2.record(string(o.GetUID())); rec == nil {
			t.Errorf("%s has no record under its new UID", o.GetName())
		}
		if rec := w2.record(oldUIDs[o.GetName()]); rec != nil {
			t.Errorf("%s: the record of its previous UID stays", o.GetName())
		}
	}
	for _, r := range roles {
		if tag, ok := w2.roleTag(r.Spec.RoleName); !ok {
			t.Errorf("role %s dropped across the restore", r.Spec.RoleName)
		} else if !strings.HasSuffix(tag, ":"+string(backup[2+slicesIndex(objs, client.Object(r))].GetUID())) {
			t.Errorf("role %s carries %q, not its restored owner's tag", r.Spec.RoleName, tag)
		}
	}
	if d, ok := w2.database(db.Spec.DatabaseName); !ok || !strings.HasSuffix(d.Tag, ":"+string(backup[4].GetUID())) {
		t.Errorf("database %s: exists %v, tag %q; want its restored owner's", db.Spec.DatabaseName, ok, d.Tag)
	}
	w2.waitCondition(intruder, "Synced", metav1.ConditionFalse, "AdoptionRefused")
	if _, ok := w2.roleTag(intruder.Spec.RoleName); ok {
		t.Error("the intruder created a role while its claim was refused")
	}
	if l := w2.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}
}

func slicesIndex(objs []client.Object, o client.Object) int {
	for i, x := range objs {
		if x.GetName() == o.GetName() {
			return i
		}
	}
	return -1
}
