package sweep_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

func TestNamespaceDeletedWhileOperatorDown(t *testing.T) {
	e := newEnv(t)
	cp := testenv.ControlPlane(t)
	ns := e.users
	var owners []ledger.Owner
	var roles []string
	for _, name := range []string{"w1", "w2", "w3"} {
		o := newWidget(t, e.c, ns, name)
		owners = append(owners, o)
		roles = append(roles, e.create(t, o, e.a))
	}
	// The operator is down (nothing runs); the namespace goes, Widgets and
	// all. The records, in the operator's namespace, stay.
	if err := controlplane.DeleteAndWait(t.Context(), e.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if !e.hasRecord(t, o) {
			t.Fatalf("record of %s went with the namespace", o)
		}
	}
	e.clock.Step(sweep.DefaultSettle + time.Second)

	// The operator restarts with a new connection to the same server.
	b, err := pgtarget.Open(t.Context(), e.aDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mgr, err := manager.New(cp.Config, manager.Options{
		Scheme: testenv.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sweep.New(sweep.Options{
		Store: e.store, Owners: mgr.GetCache(), Recorder: mgr.GetEventRecorder("finale-sweep"), Clock: e.clock, Interval: time.Minute,
		Targets: sweep.TargetsFn(func(context.Context) ([]ledger.Target, error) { return []ledger.Target{b}, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	err = controlplane.WaitFor(t.Context(), 60*time.Second, "records to be swept", func(context.Context) (bool, error) {
		for _, o := range owners {
			if e.hasRecord(t, o) {
				e.clock.Step(time.Minute) // the next pass
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		if e.roleExists(t, r) {
			t.Errorf("role %s leaked", r)
		}
	}
	// A Normal Event per swept record, through the manager's recorder.
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "Swept events", func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace(e.store.Namespace())); err != nil {
			return false, err
		}
		n := 0
		for _, ev := range evs.Items {
			if ev.Reason == sweep.ReasonSwept && ev.Type == corev1.EventTypeNormal {
				n++
			}
		}
		return n == len(owners), nil
	})
	if err != nil {
		t.Error(err)
	}
}

func TestRecreatedOwnerIsLeftAlone(t *testing.T) {
	e := newEnv(t)
	old := newWidget(t, e.c, e.users, "same-name")
	oldRole := e.create(t, old, e.a)
	e.deleteOwner(t, old)
	recreated := newWidget(t, e.c, e.users, "same-name")
	if recreated.UID == old.UID {
		t.Fatal("recreated object kept its UID")
	}
	newRole := e.create(t, recreated, e.a)
	e.clock.Step(sweep.DefaultSettle + time.Second)

	removedBefore := metric(t, "finale_sweep_records_removed_total", "", "")
	deletedBefore := metric(t, "finale_sweep_deleted_total", "", "")
	rep, err := e.sweeper(t, e.c, e.a).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := metric(t, "finale_sweep_records_removed_total", "", "") - removedBefore; got != 1 {
		t.Errorf("records removed metric grew by %v, want 1", got)
	}
	if got := metric(t, "finale_sweep_deleted_total", "", "") - deletedBefore; got != 1 {
		t.Errorf("deleted metric grew by %v, want 1", got)
	}
	if got := metric(t, "finale_sweep_records", "state", "waiting"); got != 1 {
		t.Errorf("finale_sweep_records{state=waiting} = %v, want 1", got)
	}
	if diff := cmp.Diff(sweep.Report{Waiting: 1, Deleted: 1, Removed: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if e.roleExists(t, oldRole) || e.hasRecord(t, old) {
		t.Error("the old owner's role or record survived")
	}
	if !e.roleExists(t, newRole) || !e.hasRecord(t, recreated) {
		t.Error("the recreated owner's role or record was touched")
	}
}

func TestSettleWindowCountsFromLastAttempt(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "settle")
	role := e.create(t, o, e.a)
	e.clock.Step(4 * time.Minute)
	// A later attempt (say, written from the owner's status) moves the window.
	if _, err := e.l.Observe(t.Context(), o.UID, e.a, []string{role}, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.deleteOwner(t, o)
	e.clock.Step(2 * time.Minute) // 6 min after create, 2 after the last attempt
	s := e.sweeper(t, e.c, e.a)
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Settling: 1}, rep); diff != "" {
		t.Errorf("report inside the window (-want +got):\n%s", diff)
	}
	if !e.roleExists(t, role) {
		t.Fatal("role deleted inside the settle window")
	}
	e.clock.Step(3*time.Minute + time.Second)
	if rep, err = s.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Deleted: 1, Removed: 1}, rep); diff != "" {
		t.Errorf("report after the window (-want +got):\n%s", diff)
	}
	if e.roleExists(t, role) || e.hasRecord(t, o) {
		t.Error("role or record left after the window")
	}
}

func TestUnreachableRecordStaysAndIsReported(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "lost")
	role := e.create(t, o, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(sweep.DefaultSettle + time.Second)
	// The sweeper knows only deployment B.
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	var logs logLines
	s, err := sweep.New(sweep.Options{
		Store: e.store, Owners: e.c, Recorder: e.events, Clock: e.clock, Log: logs.logger(),
		Targets: sweep.TargetsFn(func(context.Context) ([]ledger.Target, error) { return []ledger.Target{b}, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Unreachable: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if !e.hasRecord(t, o) || !e.roleExists(t, role) {
		t.Fatal("record or role gone although no connection reaches the deployment")
	}
	if got := metric(t, "finale_sweep_records", "state", "unreachable"); got != 1 {
		t.Errorf("finale_sweep_records{state=unreachable} = %v, want 1", got)
	}
	evs := e.events.byReason(sweep.ReasonUnreachable)
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Regarding != ledger.ConfigMapName(o.UID) {
		t.Fatalf("events = %+v, want one Warning about the record", evs)
	}
	for _, want := range []string{role, ledger.Tag(o), "kubectl -n " + e.store.Namespace() + " delete configmap " + ledger.ConfigMapName(o.UID)} {
		if !strings.Contains(evs[0].Note, want) {
			t.Errorf("event note %q lacks %q", evs[0].Note, want)
		}
	}
	if !strings.Contains(logs.String(), "kubectl -n "+e.store.Namespace()+" delete configmap") {
		t.Errorf("no log line telling an admin how to clean up; logs:\n%s", logs.String())
	}
	// The next pass backs off and does not repeat the Event.
	if rep, err = s.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Unreachable: 1, BackingOff: 1}, rep); diff != "" {
		t.Errorf("second report (-want +got):\n%s", diff)
	}
	if n := len(e.events.byReason(sweep.ReasonUnreachable)); n != 1 {
		t.Errorf("%d Unreachable events after two passes, want 1", n)
	}
}

// spoof is a server that claims deployment A, offers as its token whatever a
// record reader could copy (the commitment), finds nothing and answers every
// delete with "not found".
type spoof struct {
	claim   ledger.Identity
	deletes atomic.Int32
}

func (s *spoof) Identify(context.Context) (ledger.Identity, error) { return s.claim, nil }
func (s *spoof) FindByTag(context.Context, string) ([]string, error) {
	return nil, nil
}

func (s *spoof) Delete(_ context.Context, id string) error {
	s.deletes.Add(1)
	return apierrors.NewNotFound(corev1.Resource("roles"), id)
}

func TestSpoofingServerCannotDropRecord(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "spoofed")
	role := e.create(t, o, e.a)
	rec, err := e.store.Get(t.Context(), o.UID)
	if err != nil {
		t.Fatal(err)
	}
	e.deleteOwner(t, o)
	e.clock.Step(sweep.DefaultSettle + time.Second)
	for name, claim := range map[string]ledger.Identity{
		"replays the commitment": {Deployment: rec.Deployment, Token: []byte(rec.Proof)},
		"guesses a token":        {Deployment: rec.Deployment, Token: []byte("0123456789abcdef0123456789abcdef")},
	} {
		t.Run(name, func(t *testing.T) {
			sp := &spoof{claim: claim}
			rep, err := e.sweeper(t, e.c, sp).Pass(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sweep.Report{Unreachable: 1}, rep); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if sp.deletes.Load() != 0 {
				t.Errorf("the sweeper sent %d deletes to the spoofing server", sp.deletes.Load())
			}
			if !e.hasRecord(t, o) || !e.roleExists(t, role) {
				t.Fatal("the spoofing server made the record or the role disappear")
			}
		})
	}
	// The genuine deployment, next to the spoof, finishes the job.
	genuine, err := pgtarget.Open(t.Context(), e.aDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer genuine.Close()
	rep, err := e.sweeper(t, e.c, &spoof{claim: ledger.Identity{Deployment: rec.Deployment, Token: []byte(rec.Proof)}}, genuine).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Deleted: 1, Removed: 1}, rep); diff != "" {
		t.Errorf("report with the genuine deployment (-want +got):\n%s", diff)
	}
	if e.hasRecord(t, o) || e.roleExists(t, role) {
		t.Error("record or role left although the genuine deployment was reachable")
	}
}

// switching reaches deployment A until its first delete, then reports B: the
// proof and the delete were two requests that may have reached different
// backends.
type switching struct {
	*pgtarget.Target
	b       ledger.Identifier
	armed   atomic.Bool // the next delete switches to B
	deleted atomic.Bool // switched to B
}

func (s *switching) Identify(ctx context.Context) (ledger.Identity, error) {
	if s.deleted.Load() {
		return s.b.Identify(ctx)
	}
	return s.Target.Identify(ctx)
}

func (s *switching) Delete(ctx context.Context, id string) error {
	if s.armed.CompareAndSwap(true, false) {
		defer s.deleted.Store(true)
	}
	return s.Target.Delete(ctx, id)
}

func TestIdentityReadAgainAfterDelete(t *testing.T) {
	e := newEnv(t)
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	o := newWidget(t, e.c, e.users, "switch")
	e.create(t, o, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(sweep.DefaultSettle + time.Second)
	sw := &switching{Target: e.a, b: b}
	sw.armed.Store(true)
	s := e.sweeper(t, e.c, sw)
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Unreachable: 1, Deleted: 1, Errors: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if !e.hasRecord(t, o) {
		t.Fatal("record removed although the deployment switched during the delete")
	}
	// Back on A (after the backoff), the sweep confirms and removes it.
	sw.deleted.Store(false)
	e.clock.Step(2 * time.Minute)
	if rep, err = s.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The recorded ID is deleted again (already gone: confirmed).
	if diff := cmp.Diff(sweep.Report{Deleted: 1, Removed: 1}, rep); diff != "" {
		t.Errorf("report on A (-want +got):\n%s", diff)
	}
	if e.hasRecord(t, o) {
		t.Error("record left after a confirmed delete in A")
	}
}

func TestIDlessRecordCheckedAgainstDeploymentFirst(t *testing.T) {
	e := newEnv(t)
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	o := newWidget(t, e.c, e.users, "idless")
	// A create in A whose answer was lost: a record without IDs.
	if _, err := e.l.Create(t.Context(), o, e.a, func(context.Context, string) ([]string, error) {
		return nil, errors.New("connection reset")
	}); err == nil {
		t.Fatal("want the create error")
	}
	e.deleteOwner(t, o)
	e.clock.Step(sweep.DefaultSettle + time.Second)
	// B finds nothing with the tag, which would look like "nothing to do".
	rep, err := e.sweeper(t, e.c, b).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Unreachable: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if !e.hasRecord(t, o) {
		t.Fatal("ID-less record of A dropped through B")
	}
}

func TestInvalidRecordsAreNeverActedOn(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "edited")
	role := e.create(t, o, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(sweep.DefaultSettle + time.Second)
	var cm corev1.ConfigMap
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(o.UID)}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["ownerName"] = ""
	if err := e.c.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	garbage := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.store.Namespace(), Name: "finale-cleanup-garbage",
		Labels: map[string]string{ledger.LabelRecord: ledger.LabelRecordValue}}, Data: map[string]string{"hello": "world"}}
	if err := e.c.Create(t.Context(), garbage); err != nil {
		t.Fatal(err)
	}
	s := e.sweeper(t, e.c, e.a)
	for range 2 {
		rep, err := s.Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sweep.Report{Invalid: 2}, rep); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
		if got := metric(t, "finale_sweep_records", "state", "invalid"); got != 2 {
			t.Errorf("finale_sweep_records{state=invalid} = %v, want 2", got)
		}
	}
	if !e.roleExists(t, role) || !e.hasRecord(t, o) {
		t.Error("an invalid record was acted on")
	}
	if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(garbage), garbage); err != nil {
		t.Errorf("garbage record: %v", err)
	}
	var got []string
	for _, ev := range e.events.byReason(sweep.ReasonInvalid) {
		got = append(got, ev.Regarding)
	}
	slices.Sort(got)
	want := []string{ledger.ConfigMapName(o.UID), "finale-cleanup-garbage"}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Invalid events, once each (-want +got):\n%s", diff)
	}
}

func TestNew(t *testing.T) {
	store, err := ledger.NewConfigMapStore(testenv.Client(t, testenv.Scheme()), "ns")
	if err != nil {
		t.Fatal(err)
	}
	targets := sweep.TargetsFn(func(context.Context) ([]ledger.Target, error) { return nil, nil })
	reader := testenv.Client(t, testenv.Scheme())
	for name, tc := range map[string]struct {
		opts    sweep.Options
		wantErr string
	}{
		"complete":       {opts: sweep.Options{Store: store, Owners: reader, Targets: targets}},
		"missing all":    {opts: sweep.Options{}, wantErr: "missing [Store Owners Targets]"},
		"negative value": {opts: sweep.Options{Store: store, Owners: reader, Targets: targets, Settle: -1}, wantErr: "must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := sweep.New(tc.opts)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !s.NeedLeaderElection() {
					t.Error("the sweeper must run only on the leader")
				}
				return
			}
			if !strings.Contains(got, tc.wantErr) {
				t.Errorf("error %q, want it to contain %q", got, tc.wantErr)
			}
		})
	}
}

func TestSweeperResolvesLostCreateByTag(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "lost-answer")
	role := pgtarget.RandomName("sweep_lost_")
	// The role is created, then the answer is lost: the record has no ID.
	if _, err := e.l.Create(t.Context(), o, e.a, func(ctx context.Context, tag string) ([]string, error) {
		if err := e.a.CreateRole(ctx, role, tag); err != nil {
			t.Fatal(err)
		}
		return nil, errors.New("connection reset after the create")
	}); err == nil {
		t.Fatal("want the create error")
	}
	if rec, err := e.store.Get(t.Context(), o.UID); err != nil || len(rec.ExternalIDs) != 0 {
		t.Fatalf("record = %+v, %v; want one without IDs", rec, err)
	}
	e.deleteOwner(t, o)
	e.clock.Step(sweep.DefaultSettle + time.Second)
	rep, err := e.sweeper(t, e.c, e.a).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Deleted: 1, Removed: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if e.roleExists(t, role) || e.hasRecord(t, o) {
		t.Error("the tagged role or its record survived")
	}
}
