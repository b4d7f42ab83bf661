package lifecycle_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// puts counts the record writes that reach the store.
type puts struct {
	ledger.Store
	n atomic.Int32
}

func (p *puts) Put(ctx context.Context, r *ledger.Record) error {
	p.n.Add(1)
	return p.Store.Put(ctx, r)
}

// counting is the tiny adapter, counting the lookups and proofs the
// reconciler and the ledger make.
type counting struct {
	lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target]
	observes, proofs atomic.Int32
}

func (f *counting) Observe(ctx context.Context, t *pgtarget.Target, w *Widget, tag string) (lifecycle.Observation, error) {
	f.observes.Add(1)
	return f.AdapterFuncs.Observe(ctx, t, w, tag)
}

func (f *counting) Prove(ctx context.Context, t *pgtarget.Target, q ledger.Question) (ledger.Answer, error) {
	f.proofs.Add(1)
	return f.AdapterFuncs.Prove(ctx, t, q)
}

// An adapter that declares its ID gets it into the record before the
// create (the write the create waits for), saves the record write after
// the create when the create returns that ID, and still gets a different
// returned ID recorded; cleanup then deletes both (the declared one that
// never existed counts as gone) and removes the record.
func TestDeclaredIDs(t *testing.T) {
	cases := map[string]struct {
		// declare derives the declared ID from the role name.
		declare  func(role string) string
		wantIDs  func(role string) []string
		wantPuts int32
	}{
		"no declaration: the IDs are written after the create": {
			wantIDs:  func(role string) []string { return []string{role} },
			wantPuts: 2,
		},
		"declared ID returned: no write after the create": {
			declare:  func(role string) string { return role },
			wantIDs:  func(role string) []string { return []string{role} },
			wantPuts: 1,
		},
		"another ID returned: recorded after the create": {
			declare:  func(role string) string { return role + "_declared" },
			wantIDs:  func(role string) []string { return []string{role + "_declared", role} },
			wantPuts: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			store := &puts{Store: e.store}
			a := e.adapter().(lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target])
			if tc.declare != nil {
				a.DeclareIDFn = func(w *Widget, _ string) (string, bool) { return tc.declare(w.Spec.RoleName), true }
			}
			w := e.widget("d", "")
			var atCreate []string
			e.createHook = func(ctx context.Context) error {
				if rec := e.record(e.get(w).UID); rec != nil {
					atCreate = rec.ExternalIDs
				}
				return nil
			}
			r, err := lifecycle.New(e.c, func() *Widget { return &Widget{} }, a, e.pool,
				lifecycle.Options{Finalizer: finalizer, Scheme: e.c.Scheme(), Ledger: ledgerOn(store), Skip: lifecycle.SkipHold | lifecycle.SkipWatchdog})
			if err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, w)
			role := w.Spec.RoleName
			if tc.declare != nil && !slices.Contains(atCreate, tc.declare(role)) {
				t.Errorf("record at create time holds %q, want the declared %s", atCreate, tc.declare(role))
			}
			if n := store.n.Load(); n != tc.wantPuts {
				t.Errorf("record writes for a create: %d, want %d", n, tc.wantPuts)
			}
			rec := e.record(e.get(w).UID)
			if rec == nil {
				t.Fatal("no record after create")
			}
			if diff := cmp.Diff(tc.wantIDs(role), rec.ExternalIDs); diff != "" {
				t.Errorf("record IDs (-want +got):\n%s", diff)
			}

			if err := e.c.Delete(t.Context(), w); err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, w)
			if err := waitGone(t, e, w); err != nil {
				t.Fatal(err)
			}
			if e.roleExists(role) {
				t.Errorf("role %s survived the deletion", role)
			}
			if rec := e.record(rec.Owner.UID); rec != nil {
				t.Errorf("record stays after the confirmed delete: %+v", rec)
			}
		})
	}
}

// The round trips of a lifecycle: a create observes once and proves once
// (the proof also lists what carries the tag, so the ledger needs no lookup
// of its own); a delete proves before and after deleting and observes
// nothing.
func TestRoundTripsPerLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	f := &counting{AdapterFuncs: e.adapter().(lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target])}
	r, err := lifecycle.New(e.c, func() *Widget { return &Widget{} }, lifecycle.Adapter[*Widget, string, *pgtarget.Target](f), e.pool,
		lifecycle.Options{Finalizer: finalizer, Scheme: e.c.Scheme(), Ledger: e.led, Skip: lifecycle.SkipHold | lifecycle.SkipWatchdog})
	if err != nil {
		t.Fatal(err)
	}
	w := e.widget("f", "")
	reconcileOnce(t, r, w)
	if diff := cmp.Diff([2]int32{1, 1}, [2]int32{f.observes.Load(), f.proofs.Load()}); diff != "" {
		t.Errorf("create: [observes proofs] (-want +got):\n%s", diff)
	}
	uid := e.get(w).UID
	if err := e.c.Delete(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, w)
	if err := waitGone(t, e, w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([2]int32{1, 3}, [2]int32{f.observes.Load(), f.proofs.Load()}); diff != "" {
		t.Errorf("after delete: [observes proofs] (-want +got):\n%s", diff)
	}
	if e.roleExists(w.Spec.RoleName) || e.record(uid) != nil {
		t.Error("role or record left after the deletion")
	}
}
