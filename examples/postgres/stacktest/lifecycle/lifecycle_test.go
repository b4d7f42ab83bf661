package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/watchdog"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func reconcileOnce(t *testing.T, r reconcile.Reconciler, w *Widget) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

// reconcileFailing runs one reconcile that must fail with an error: a
// transient failure goes back to the workqueue, whose rate limiter backs
// off and counts it.
func reconcileFailing(t *testing.T, r reconcile.Reconciler, w *Widget) error {
	t.Helper()
	res, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)})
	if err == nil {
		t.Fatalf("reconcile succeeded (%+v); want a failure returned to the workqueue", res)
	}
	if res.RequeueAfter != 0 {
		t.Errorf("a failed reconcile asks for RequeueAfter %s besides its error: controller-runtime ignores one of them", res.RequeueAfter)
	}
	return err
}

func condition(w *Widget, typ string) (metav1.ConditionStatus, string) {
	c := meta.FindStatusCondition(w.Status.Conditions, typ)
	if c == nil {
		return "", ""
	}
	return c.Status, c.Reason
}

// The record exists, in the operator's namespace, before the create runs;
// afterwards it holds the exact ID, and the role carries the tag.
func TestRecordBeforeCreate(t *testing.T) {
	e := newEnv(t, nil)
	w := e.widget("a", "")
	var recordAtCreate bool
	e.createHook = func(ctx context.Context) error {
		recordAtCreate = e.record(e.get(w).UID) != nil
		return nil
	}
	reconcileOnce(t, e.reconciler(nil, lifecycle.Options{Ledger: e.led}), w)

	got := e.get(w)
	if !recordAtCreate {
		t.Error("create ran before the cleanup record existed")
	}
	if !slices.Contains(got.Finalizers, finalizer) {
		t.Errorf("finalizers %q lack %s", got.Finalizers, finalizer)
	}
	rec := e.record(got.UID)
	if rec == nil {
		t.Fatal("no record after create")
	}
	if diff := cmp.Diff([]string{w.Spec.RoleName}, rec.ExternalIDs); diff != "" {
		t.Errorf("record IDs (-want +got):\n%s", diff)
	}
	ids, err := e.target.FindByTag(t.Context(), rec.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{w.Spec.RoleName}, ids); diff != "" {
		t.Errorf("roles carrying %s (-want +got):\n%s", rec.Tag, diff)
	}
	if st, reason := condition(got, lifecycle.ConditionReady); st != metav1.ConditionTrue || reason != lifecycle.ReasonAvailable {
		t.Errorf("Ready = %s/%s, want True/%s", st, reason, lifecycle.ReasonAvailable)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
	}
}

// No record, no create: a failed record write leaves nothing external and
// says so in Synced; once writes work again the create happens.
func TestFailedRecordWriteMeansNoCreate(t *testing.T) {
	script := faultinject.NewScript(faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Err: apierrors.NewServiceUnavailable("etcd is sad")})
	e := newEnv(t, nil)
	e.store = mustStore(t, faultinject.WrapClient(e.c, script), e.store.Namespace())
	e.led = ledgerOn(e.store)
	w := e.widget("a", "")
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led})
	reconcileFailing(t, r, w)

	if n := e.creates.Load(); n != 0 {
		t.Errorf("create called %d times without a record", n)
	}
	if e.roleExists(w.Spec.RoleName) {
		t.Errorf("role %s exists although its record was never written", w.Spec.RoleName)
	}
	if st, reason := condition(e.get(w), lifecycle.ConditionSynced); st != metav1.ConditionFalse || reason != lifecycle.ReasonRecordFailed {
		t.Errorf("Synced = %s/%s, want False/%s", st, reason, lifecycle.ReasonRecordFailed)
	}

	script.Recover()
	reconcileOnce(t, r, w)
	if !e.roleExists(w.Spec.RoleName) || e.creates.Load() != 1 {
		t.Errorf("after recovery: role exists %v, creates %d; want true, 1", e.roleExists(w.Spec.RoleName), e.creates.Load())
	}
}

// A create whose answer is lost (the process dies between the create and
// recording its ID) is adopted by its tag on the next reconcile: one role,
// one create, the ID recorded, an Adopted Event.
func TestLostCreateIsAdoptedNotDuplicated(t *testing.T) {
	cases := map[string]struct {
		// lose arranges for the first create's answer to be lost.
		lose func(e *env, script *faultinject.Script)
	}{
		"create answer lost": {lose: func(e *env, _ *faultinject.Script) {
			e.afterCreate = func() error { return context.DeadlineExceeded }
		}},
		"record ID write fails after create": {lose: func(_ *env, script *faultinject.Script) {
			script.Add(faultinject.Fault{Verb: faultinject.Update, Kind: "ConfigMap", Err: apierrors.NewServiceUnavailable("crash")})
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			script := faultinject.NewScript()
			e := newEnv(t, nil)
			e.store = mustStore(t, faultinject.WrapClient(e.c, script), e.store.Namespace())
			e.led = ledgerOn(e.store)
			tc.lose(e, script)
			adoptedBefore := adoptions(t)
			w := e.widget("a", "")
			r := e.reconciler(nil, lifecycle.Options{Ledger: e.led})
			reconcileFailing(t, r, w)
			if !e.roleExists(w.Spec.RoleName) {
				t.Fatal("the lost create did not land; the test proves nothing")
			}
			if rec := e.record(e.get(w).UID); rec == nil || len(rec.ExternalIDs) != 0 {
				t.Fatalf("record after the lost answer = %+v, want one without IDs", rec)
			}
			e.events.take()

			e.afterCreate = nil
			script.Recover()
			reconcileOnce(t, r, w)

			if n := e.creates.Load(); n != 1 {
				t.Errorf("create called %d times, want 1", n)
			}
			rec := e.record(e.get(w).UID)
			if rec == nil {
				t.Fatal("record gone")
			}
			if diff := cmp.Diff([]string{w.Spec.RoleName}, rec.ExternalIDs); diff != "" {
				t.Errorf("record IDs (-want +got):\n%s", diff)
			}
			if !slices.Contains(e.events.take(), event{"Normal", lifecycle.ReasonAdopted}) {
				t.Error("no Adopted event")
			}
			if got := adoptions(t) - adoptedBefore; got != 1 {
				t.Errorf("adoptions counted: %v, want 1", got)
			}
		})
	}
}

// Deletion confirms the external delete before it removes the record, and
// removes the finalizer last; a failing or lying delete keeps both, and the
// watchdog sees every attempt.
func TestDeletionConfirmsBeforeReleasing(t *testing.T) {
	e := newEnv(t, nil)
	w := e.widget("a", "")
	wd := watchdog.New(watchdog.Options{Scheme: e.c.Scheme()})
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led, Watchdog: wd})
	reconcileOnce(t, r, w)
	uid := e.get(w).UID
	if err := e.c.Delete(t.Context(), w); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name      string
		deleteErr func() error
		lie       bool
	}{
		{name: "delete fails", deleteErr: func() error { return errors.New("connection reset by peer") }},
		{name: "delete claims success but the role stays", lie: true},
	}
	for i, s := range steps {
		e.deleteErr = s.deleteErr
		if s.lie {
			e.deleteErr = func() error { return errLie }
		}
		reconcileFailing(t, r, w)
		got := e.get(w)
		if !slices.Contains(got.Finalizers, finalizer) {
			t.Fatalf("%s: finalizer removed before the delete was confirmed", s.name)
		}
		if e.record(uid) == nil {
			t.Fatalf("%s: record removed before the delete was confirmed", s.name)
		}
		if !e.roleExists(w.Spec.RoleName) {
			t.Fatalf("%s: role gone; the step proves nothing", s.name)
		}
		if st, reason := condition(got, lifecycle.ConditionSynced); st != metav1.ConditionFalse || reason != lifecycle.ReasonDeleteFailed {
			t.Errorf("%s: Synced = %s/%s, want False/%s", s.name, st, reason, lifecycle.ReasonDeleteFailed)
		}
		if p := wd.Pending(); len(p) != 1 || p[0].Attempts != i+1 {
			t.Errorf("%s: watchdog pending = %+v, want one deletion with %d attempts", s.name, p, i+1)
		}
	}

	e.deleteErr = nil
	reconcileOnce(t, r, w)
	if e.roleExists(w.Spec.RoleName) {
		t.Error("role still exists after deletion")
	}
	if e.record(uid) != nil {
		t.Error("record still exists after confirmed deletion")
	}
	if err := waitGone(t, e, w); err != nil {
		t.Error(err)
	}
	if p := wd.Pending(); len(p) != 0 {
		t.Errorf("watchdog still tracks %+v", p)
	}
}

// Retain lets the object go and keeps the role (and its tag), and its
// record, marked Retain: the sweeper never deletes through it, and a
// restored object can adopt what was kept.
func TestRetainKeepsExternalResource(t *testing.T) {
	e := newEnv(t, nil)
	w := e.widget("a", string(lifecycle.PolicyRetain))
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led})
	reconcileOnce(t, r, w)
	uid := e.get(w).UID
	if err := e.c.Delete(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, w)
	if err := waitGone(t, e, w); err != nil {
		t.Fatal(err)
	}
	if !e.roleExists(w.Spec.RoleName) {
		t.Error("Retain dropped the role")
	}
	if rec := e.record(uid); rec == nil || rec.Policy != ledger.PolicyRetain {
		t.Errorf("record after a Retain delete = %+v; want it kept, with policy Retain", rec)
	}
}

// Conditions and Events change on transitions only: a create is one Event
// (Created: its conditions going True are not evented again), a steady
// object is reconciled with no API writes and no Events, and the happy
// deletion adds none (its namespace is usually terminating, which refuses
// Events; the log says it).
func TestEventsAndWritesOnTransitionsOnly(t *testing.T) {
	e := newEnv(t, nil)
	w := e.widget("a", "")
	script := faultinject.NewScript()
	r := e.reconciler(faultinject.WrapClient(e.c, script), lifecycle.Options{Ledger: e.led})
	reconcileOnce(t, r, w)
	want := []event{{"Normal", lifecycle.ReasonCreated}}
	if diff := cmp.Diff(want, e.events.take()); diff != "" {
		t.Errorf("first reconcile events (-want +got):\n%s", diff)
	}
	// finalizer patch, status patch
	if n := script.Writes(); n != 2 {
		t.Errorf("first reconcile made %d writes, want 2: %+v", n, script.Calls())
	}
	for range 3 {
		reconcileOnce(t, r, w)
	}
	if got := e.events.take(); len(got) != 0 {
		t.Errorf("steady reconciles emitted %v", got)
	}
	if n := script.Writes(); n != 2 {
		t.Errorf("steady reconciles wrote: %+v", script.Calls())
	}
	if err := e.c.Delete(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, w)
	if err := waitGone(t, e, w); err != nil {
		t.Fatal(err)
	}
	if got := e.events.take(); len(got) != 0 {
		t.Errorf("the deletion emitted %v", got)
	}
}

// staleReader serves Gets of one object from a fixed copy, as a cache that
// has not yet seen the latest writes would.
type staleReader struct {
	client.Client
	stale *Widget
}

func (s staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if w, ok := obj.(*Widget); ok && s.stale != nil {
		*w = *s.stale.DeepCopyObject().(*Widget)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// patchCopier keeps a copy of the Widget its last (non-status) patch
// returned.
type patchCopier struct {
	client.Client
	last *Widget
}

func (p *patchCopier) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := p.Client.Patch(ctx, obj, patch, opts...)
	if w, ok := obj.(*Widget); ok && err == nil {
		p.last = w.DeepCopyObject().(*Widget)
	}
	return err
}

// A reconcile that reads a version its own writes replaced does nothing:
// it would otherwise write the status again and announce the resource it
// just created as adopted. The write's watch event brings the fresh
// version; with it, a steady object costs no writes.
func TestStaleReadOfOwnWriteIsSkipped(t *testing.T) {
	e := newEnv(t, nil)
	w := e.widget("a", "")
	script := faultinject.NewScript()
	capture := &patchCopier{Client: e.c}
	reader := &staleReader{Client: faultinject.WrapClient(capture, script)}
	r := e.reconciler(reader, lifecycle.Options{Ledger: e.led})
	reconcileOnce(t, r, w)
	e.events.take()
	afterFinalizer := capture.last
	if afterFinalizer == nil || len(afterFinalizer.Status.Conditions) != 0 {
		t.Fatalf("no copy of the object between the finalizer and the status writes: %+v", afterFinalizer)
	}
	writes := script.Writes()

	reader.stale = afterFinalizer
	reconcileOnce(t, r, w)
	if got := e.events.take(); len(got) != 0 {
		t.Errorf("a stale read of its own write emitted %v", got)
	}
	if n := script.Writes() - writes; n != 0 {
		t.Errorf("a stale read of its own write made %d writes: %+v", n, script.Calls()[writes:])
	}

	reader.stale = nil
	reconcileOnce(t, r, w)
	if n := script.Writes() - writes; n != 0 || len(e.events.take()) != 0 {
		t.Errorf("the fresh steady object cost %d writes", n)
	}

	// Without the memory of its writes (a new reconciler, as after a
	// restart) the same stale read is acted on: what the skip prevents.
	fresh := e.reconciler(&staleReader{Client: faultinject.WrapClient(e.c, script), stale: afterFinalizer}, lifecycle.Options{Ledger: e.led, APIReader: e.c})
	reconcileOnce(t, fresh, w)
	if !slices.Contains(e.events.take(), event{"Normal", lifecycle.ReasonAdopted}) || script.Writes() == writes {
		t.Error("the control case did not act on the stale read; the test proves nothing")
	}
}

// Another writer's condition (the watchdog's CleanupBlocked) survives a
// status write made from a copy that predates it: the conditions list is
// replaced whole by a merge patch, so the write is conditional and, on a
// conflict, redone on a fresh read.
func TestStatusWriteKeepsOtherWritersConditions(t *testing.T) {
	e := newEnv(t, nil)
	w := e.widget("a", "")
	reader := &staleReader{Client: e.c}
	r := e.reconciler(reader, lifecycle.Options{Ledger: e.led, APIReader: e.c})
	reconcileOnce(t, r, w)

	// A spec change, so the next reconcile has a status to write...
	live := e.get(w)
	live.Spec.DeletionPolicy = "Delete"
	if err := e.c.Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	reader.stale = e.get(w)
	// ...and, after the copy it will read, another writer's condition.
	blocked := metav1.Condition{Type: watchdog.ConditionType, Status: metav1.ConditionTrue, Reason: "Transport", Message: "blocked"}
	target := e.get(w)
	target.SetGroupVersionKind(widgetGV.WithKind("Widget"))
	if err := (watchdog.StatusConditions{Reader: e.c, Status: e.c}).WriteCondition(t.Context(), target, blocked); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, w)

	got := e.get(w)
	if c := meta.FindStatusCondition(got.Status.Conditions, watchdog.ConditionType); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("the other writer's condition was dropped: %+v", got.Status.Conditions)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionReady); c == nil || c.ObservedGeneration != got.Generation || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("this reconcile's status was not written on the fresh copy: generation %d, status %+v", got.Generation, got.Status)
	}
}

// A Ready object whose record vanished out of band (its namespace
// reinstalled, an admin's mistake) gets it written again at its next
// reconcile after VerifyInterval, so a later release cannot leak silently.
func TestLostRecordIsWrittenAgain(t *testing.T) {
	e := newEnv(t, nil)
	clk := clocktesting.NewFakeClock(time.Now())
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led, Clock: clk})
	w := e.widget("a", "")
	reconcileOnce(t, r, w)
	uid := e.get(w).UID
	if err := e.c.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(uid)}}); err != nil {
		t.Fatal(err)
	}
	e.events.take()
	reconcileOnce(t, r, w)
	if e.record(uid) != nil {
		t.Fatal("record back before VerifyInterval: the steady path reads it every reconcile")
	}
	clk.Step(lifecycle.DefaultVerifyInterval + time.Second)
	reconcileOnce(t, r, w)
	rec := e.record(uid)
	if rec == nil {
		t.Fatal("record not written again")
	}
	if diff := cmp.Diff([]string{w.Spec.RoleName}, rec.ExternalIDs); diff != "" {
		t.Errorf("re-written IDs (-want +got):\n%s", diff)
	}
	if !slices.Contains(e.events.take(), event{"Warning", lifecycle.ReasonRecordRecreated}) {
		t.Error("no Warning Event for the lost record")
	}
}

// The deletion policy travels with the record and follows the spec: a
// Delete object edited to Retain has a Retain record, so the sweeper would
// keep its resource too.
func TestPolicyFollowsTheSpec(t *testing.T) {
	e := newEnv(t, nil)
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led})
	w := e.widget("a", "")
	reconcileOnce(t, r, w)
	if rec := e.record(e.get(w).UID); rec == nil || rec.Policy != lifecycle.PolicyDelete {
		t.Fatalf("record %+v, want policy Delete", rec)
	}
	live := e.get(w)
	live.Spec.DeletionPolicy = string(lifecycle.PolicyRetain)
	if err := e.c.Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, w)
	if rec := e.record(live.UID); rec == nil || rec.Policy != lifecycle.PolicyRetain {
		t.Fatalf("record %+v after the spec changed to Retain, want policy Retain", rec)
	}
}

// An object that never created anything (its connection points at a
// closed port, or at nothing) has no record: its deletion is immediate,
// waits for no hold and says so.
func TestNothingCreatedDeletesAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	clk := clocktesting.NewFakeClock(time.Now())
	closed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "closed", Finalizers: []string{hold.Finalizer}},
		Data: map[string]string{"dsn": "postgres://nobody:nothing@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"}}
	if err := e.c.Create(t.Context(), closed); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closed.Finalizers = nil
		_ = e.c.Update(context.WithoutCancel(t.Context()), closed)
	})
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led, Hold: newHold(t, e, clk), Clock: clk})
	var ws []*Widget
	for name, parent := range map[string]string{"closed-port": "closed", "no-connection": "no-such-connection"} {
		w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: WidgetSpec{Parent: parent, RoleName: pgtarget.RandomName("w_")}}
		w.SetGroupVersionKind(widgetGV.WithKind("Widget"))
		if err := e.c.Create(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		_, _ = r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)})
		if e.record(e.get(w).UID) != nil {
			t.Fatalf("%s: a record although nothing was reached", name)
		}
	}
	for _, w := range ws {
		if err := e.c.Delete(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		e.events.take()
		reconcileOnce(t, r, w)
		if err := waitGone(t, e, w); err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if !slices.Contains(e.events.take(), event{"Normal", lifecycle.ReasonNothingCreated}) {
			t.Errorf("%s: no NothingCreated Event", w.Name)
		}
	}
}

// heldParent makes the adapter's parent look held, as a stale cache would
// after the hold was released.
type heldParent struct {
	lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target]
}

func (h heldParent) Connect(ctx context.Context, w *Widget) (lifecycle.Connection[string], error) {
	c, err := h.AdapterFuncs.Connect(ctx, w)
	if c.Parent != nil {
		c.Parent.SetFinalizers(append(c.Parent.GetFinalizers(), hold.Finalizer))
	}
	return c, err
}

// The parent's hold is confirmed live before a create: a cached copy that
// still shows the hold is not enough.
func TestParentHoldConfirmedLiveBeforeCreate(t *testing.T) {
	e := newEnv(t, nil)
	clk := clocktesting.NewFakeClock(time.Now())
	a := heldParent{e.adapter().(lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target])}
	r, err := lifecycle.New(e.c, func() *Widget { return &Widget{} }, lifecycle.Adapter[*Widget, string, *pgtarget.Target](a), e.pool, lifecycle.Options{
		Finalizer: finalizer, Scheme: e.c.Scheme(), Ledger: e.led, Hold: newHold(t, e, clk), Clock: clk, Skip: lifecycle.SkipWatchdog,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := e.widget("a", "")
	reconcileOnce(t, r, w)
	if e.creates.Load() != 0 {
		t.Fatal("created although the live parent carries no hold")
	}
	e.holdParent()
	reconcileOnce(t, r, w)
	if e.creates.Load() != 1 {
		t.Fatal("not created once the live parent is held")
	}
}

// adoptions reads what an adopter's dashboard reads: the metric
// finale_lifecycle_creates_total of Widgets adopted by their tag, from
// controller-runtime's registry (the counter itself is lifecycle's).
func adoptions(t *testing.T) float64 {
	t.Helper()
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "finale_lifecycle_creates_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == "Widget" && labels["outcome"] == "adopted" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
