package controller_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/lifecycle"
)

// The Role adapter declares its ID (the role name) before the create: the record
// holds it from the write that precedes the create, so a Role lifecycle
// writes its record exactly twice (create, delete) and never updates it.
func TestDeclaredIDSavesTheRecordUpdate(t *testing.T) {
	script := faultinject.NewScript()
	w := startWith(t, controller.Options{}, nil, func(c client.Client) client.Client { return faultinject.WrapClient(c, script) })
	ns := w.server()
	r := role(ns, "declared", pgtarget.RandomName("declared_"))
	w.create(r)
	w.ready(r)
	id := r.Spec.RoleName
	if rec := w.record(string(r.UID)); rec == nil || !slices.Equal(rec.ExternalIDs, []string{id}) {
		t.Errorf("record %+v, want IDs [%s]", rec, id)
	}
	if err := w.c.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	w.waitGone(r)
	w.waitGoneFromPostgres("role", r.Spec.RoleName)
	got := map[faultinject.Verb]int{}
	for _, c := range script.Calls() {
		if c.Kind == "ConfigMap" && c.Verb.IsWrite() && c.Name == "finale-cleanup-"+string(r.UID) {
			got[c.Verb]++
		}
	}
	want := map[faultinject.Verb]int{faultinject.Create: 1, faultinject.Delete: 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("record writes (-want +got):\n%s", d)
	}
}

// A declared ID whose create failed (the name is someone else's role) is in
// the record, yet it neither touches that role nor holds the deletion: the
// role the ID names (that name carrying this Role's tag) does not exist.
func TestDeclaredIDOfATakenNameDoesNotBlockDeletion(t *testing.T) {
	w := start(t, controller.Options{})
	ns := w.server()
	name := pgtarget.RandomName("taken_")
	if _, err := w.admin.Exec(t.Context(), "CREATE ROLE "+name+"; COMMENT ON ROLE "+name+" IS 'not finale'"); err != nil {
		t.Fatal(err)
	}
	r := role(ns, "taken", name)
	w.create(r)
	w.waitCondition(r, lifecycle.ConditionSynced, metav1.ConditionFalse, string(catalog.ReasonNotOwned))
	if rec := w.record(string(r.UID)); rec == nil || !slices.Contains(rec.ExternalIDs, name) {
		t.Errorf("record %+v lacks the declared ID", rec)
	}
	if err := w.c.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	w.waitGone(r)
	if tag, ok := w.roleTag(name); !ok || tag != "not finale" {
		t.Errorf("someone else's role %s: exists %v, comment %q; want it untouched", name, ok, tag)
	}
	if rec := w.record(string(r.UID)); rec != nil {
		t.Errorf("record stays after the deletion: %+v", rec)
	}
	var left v1alpha1.RoleList
	if err := w.c.List(t.Context(), &left, client.InNamespace(ns)); err != nil || len(left.Items) != 0 {
		t.Errorf("Roles left: %d (err %v)", len(left.Items), err)
	}
}
