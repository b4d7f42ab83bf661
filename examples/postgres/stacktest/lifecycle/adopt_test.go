package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// annotationUID is lifecycle.AnnotationUID, spelled out: the annotation a
// backup keeps, and the one a restored object claims its predecessor by.
const annotationUID = "finale.dev/uid"

// retagging is the Widget adapter with Retag, so that a Widget can adopt
// its predecessor's role. fail, when set, is asked before each retag.
type retagging struct {
	lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target]
	fail func() error
}

func (a retagging) Retag(ctx context.Context, t *pgtarget.Target, id, from, to string) error {
	if a.fail != nil {
		if err := a.fail(); err != nil {
			return err
		}
	}
	ids, err := t.FindByTag(ctx, from)
	if err != nil || !slices.Contains(ids, id) {
		return err // moved already, or not the predecessor's
	}
	return t.Exec(ctx, `COMMENT ON ROLE "`+id+`" IS '`+to+`'`)
}

// restore lets w go without its cleanup (its finalizer removed by hand, as
// a forced namespace deletion or a backup tool's wipe does; its record
// stays) and creates its restored copy: the same name and spec, with the
// annotation a backup keeps, naming the old UID.
func restore(t *testing.T, e *env, w *Widget) (old types.UID, restored *Widget) {
	t.Helper()
	live := e.get(w)
	old = live.UID
	if live.Annotations[annotationUID] != string(old) {
		t.Fatalf("annotation %s = %q, want the object's UID %s", annotationUID, live.Annotations[annotationUID], old)
	}
	live.Finalizers = nil
	if err := e.c.Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(t, e, live); err != nil {
		t.Fatal(err)
	}
	restored = &Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Annotations: map[string]string{annotationUID: string(old)}},
		Spec:       live.Spec,
	}
	restored.SetGroupVersionKind(widgetGV.WithKind("Widget"))
	if err := e.c.Create(t.Context(), restored); err != nil {
		t.Fatal(err)
	}
	return old, restored
}

// An adoption interrupted between ledger.Adopt's steps (new record
// written, resources retagged, old record removed) is resumed while the
// claimed record exists: the restored object ends owning its predecessor's
// role under its own tag, with one record, and nothing is ever created
// for it. Before, the next reconcile saw the object's own record, took the
// adoption for finished and created on the empty new tag (here: a create
// refused because the name is taken; with server-chosen IDs, a second
// resource), or left the old record behind for the object's whole life.
func TestInterruptedAdoptionResumes(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	for name, tc := range map[string]struct {
		// faults arm the restarted operator's API client; retagFails fails
		// the first retag (a connection reset in PostgreSQL).
		faults     []faultinject.Fault
		retagFails bool
		// crash: the process dies right after the first write (the new
		// record): nothing else it would do lands, here or in PostgreSQL,
		// and a new process, with nothing in memory, carries on.
		crash bool
	}{
		"retag fails":              {retagFails: true},
		"old record removal fails": {faults: []faultinject.Fault{{Verb: faultinject.Delete, Kind: "ConfigMap", Nth: 1, Err: unavailable}}},
		"crash after the new record": {
			faults: []faultinject.Fault{{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 1, Crash: true}},
			crash:  true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			var dead atomic.Bool
			var retags atomic.Int32
			a := retagging{AdapterFuncs: e.adapter().(lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target])}
			a.fail = func() error {
				switch {
				case dead.Load():
					return errors.New("the process is gone")
				case retags.Add(1) == 1 && tc.retagFails:
					return errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
				}
				return nil
			}
			reconciler := func(c client.Client, led *ledger.Ledger) *lifecycle.Reconciler[*Widget, string, *pgtarget.Target] {
				r, err := lifecycle.New(c, func() *Widget { return &Widget{} }, lifecycle.Adapter[*Widget, string, *pgtarget.Target](a), e.pool, lifecycle.Options{
					Finalizer: finalizer, Scheme: e.c.Scheme(), Ledger: led, Recorder: e.events,
					Skip: lifecycle.SkipHold | lifecycle.SkipWatchdog,
				})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}

			w := e.widget("a", "")
			reconcileOnce(t, reconciler(e.c, e.led), w)
			if st, _ := condition(e.get(w), lifecycle.ConditionReady); st != metav1.ConditionTrue {
				t.Fatalf("the original is not Ready: %s", st)
			}
			role := w.Spec.RoleName
			old, restored := restore(t, e, w)

			// The restarted operator, with the fault.
			script := faultinject.NewScript(tc.faults...)
			script.OnCrash = func() { dead.Store(true) }
			faulted := faultinject.WrapClient(e.c, script)
			r := reconciler(faulted, ledgerOn(mustStore(t, faulted, e.store.Namespace())))
			reconcileFailing(t, r, restored)
			if tc.crash {
				if !script.Crashed() {
					t.Fatal("the crash never came: the test proves nothing")
				}
				if e.record(old) == nil || e.record(e.get(restored).UID) == nil {
					t.Fatal("the crash did not come between the two records")
				}
				// A new process: nothing remembered, a clean client.
				dead.Store(false)
				r = reconciler(e.c, ledgerOn(e.store))
			}
			if tags, _ := e.target.FindByTag(t.Context(), ledger.Tag(ledger.Owner{Kind: "Widget", UID: old})); tc.faults != nil && tc.faults[0].Verb == faultinject.Delete && len(tags) != 0 {
				t.Fatalf("the role still carries the old tag after the retag step: %q", tags)
			}

			for range 3 { // the adoption, then the annotation, then steady
				reconcileOnce(t, r, restored)
			}
			got := e.get(restored)
			if st, reason := condition(got, lifecycle.ConditionReady); st != metav1.ConditionTrue {
				st2, r2 := condition(got, lifecycle.ConditionSynced)
				t.Fatalf("restored object Ready = %s/%s (Synced %s/%s), want True", st, reason, st2, r2)
			}
			if n := e.creates.Load(); n != 1 {
				t.Errorf("create called %d times in all; want 1 (the original): the restore must adopt, never create", n)
			}
			tagged, err := e.target.FindByTag(t.Context(), ledger.Tag(ledger.Owner{Kind: "Widget", UID: got.UID}))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{role}, tagged); diff != "" {
				t.Errorf("roles carrying the restored object's tag (-want +got):\n%s", diff)
			}
			if e.record(old) != nil {
				t.Error("the predecessor's record stays after the adoption: nothing sweeps it while the object lives")
			}
			if rec := e.record(got.UID); rec == nil || !cmp.Equal(rec.ExternalIDs, []string{role}) {
				t.Errorf("the restored object's record = %+v, want one holding %s", rec, role)
			}
			if got.Annotations[annotationUID] != string(got.UID) {
				t.Errorf("annotation %s = %q after the adoption, want the object's own UID", annotationUID, got.Annotations[annotationUID])
			}
		})
	}
}
