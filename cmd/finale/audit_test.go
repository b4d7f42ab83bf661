package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	testFinalizer = "test.finale.dev/hold"
	testSettle    = 5 * time.Minute
	waitTimeout   = 30 * time.Second
	blockedMsg    = "finalizer test.finale.dev/hold has held the deletion for 12m0s: 9 cleanup attempts, last error class Transport"
)

var gadgetGVK = schema.GroupVersionKind{Group: "audit.finale.dev", Version: "v1", Kind: "Gadget"}

// testAuditor audits the package's control plane at now, limited to
// namespaces for the deletions section.
func testAuditor(t *testing.T, recordsNS string, now time.Time, namespaces ...string) auditor {
	t.Helper()
	a, err := newAuditor(testenv.ControlPlane(t).Config, recordsNS, testSettle, clocktesting.NewFakePassiveClock(now))
	if err != nil {
		t.Fatal(err)
	}
	a.namespaces = namespaces
	return a
}

func mustRun(t *testing.T, a auditor) report {
	t.Helper()
	rep, err := runAudit(t.Context(), a)
	if err != nil {
		t.Fatalf("runAudit: %v", err)
	}
	for _, w := range rep.Warnings {
		t.Logf("warning: %s", w)
	}
	return rep
}

// deletingSince deletes obj (which holds a finalizer) and returns the
// deletionTimestamp the apiserver gave it.
func deletingSince(t *testing.T, c client.Client, obj client.Object) time.Time {
	t.Helper()
	if err := c.Delete(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	if obj.GetDeletionTimestamp() == nil {
		t.Fatalf("%s has no deletionTimestamp after delete", obj.GetName())
	}
	return obj.GetDeletionTimestamp().Time
}

func TestAuditStuckObject(t *testing.T) {
	t.Parallel()
	c := testenv.Client(t, testenv.Scheme())
	if err := controlplane.InstallCRDs(t.Context(), c, testenv.OpenCRD(gadgetGVK, "gadgets", true)); err != nil {
		t.Fatal(err)
	}
	ns, recNS := testenv.Namespace(t, c), testenv.Namespace(t, c)

	stuck := &unstructured.Unstructured{}
	stuck.SetGroupVersionKind(gadgetGVK)
	stuck.SetNamespace(ns)
	stuck.SetName("stuck")
	stuck.SetFinalizers([]string{testFinalizer})
	if err := c.Create(t.Context(), stuck); err != nil {
		t.Fatal(err)
	}
	// A second deleting object whose condition is False: listed, no condition shown.
	recovered := stuck.DeepCopy()
	recovered.SetName("recovered")
	recovered.SetResourceVersion("")
	if err := c.Create(t.Context(), recovered); err != nil {
		t.Fatal(err)
	}
	dts := deletingSince(t, c, stuck)
	dtsRecovered := deletingSince(t, c, recovered)
	setConditions(t, c, stuck, metav1.Condition{Type: watchdog.ConditionType, Status: metav1.ConditionTrue,
		Reason: watchdog.ReasonCleanupBlocked, Message: blockedMsg},
		metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Fine"})
	setConditions(t, c, recovered, metav1.Condition{Type: watchdog.ConditionType, Status: metav1.ConditionFalse,
		Reason: watchdog.ReasonCleanupRecovered})

	for name, tc := range map[string]struct {
		now         time.Time
		wantOverdue bool
	}{
		"within settle": {now: dtsRecovered.Add(time.Minute)},
		"past settle":   {now: dtsRecovered.Add(time.Hour), wantOverdue: true},
	} {
		t.Run(name, func(t *testing.T) {
			rep := mustRun(t, testAuditor(t, recNS, tc.now, ns))
			want := []deletion{{
				APIVersion: "audit.finale.dev/v1", Kind: "Gadget", Namespace: ns, Name: "stuck",
				DeletionTimestamp: dts, AgeSeconds: seconds(tc.now.Sub(dts)), Overdue: tc.wantOverdue,
				Finalizers: []string{testFinalizer},
				Conditions: []condition{{Type: watchdog.ConditionType, Reason: watchdog.ReasonCleanupBlocked, Message: blockedMsg}},
			}, {
				APIVersion: "audit.finale.dev/v1", Kind: "Gadget", Namespace: ns, Name: "recovered",
				DeletionTimestamp: dtsRecovered, AgeSeconds: seconds(tc.now.Sub(dtsRecovered)), Overdue: tc.wantOverdue,
				Finalizers: []string{testFinalizer},
			}}
			// Both may have the same second; the report then orders by name.
			if dts.Equal(dtsRecovered) {
				want[0], want[1] = want[1], want[0]
			}
			if diff := cmp.Diff(want, rep.Deletions); diff != "" {
				t.Errorf("deletions (-want +got):\n%s", diff)
			}
			if got, want := rep.findings() > 0, tc.wantOverdue; got != want {
				t.Errorf("findings = %d, want findings %v", rep.findings(), want)
			}
			var out bytes.Buffer
			if err := printReport(&out, rep, "text"); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"Gadget.audit.finale.dev", ns + "/stuck", "CleanupBlocked: " + blockedMsg,
				"2 stuck deletions, 0 records (0 owner gone, 0 overdue), 0 unreachable",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("text report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestAuditFinalizerHolderDown: a deleting object whose finalizer is
// released by a controller that publishes a heartbeat Lease (watchdog's
// finalizer holder convention) is a finding as soon as that Lease has
// expired, long before the settle window: nothing will release it. While
// the Lease is fresh it is listed with its holder and is no finding.
func TestAuditFinalizerHolderDown(t *testing.T) {
	t.Parallel()
	const (
		heldFinalizer = "holder.test.finale.dev/result"
		beat          = 30 * time.Second
	)
	c := testenv.Client(t, testenv.Scheme())
	if err := controlplane.InstallCRDs(t.Context(), c, testenv.OpenCRD(gadgetGVK, "gadgets", true)); err != nil {
		t.Fatal(err)
	}
	ns, holderNS, recNS := testenv.Namespace(t, c), testenv.Namespace(t, c), testenv.Namespace(t, c)
	renewed := time.Now().UTC().Truncate(time.Microsecond)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: holderNS, Name: "holder",
			Labels:      map[string]string{watchdog.LabelFinalizerHolder: "true"},
			Annotations: map[string]string{watchdog.AnnotationHeldFinalizers: heldFinalizer}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("test"), LeaseDurationSeconds: ptr.To(int32(beat / time.Second)),
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
	if err := c.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	held := &unstructured.Unstructured{}
	held.SetGroupVersionKind(gadgetGVK)
	held.SetNamespace(ns)
	held.SetName("held")
	held.SetFinalizers([]string{heldFinalizer, testFinalizer})
	if err := c.Create(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	dts := deletingSince(t, c, held)
	expiry := renewed.Add(beat)
	leaseName := holderNS + "/holder"

	for name, tc := range map[string]struct {
		now      time.Time
		wantDown bool
	}{
		"holder renewing": {now: expiry.Add(-time.Second)},
		"holder down":     {now: expiry.Add(time.Second), wantDown: true},
	} {
		t.Run(name, func(t *testing.T) {
			rep := mustRun(t, testAuditor(t, recNS, tc.now, ns))
			want := []deletion{{
				APIVersion: "audit.finale.dev/v1", Kind: "Gadget", Namespace: ns, Name: "held",
				DeletionTimestamp: dts, AgeSeconds: seconds(tc.now.Sub(dts)),
				Finalizers: []string{heldFinalizer, testFinalizer},
				Holders:    []holder{{Finalizer: heldFinalizer, Lease: leaseName, Expiry: &expiry, Expired: tc.wantDown}},
				HolderDown: tc.wantDown,
			}}
			if diff := cmp.Diff(want, rep.Deletions); diff != "" {
				t.Errorf("deletions (-want +got):\n%s", diff)
			}
			wantDown := []holderDown{}
			if tc.wantDown {
				wantDown = []holderDown{{Lease: leaseName, Finalizers: []string{heldFinalizer}, Expiry: &expiry, ExpiredSeconds: 1, Objects: 1}}
			}
			if diff := cmp.Diff(wantDown, rep.HoldersDown); diff != "" {
				t.Errorf("holders down (-want +got):\n%s", diff)
			}
			if got := rep.findings() > 0; got != tc.wantDown {
				t.Errorf("findings = %d, want findings %v", rep.findings(), tc.wantDown)
			}
			var out bytes.Buffer
			if err := printReport(&out, rep, "text"); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"Finalizers whose controller is down (1)", leaseName, "guard uninstall", "1 finalizer holders down", "holder down"} {
				if got := strings.Contains(out.String(), w); got != tc.wantDown {
					t.Errorf("text report contains %q: %v, want %v:\n%s", w, got, tc.wantDown, out.String())
				}
			}
		})
	}
}

func setConditions(t *testing.T, c client.Client, obj *unstructured.Unstructured, conds ...metav1.Condition) {
	t.Helper()
	list := make([]any, len(conds))
	for i, cd := range conds {
		list[i] = map[string]any{
			"type": cd.Type, "status": string(cd.Status), "reason": cd.Reason, "message": cd.Message,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}
	}
	if err := unstructured.SetNestedSlice(obj.Object, list, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Update(t.Context(), obj); err != nil {
		t.Fatalf("set conditions of %s: %v", obj.GetName(), err)
	}
}

// TestAuditTerminatingNamespace deletes a namespace whose content holds a
// finalizer: the real namespace controller leaves it terminating.
func TestAuditTerminatingNamespace(t *testing.T) {
	t.Parallel()
	c := testenv.Client(t, testenv.Scheme())
	ns, recNS := testenv.Namespace(t, c), testenv.Namespace(t, c)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held", Finalizers: []string{testFinalizer}}}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	nsDTS := deletingSince(t, c, nsObj)
	var cmDTS time.Time
	err := controlplane.WaitFor(t.Context(), waitTimeout, "the namespace controller to report the remaining finalizer",
		func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(nsObj), nsObj); err != nil {
				return false, err
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
				return false, err
			}
			for _, cd := range nsObj.Status.Conditions {
				if cd.Type == corev1.NamespaceFinalizersRemaining && cd.Status == corev1.ConditionTrue && cm.DeletionTimestamp != nil {
					cmDTS = cm.DeletionTimestamp.Time
					return true, nil
				}
			}
			return false, nil
		})
	if err != nil {
		t.Fatal(err)
	}

	now := cmDTS.Add(time.Hour)
	rep := mustRun(t, testAuditor(t, recNS, now, ns))
	want := []deletion{{
		APIVersion: "v1", Kind: "Namespace", Name: ns, DeletionTimestamp: nsDTS, AgeSeconds: seconds(now.Sub(nsDTS)),
		Overdue: true, SpecFinalizers: []string{"kubernetes"},
		Conditions: []condition{
			{Type: string(corev1.NamespaceContentRemaining), Reason: "SomeResourcesRemain"},
			{Type: string(corev1.NamespaceFinalizersRemaining), Reason: "SomeFinalizersRemain"},
		},
	}, {
		APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "held", DeletionTimestamp: cmDTS,
		AgeSeconds: seconds(now.Sub(cmDTS)), Overdue: true, Finalizers: []string{testFinalizer},
	}}
	if nsDTS.Equal(cmDTS) {
		want[0], want[1] = want[1], want[0] // same second: ConfigMap sorts before Namespace
	}
	// The controller's messages list what remains; the reasons say enough.
	ignoreMessages := cmpopts.IgnoreFields(condition{}, "Message")
	if diff := cmp.Diff(want, rep.Deletions, ignoreMessages); diff != "" {
		t.Errorf("deletions (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := printReport(&out, rep, "text"); err != nil {
		t.Fatal(err)
	}
	t.Logf("text report:\n%s", out.String())
	if want := "spec:kubernetes"; !strings.Contains(out.String(), want) {
		t.Errorf("text report lacks %q:\n%s", want, out.String())
	}
}

// deployment answers proofs as a genuine deployment would, in memory: the
// audit reads records, and records are written only by a ledger after a
// proof.
type deployment struct {
	mu        sync.Mutex // guards salt and token
	salt, tok string
}

func (d *deployment) Prove(_ context.Context, q ledger.Question) (ledger.Answer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.salt == "" && q.Enroll != nil {
		d.salt, d.tok = q.Enroll.Salt, q.Enroll.Token
	}
	return ledger.Answer{Deployment: "deployment-a", Salt: d.salt, Response: ledger.Respond(d.tok, q, "deployment-a", d.salt, nil)}, nil
}

// recorder writes signed records with the operator key it keeps in recNS,
// as the operator would.
type recorder struct {
	l   *ledger.Ledger
	clk *clocktesting.FakeClock
	dep *deployment
}

func newRecorder(t *testing.T, c client.Client, recNS string) *recorder {
	t.Helper()
	key, err := ledger.LoadKey(t.Context(), c, recNS, "")
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.NewConfigMapStore(c, recNS)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	l, err := ledger.New(store, ledger.Options{Key: key, Clock: clk, Remember: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{l: l, clk: clk, dep: &deployment{}}
}

// record writes a record for owner, created at createdAt and last attempted
// at lastAttempt, holding ids.
func (r *recorder) record(t *testing.T, p ledger.Plan, createdAt, lastAttempt time.Time, ids ...string) {
	t.Helper()
	r.clk.SetTime(createdAt)
	// Never sent, so the ledger retries at once (an attempt in doubt would
	// hold the second one back, ledger.ErrCreateInDoubt).
	fail := func(context.Context, string) ([]string, error) {
		return nil, fmt.Errorf("%w: attempt lost", ledger.ErrNotSent)
	}
	if _, err := r.l.Create(t.Context(), p, r.dep, fail); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	r.clk.SetTime(lastAttempt)
	if _, err := r.l.Create(t.Context(), p, r.dep, func(context.Context, string) ([]string, error) { return ids, nil }); err != nil && len(ids) > 0 {
		t.Fatal(err)
	}
}

func TestAuditRecords(t *testing.T) {
	t.Parallel()
	c := testenv.Client(t, testenv.Scheme())
	ownerNS, recNS := testenv.Namespace(t, c), testenv.Namespace(t, c)
	rec := newRecorder(t, c, recNS)
	now := time.Now().UTC().Truncate(time.Second).Add(time.Hour)
	ownerRef := func(name string, uid types.UID) ledger.Owner {
		return ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ownerNS, Name: name, UID: uid}
	}
	live := func(name string) types.UID {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ownerNS, Name: name}}
		if err := c.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		return cm.UID
	}
	present := ownerRef("present", live("present"))
	gone := ownerRef("vanished", uuid.NewUUID())                                                     // never existed under this UID
	recreated := ownerRef("recreated", uuid.NewUUID())                                               // the live one has another UID
	settling := ownerRef("settling", uuid.NewUUID())                                                 // gone, attempted a moment ago
	retained := ownerRef("retained", uuid.NewUUID())                                                 // gone, its policy Retain
	edited := ownerRef("edited", uuid.NewUUID())                                                     // its record edited by hand
	claims := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ownerNS, Name: "recreated", // a restore: it claims the record
		Annotations: map[string]string{ledger.AnnotationUID: string(recreated.UID)}}}
	if err := c.Create(t.Context(), claims); err != nil {
		t.Fatal(err)
	}
	rec.record(t, ledger.Plan{Owner: present}, now.Add(-2*time.Hour), now.Add(-2*time.Hour), "id-1")
	rec.record(t, ledger.Plan{Owner: gone}, now.Add(-3*time.Hour), now.Add(-time.Hour), "id-2", "id-3")
	rec.record(t, ledger.Plan{Owner: recreated}, now.Add(-10*time.Minute), now.Add(-10*time.Minute))
	rec.record(t, ledger.Plan{Owner: settling}, now.Add(-time.Hour), now.Add(-2*time.Minute), "id-4")
	rec.record(t, ledger.Plan{Owner: retained, Policy: ledger.PolicyRetain}, now.Add(-time.Hour), now.Add(-time.Hour), "id-5")
	rec.record(t, ledger.Plan{Owner: edited}, now.Add(-time.Hour), now.Add(-time.Hour), "id-6")
	var cm corev1.ConfigMap
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: recNS, Name: ledger.ConfigMapName(edited.UID)}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["externalIDs"] = `["id-6","someone-elses"]`
	if err := c.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	garbage := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: recNS, Name: ledger.NamePrefix + "garbage",
			Labels: map[string]string{ledger.LabelRecord: ledger.LabelRecordValue}},
		Data: map[string]string{"schemaVersion": "one", "ownerKind": "Role"},
	}
	if err := c.Create(t.Context(), garbage); err != nil {
		t.Fatal(err)
	}

	// The sweeper's verdicts, kept on the records (ledger.Note): only an
	// unreachable or unverified one is reported, from the record itself,
	// whatever the Events say (they expire after an hour, and a sweeper
	// that restarts does not repeat them). A Retain verdict is no finding.
	goneName, recreatedName := ledger.ConfigMapName(gone.UID), ledger.ConfigMapName(recreated.UID)
	noter := rec.l.Store().(ledger.Noter)
	for _, n := range []struct {
		uid  types.UID
		note ledger.Note
	}{
		{gone.UID, ledger.Note{State: string(sweep.Unverified), Since: now.Add(-20 * time.Minute)}},
		{recreated.UID, ledger.Note{State: string(sweep.Unreachable), Class: sweep.ClassNotProven, Since: now.Add(-9 * time.Minute)}},
		{retained.UID, ledger.Note{State: string(sweep.Retained), Since: now.Add(-30 * time.Minute)}},
	} {
		r, err := rec.l.Store().Get(t.Context(), n.uid)
		if err != nil {
			t.Fatal(err)
		}
		if err := noter.Note(t.Context(), r, n.note); err != nil {
			t.Fatal(err)
		}
	}
	stale := &eventsv1.Event{ // an Event of a verdict since changed: not read
		ObjectMeta:          metav1.ObjectMeta{Namespace: recNS, Name: "sweep-old"},
		EventTime:           metav1.NewMicroTime(now.Add(-50 * time.Minute)),
		ReportingController: "finale.dev/test", ReportingInstance: "test",
		Action: sweep.ActionSweep, Reason: sweep.ReasonUnreachable, Type: corev1.EventTypeWarning, Note: "older note",
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: recNS, Name: ledger.ConfigMapName(settling.UID)},
	}
	if err := c.Create(t.Context(), stale); err != nil {
		t.Fatalf("create event: %v", err)
	}

	rep := mustRun(t, testAuditor(t, recNS, now, ownerNS))
	want := recordsSection{
		Total: 7, OwnerPresent: 1, OwnerGone: 4, Overdue: 2, Pending: 1, Retained: 1, Authenticated: true,
		Gone: []goneRecord{
			{Record: goneName, Owner: ownerOf(gone), OwnerState: ownerGone, Policy: "Delete", AgeSeconds: 3600, ExternalIDs: 2,
				Deployment: "deployment-a", Overdue: true},
			{Record: ledger.ConfigMapName(retained.UID), Owner: ownerOf(retained), OwnerState: ownerGone, Policy: "Retain", AgeSeconds: 3600,
				ExternalIDs: 1, Deployment: "deployment-a"},
			{Record: recreatedName, Owner: ownerOf(recreated), OwnerState: ownerRecreated, Policy: "Delete", AgeSeconds: 600,
				Deployment: "deployment-a", Overdue: true},
			{Record: ledger.ConfigMapName(settling.UID), Owner: ownerOf(settling), OwnerState: ownerGone, Policy: "Delete", AgeSeconds: 120,
				ExternalIDs: 1, Deployment: "deployment-a"},
		},
		Invalid: []invalidRecord{
			{Record: ledger.ConfigMapName(edited.UID), Owner: ownerOf(edited)},
			{Record: garbage.Name, Owner: owner{Kind: "Role"}},
		},
	}
	byName := cmpopts.SortSlices(func(a, b goneRecord) bool { return a.Record < b.Record })
	if diff := cmp.Diff(want, rep.Records, cmpopts.IgnoreFields(invalidRecord{}, "Reason"), byName); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if len(rep.Records.Invalid) == 2 && !strings.Contains(rep.Records.Invalid[1].Reason, "schemaVersion") {
		t.Errorf("invalid reason %q does not name the bad field", rep.Records.Invalid[1].Reason)
	}
	if len(rep.Records.Invalid) == 2 && !strings.Contains(rep.Records.Invalid[0].Reason, "not signed by this operator's key") {
		t.Errorf("the edited record's reason %q does not say it is not signed", rep.Records.Invalid[0].Reason)
	}
	wantUnreachable := []unreachable{
		{Record: goneName, Reason: sweep.ReasonUnverified, Note: msgNoteUnverified, Time: now.Add(-20 * time.Minute), AgeSeconds: 1200},
		{Record: recreatedName, Reason: sweep.ReasonUnreachable, Note: fmt.Sprintf(msgNoteUnreachable, sweep.ClassNotProven),
			Time: now.Add(-9 * time.Minute), AgeSeconds: 540},
	}
	if diff := cmp.Diff(wantUnreachable, rep.Unreachable, cmpopts.EquateApproxTime(time.Microsecond)); diff != "" {
		t.Errorf("unreachable (-want +got):\n%s", diff)
	}
	if got, want := rep.summary(), "0 stuck deletions, 7 records (4 owner gone, 2 overdue), 2 unreachable, 2 invalid records, "+
		"1 pending records (owner gone less than 6m0s ago: run again in 4m0s)"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}

	var text bytes.Buffer
	if err := printReport(&text, rep, "text"); err != nil {
		t.Fatal(err)
	}
	t.Logf("text report:\n%s", text.String())
	for _, want := range []string{"Cleanup records in " + recNS + ": 7 total, 1 owner present, 4 owner gone (2 overdue, 1 pending)",
		"1 of them Retain: the sweeper keeps those records, for a restored object to adopt, and deletes nothing", "a namesake claims it",
		"ConfigMap " + ownerNS + "/recreated (uid " + string(recreated.UID) + ")", "no connection the sweeper may use authenticates"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}

	// The command itself, on the whole cluster: other tests' stuck objects
	// may show up too, so only this test's records are checked.
	t.Run("command", func(t *testing.T) {
		var out bytes.Buffer
		err := audit(t.Context(), []string{"--kubeconfig", testenv.ControlPlane(t).Kubeconfig, "--records-namespace", recNS, "-o", "json"}, &out)
		if !errors.Is(err, errFindings) || exitCode(err) != exitFindings {
			t.Fatalf("audit = %v (exit %d), want errFindings (exit %d): findings win over pending records", err, exitCode(err), exitFindings)
		}
		var got report
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("decode JSON report: %v\n%s", err, out.String())
		}
		if got.RecordsNamespace != recNS || got.Records.Total != 7 || got.Records.OwnerGone != 4 || len(got.Unreachable) != 2 {
			t.Errorf("JSON report: namespace %s, %d records, %d gone, %d unreachable; want %s, 7, 4, 2",
				got.RecordsNamespace, got.Records.Total, got.Records.OwnerGone, len(got.Unreachable), recNS)
		}
	})
}

// TestAuditPendingRecords: records whose owner is
// gone but that are still within the settle window (right after a namespace
// deletion, say) are pending findings with an exit status of their own (3),
// not success; once past the window they are overdue findings (2). Before
// the fix the audit exited 0 until the window had passed.
func TestAuditPendingRecords(t *testing.T) {
	t.Parallel()
	c := testenv.Client(t, testenv.Scheme())
	ownerNS, recNS := testenv.Namespace(t, c), testenv.Namespace(t, c)
	rec := newRecorder(t, c, recNS)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ownerNS, Name: "present"}}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	present := ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ownerNS, Name: "present", UID: cm.UID}
	gone := ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ownerNS, Name: "gone", UID: uuid.NewUUID()}
	// The gone owner's record was last attempted three minutes ago (real
	// time: the command below reads the real clock), longer than a 30s
	// --settle plus the sweeper's clock skew.
	attempted := time.Now().UTC().Truncate(time.Second).Add(-3 * time.Minute)
	rec.record(t, ledger.Plan{Owner: present}, attempted.Add(-time.Hour), attempted.Add(-time.Hour), "id-1")
	rec.record(t, ledger.Plan{Owner: gone}, attempted.Add(-time.Hour), attempted, "id-2")

	type verdict struct {
		Pending, Overdue, Findings int
		Exit                       int
	}
	for name, tc := range map[string]struct {
		now  time.Time
		want verdict
	}{
		"within the window": {now: attempted.Add(2 * time.Minute), want: verdict{Pending: 1, Exit: exitPending}},
		// The sweeper waits settle plus its clock skew (sweep.SettleWindow):
		// a record past --settle alone is still pending, never overdue
		// while the sweeper would leave it alone.
		"past --settle, within the sweeper's window": {now: attempted.Add(testSettle + time.Second), want: verdict{Pending: 1, Exit: exitPending}},
		"past the window": {now: attempted.Add(sweep.SettleWindow(testSettle, 0) + time.Second), want: verdict{Overdue: 1, Findings: 1, Exit: exitFindings}},
	} {
		t.Run(name, func(t *testing.T) {
			rep := mustRun(t, testAuditor(t, recNS, tc.now, ownerNS))
			got := verdict{rep.Records.Pending, rep.Records.Overdue, rep.findings(), exitCode(rep.verdict())}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}

	rep := mustRun(t, testAuditor(t, recNS, attempted.Add(2*time.Minute), ownerNS))
	var text bytes.Buffer
	if err := printReport(&text, rep, "text"); err != nil {
		t.Fatal(err)
	}
	t.Logf("text report:\n%s", text.String())
	for _, want := range []string{
		"1 owner gone (0 overdue, 1 pending)",
		"in 4m0s", // the OVERDUE column of the pending record: the sweeper's window, settle plus skew
		"1 pending records (owner gone less than 6m0s ago: run again in 4m0s)",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}

	// The command, on the whole cluster and the real clock. --settle is
	// set so that other tests' deletions (all younger than an hour) are not
	// overdue; with a settle window shorter than the record's age it is
	// overdue instead.
	kc := testenv.ControlPlane(t).Kubeconfig
	t.Run("command", func(t *testing.T) {
		for name, tc := range map[string]struct {
			settle      string
			wantExit    int
			wantPending int
		}{
			"pending": {settle: "1h", wantExit: exitPending, wantPending: 1},
			"overdue": {settle: "30s", wantExit: exitFindings},
		} {
			t.Run(name, func(t *testing.T) {
				var out bytes.Buffer
				err := audit(t.Context(), []string{"--kubeconfig", kc, "--records-namespace", recNS, "--settle", tc.settle, "-o", "json"}, &out)
				if got := exitCode(err); got != tc.wantExit {
					t.Fatalf("audit = %v: exit %d, want %d", err, got, tc.wantExit)
				}
				var got report
				if err := json.Unmarshal(out.Bytes(), &got); err != nil {
					t.Fatalf("decode JSON report: %v\n%s", err, out.String())
				}
				if got.Records.Pending != tc.wantPending || got.Records.OwnerGone != 1 {
					t.Errorf("JSON report: %d pending, %d owner gone; want %d, 1", got.Records.Pending, got.Records.OwnerGone, tc.wantPending)
				}
			})
		}
	})
}

// TestExitCode: the statuses --help documents.
func TestExitCode(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"success":          {nil, exitOK},
		"error":            {errors.New("cannot reach the cluster"), exitError},
		"findings":         {fmt.Errorf(msgFindings, errFindings, "1 overdue"), exitFindings},
		"pending":          {fmt.Errorf(msgFindings, errPending, "1 pending"), exitPending},
		"wrapped findings": {fmt.Errorf("audit: %w", fmt.Errorf(msgFindings, errFindings, "x")), exitFindings},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, exitCode(tc.err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	var out bytes.Buffer
	if err := audit(t.Context(), []string{"-h"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"exit status:", "0  nothing found", "2  findings to act on", "3  no findings, but pending records"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestAuditClean(t *testing.T) {
	t.Parallel()
	c := testenv.Client(t, testenv.Scheme())
	ns, recNS := testenv.Namespace(t, c), testenv.Namespace(t, c)
	if _, err := ledger.LoadKey(t.Context(), c, recNS, ""); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, testAuditor(t, recNS, time.Now().Add(time.Hour), ns))
	want := report{
		Now: rep.Now, SettleSeconds: 300, RecordSettleSeconds: 360, RecordsNamespace: recNS, Deletions: []deletion{},
		Records: recordsSection{Gone: []goneRecord{}, Invalid: []invalidRecord{}, Authenticated: true}, Unreachable: []unreachable{},
		HoldersDown: []holderDown{},
	}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if n := rep.findings(); n != 0 {
		t.Errorf("findings = %d, want 0", n)
	}

	t.Run("missing records namespace", func(t *testing.T) {
		rep := mustRun(t, testAuditor(t, "no-such-namespace", time.Now(), ns))
		if len(rep.Warnings) != 2 || !strings.Contains(rep.Warnings[0], "no-such-namespace does not exist") || !strings.Contains(rep.Warnings[1], "not authenticated") {
			t.Errorf("warnings = %q, want one about the missing namespace and one about the key", rep.Warnings)
		}
	})
}

func TestAuditArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	deadCluster := filepath.Join(dir, "dead")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["dead"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	kc.CurrentContext = "dead"
	if err := clientcmd.WriteToFile(*kc, deadCluster); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"unknown flag":   {args: []string{"--no-such-flag"}, want: []string{"no-such-flag"}},
		"bad output":     {args: []string{"-o", "yaml"}, want: []string{`"yaml"`, "text or json"}},
		"bad settle":     {args: []string{"--settle", "-1s"}, want: []string{"--settle"}},
		"extra argument": {args: []string{"now"}, want: []string{`"now"`}},
		"missing config": {args: []string{"--kubeconfig", missing}, want: []string{"--kubeconfig " + missing}},
		"help":           {args: []string{"-h"}},
		"dead cluster":   {args: []string{"--kubeconfig", deadCluster}, want: []string{"cannot reach the cluster at https://127.0.0.1:1"}},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := audit(t.Context(), tc.args, &out)
			if tc.want == nil {
				if err != nil || !strings.Contains(out.String(), "usage: finale audit") {
					t.Errorf("audit(%q) = %v, want nil and the usage:\n%s", tc.args, err, out.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("audit(%q) succeeded", tc.args)
			}
			if errors.Is(err, errFindings) {
				t.Errorf("audit(%q) = %v: a usage error is not a finding", tc.args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("audit(%q) = %v, want it to mention %s", tc.args, err, w)
				}
			}
		})
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("audit created %s", missing)
	}
}
