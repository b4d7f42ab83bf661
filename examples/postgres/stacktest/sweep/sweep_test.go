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
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
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
	e.clock.Step(settled)

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
	opts := e.options(mgr.GetCache(), b)
	opts.Live, opts.Recorder = mgr.GetAPIReader(), mgr.GetEventRecorder("finale-sweep")
	s, err := sweep.New(opts)
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

// TestNamesakeKeepsTheRecord: an owner re-created under the same kind,
// namespace and name that claims the old UID (ledger.AnnotationUID, as a
// restore keeps it) may adopt the old record, so while it exists nothing of
// the old owner's is deleted; once it is gone too, the old record is swept.
func TestNamesakeKeepsTheRecord(t *testing.T) {
	e := newEnv(t)
	old := newWidget(t, e.c, e.users, "same-name")
	oldRole := e.create(t, old, e.a)
	e.deleteOwner(t, old)
	restored := widget(e.users, "same-name")
	restored.SetAnnotations(map[string]string{ledger.AnnotationUID: string(old.UID)})
	if err := e.c.Create(t.Context(), restored); err != nil {
		t.Fatal(err)
	}
	recreated := ownerOf(restored)
	if recreated.UID == old.UID {
		t.Fatal("recreated object kept its UID")
	}
	newRole := e.create(t, recreated, e.a)
	e.clock.Step(settled)

	s := e.sweeper(t, e.c, e.a)
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Waiting: 1, Adoptable: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if got := metric(t, "finale_sweep_records", "state", "adoptable"); got != 1 {
		t.Errorf("finale_sweep_records{state=adoptable} = %v, want 1", got)
	}
	if !e.roleExists(t, oldRole) || !e.hasRecord(t, old) || !e.roleExists(t, newRole) || !e.hasRecord(t, recreated) {
		t.Fatal("a role or record went while a namesake may adopt it")
	}
	if evs := e.events.byReason(sweep.ReasonAdoptable); len(evs) != 1 || !strings.Contains(evs[0].Note, string(recreated.UID)) {
		t.Errorf("Adoptable events = %+v, want one naming the namesake", evs)
	}

	e.deleteOwner(t, recreated)
	removedBefore := metric(t, "finale_sweep_records_removed_total", "", "")
	if rep, err = s.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Deleted: 2, Removed: 2}, rep); diff != "" {
		t.Errorf("report once the namesake is gone (-want +got):\n%s", diff)
	}
	if got := metric(t, "finale_sweep_records_removed_total", "", "") - removedBefore; got != 2 {
		t.Errorf("records removed metric grew by %v, want 2", got)
	}
	if e.roleExists(t, oldRole) || e.roleExists(t, newRole) {
		t.Error("a role survived")
	}
}

// TestNamesakeWithoutClaimDoesNotBlock: a plain re-create of a name (no
// claim annotation, or one naming its own UID, as lifecycle sets it) is
// another object. Its predecessor, gone without its cleanup (a finalizer
// removed by hand), is swept by its exact identity once settled, while the
// namesake and its own role live on. Before, any namesake made the old
// record Adoptable, and the old role leaked for the namesake's whole life.
func TestNamesakeWithoutClaimDoesNotBlock(t *testing.T) {
	for name, annotations := range map[string]map[string]string{
		"no annotation":        nil,
		"its own uid":          {"finale.dev/uid": "set below"},
		"another object's uid": {"finale.dev/uid": "0e000000-0000-4000-8000-000000000009"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			old := newWidget(t, e.c, e.users, "same-name")
			oldRole := e.create(t, old, e.a)
			e.deleteOwner(t, old)
			u := widget(e.users, "same-name")
			if err := e.c.Create(t.Context(), u); err != nil {
				t.Fatal(err)
			}
			if annotations != nil {
				a := map[string]string{}
				for k, v := range annotations {
					if v == "set below" {
						v = string(u.GetUID())
					}
					a[k] = v
				}
				u.SetAnnotations(a)
				if err := e.c.Update(t.Context(), u); err != nil {
					t.Fatal(err)
				}
			}
			namesake := ownerOf(u)
			newRole := e.create(t, namesake, e.a)

			s := e.sweeper(t, e.c, e.a)
			rep, err := s.Pass(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sweep.Report{Waiting: 1, Settling: 1}, rep); diff != "" {
				t.Errorf("report within the settle window (-want +got):\n%s", diff)
			}
			e.clock.Step(settled)
			if rep, err = s.Pass(t.Context()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sweep.Report{Waiting: 1, Deleted: 1, Removed: 1}, rep); diff != "" {
				t.Errorf("report once settled (-want +got):\n%s", diff)
			}
			if e.roleExists(t, oldRole) || e.hasRecord(t, old) {
				t.Error("the predecessor's role or record outlives it while a namesake that does not claim it lives")
			}
			if !e.roleExists(t, newRole) || !e.hasRecord(t, namesake) {
				t.Error("the namesake's own role or record went")
			}
		})
	}
}

// staleCache says every owner is gone.
type staleCache struct{ client.Reader }

func (staleCache) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(corev1.Resource("widgets"), key.Name)
}

// TestOwnerConfirmedLiveBeforeActing: a cache that lags (or lies) about an
// owner being gone never makes the sweeper delete; the live read decides.
func TestOwnerConfirmedLiveBeforeActing(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "alive")
	role := e.create(t, o, e.a)
	e.clock.Step(settled)
	rep, err := e.sweeper(t, staleCache{e.c}, e.a).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Waiting: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if !e.roleExists(t, role) || !e.hasRecord(t, o) {
		t.Fatal("a live owner's role or record went on the cache's word")
	}
}

// TestRetainIsNeverDeleted: a gone owner whose policy was Retain (its
// deletion, a finalizer removed by hand, a namespace deleted past the hold)
// keeps its resources, and its record: the sweeper reports it once and
// never acts on it, so that a restored owner can still adopt it.
func TestRetainIsNeverDeleted(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "kept")
	role := e.createWith(t, ledger.Plan{Owner: o, Policy: ledger.PolicyRetain}, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(settled)
	s := e.sweeper(t, e.c, e.a)
	for pass := range 2 {
		rep, err := s.Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sweep.Report{Retained: 1}, rep); diff != "" {
			t.Errorf("pass %d: report (-want +got):\n%s", pass, diff)
		}
		e.clock.Step(time.Minute)
	}
	if !e.roleExists(t, role) {
		t.Fatal("the sweeper deleted a Retain owner's role")
	}
	if !e.hasRecord(t, o) {
		t.Error("the sweeper removed the record of a retained resource: a restored owner could never adopt it")
	}
	if got := metric(t, "finale_sweep_records", "state", "retained"); got != 1 {
		t.Errorf("finale_sweep_records{state=retained} = %v, want 1", got)
	}
	evs := e.events.byReason(sweep.ReasonRetained)
	if len(evs) != 1 || !strings.Contains(evs[0].Note, role) || evs[0].Regarding != ledger.ConfigMapName(o.UID) {
		t.Errorf("Retained events = %+v, want one, on the record, naming the role", evs)
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
	e.clock.Step(3*time.Minute + sweep.DefaultMaxClockSkew + time.Second)
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
	e.clock.Step(settled)
	// The sweeper knows only deployment B.
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	var logs logLines
	opts := e.options(e.c, b)
	opts.Log = logs.logger()
	s, err := sweep.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Unreachable: 1, Errors: 1}, rep); diff != "" {
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
	for _, want := range []string{role, ledger.Tag(o), "tried: target-0", "kubectl -n " + e.store.Namespace() + " delete configmap " + ledger.ConfigMapName(o.UID)} {
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

// spoof is a server that claims deployment A with what a reader of records
// knows (deployment and salt) and replays a response it once saw; it
// finds nothing and answers every delete with "not found".
type spoof struct {
	deployment, salt, seen string
	deletes                atomic.Int32
}

func (s *spoof) Prove(context.Context, ledger.Question) (ledger.Answer, error) {
	return ledger.Answer{Deployment: s.deployment, Salt: s.salt, Response: s.seen}, nil
}

func (s *spoof) Delete(_ context.Context, id, _ string) error {
	s.deletes.Add(1)
	return apierrors.NewNotFound(corev1.Resource("roles"), id)
}

func TestSpoofingServerCannotDropRecord(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "spoofed")
	role := e.create(t, o, e.a)
	rec, err := e.l.Get(t.Context(), o.UID)
	if err != nil {
		t.Fatal(err)
	}
	seen, err := e.a.Prove(t.Context(), ledger.Question{KeyID: e.key.ID(), Challenge: "00", Tag: rec.Tag})
	if err != nil {
		t.Fatal(err)
	}
	e.deleteOwner(t, o)
	e.clock.Step(settled)
	for name, sp := range map[string]*spoof{
		"replays a response": {deployment: rec.Deployment, salt: rec.Salt, seen: seen.Response},
		"makes one up":       {deployment: rec.Deployment, salt: rec.Salt, seen: strings.Repeat("ab", 32)},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := e.sweeper(t, e.c, sp).Pass(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sweep.Report{Unreachable: 1, Errors: 1}, rep); diff != "" {
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
	// The genuine deployment, after the spoof, finishes the job.
	genuine, err := pgtarget.Open(t.Context(), e.aDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer genuine.Close()
	rep, err := e.sweeper(t, e.c, &spoof{deployment: rec.Deployment, salt: rec.Salt}, genuine).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Deleted: 1, Removed: 1, Errors: 1}, rep); diff != "" {
		t.Errorf("report with the genuine deployment (-want +got):\n%s", diff)
	}
	if e.hasRecord(t, o) || e.roleExists(t, role) {
		t.Error("record or role left although the genuine deployment was reachable")
	}
}

// switching reaches deployment A until its first delete, then answers as
// B: the proof and the delete were two requests that may have reached
// different backends.
type switching struct {
	*pgtarget.Target
	b       ledger.Prover
	armed   atomic.Bool // the next delete switches to B
	deleted atomic.Bool // switched to B
}

func (s *switching) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	if s.deleted.Load() {
		return s.b.Prove(ctx, q)
	}
	return s.Target.Prove(ctx, q)
}

func (s *switching) Delete(ctx context.Context, id, tag string) error {
	if s.armed.CompareAndSwap(true, false) {
		defer s.deleted.Store(true)
	}
	return s.Target.Delete(ctx, id, tag)
}

func TestProvenAgainAfterDelete(t *testing.T) {
	e := newEnv(t)
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	// B is enrolled with the same key: a deployment of the same operator.
	e.create(t, newWidget(t, e.c, e.users, "in-b"), b)
	o := newWidget(t, e.c, e.users, "switch")
	e.create(t, o, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(settled)
	sw := &switching{Target: e.a, b: b}
	sw.armed.Store(true)
	s := e.sweeper(t, e.c, sw)
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Waiting: 1, Unreachable: 1, Deleted: 1, Errors: 1}, rep); diff != "" {
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
	if diff := cmp.Diff(sweep.Report{Waiting: 1, Deleted: 1, Removed: 1}, rep); diff != "" {
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
	// B is enrolled with the same key, and holds a record of its own.
	e.create(t, newWidget(t, e.c, e.users, "in-b"), b)
	// A create in A whose answer was lost: a record without IDs.
	if _, err := e.l.Create(t.Context(), ledger.Plan{Owner: o}, e.a, func(context.Context, string) ([]string, error) {
		return nil, errors.New("connection reset")
	}); err == nil {
		t.Fatal("want the create error")
	}
	e.deleteOwner(t, o)
	e.clock.Step(settled)
	// B finds nothing with the tag, which would look like "nothing to do".
	rep, err := e.sweeper(t, e.c, b).Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Waiting: 1, Unreachable: 1, Errors: 1}, rep); diff != "" {
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
	// Someone else's role, which an edited record names.
	victim := newWidget(t, e.c, e.users, "victim")
	victimRole := e.create(t, victim, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(settled)
	var cm corev1.ConfigMap
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(o.UID)}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["externalIDs"] = `["` + role + `","` + victimRole + `"]`
	cm.Data["tag"] = ledger.Tag(victim)
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
		if diff := cmp.Diff(sweep.Report{Waiting: 1, Invalid: 2}, rep); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
		if got := metric(t, "finale_sweep_records", "state", "invalid"); got != 2 {
			t.Errorf("finale_sweep_records{state=invalid} = %v, want 2", got)
		}
	}
	if !e.roleExists(t, role) || !e.roleExists(t, victimRole) || !e.hasRecord(t, o) {
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
	l, err := ledger.New(store, ledger.Options{Key: ledger.GenerateKey()})
	if err != nil {
		t.Fatal(err)
	}
	targets := candidates()
	reader := testenv.Client(t, testenv.Scheme())
	for name, tc := range map[string]struct {
		opts    sweep.Options
		wantErr string
	}{
		"complete":       {opts: sweep.Options{Ledger: l, Owners: reader, Live: reader, Targets: targets}},
		"missing all":    {opts: sweep.Options{}, wantErr: "missing [Ledger Owners Live Targets]"},
		"negative value": {opts: sweep.Options{Ledger: l, Owners: reader, Live: reader, Targets: targets, Settle: -1}, wantErr: "must not be negative"},
		"negative grace": {opts: sweep.Options{Ledger: l, Owners: reader, Live: reader, Targets: targets, ClaimGrace: -time.Hour}, wantErr: "must not be negative"},
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
	if _, err := e.l.Create(t.Context(), ledger.Plan{Owner: o}, e.a, func(ctx context.Context, tag string) ([]string, error) {
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
	e.clock.Step(settled)
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

// counting is a target that counts what it is asked and answers through
// the genuine deployment.
type counting struct {
	ledger.Target
	proofs, deletes atomic.Int32
}

func (c *counting) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	c.proofs.Add(1)
	return c.Target.Prove(ctx, q)
}

func (c *counting) Delete(ctx context.Context, id, tag string) error {
	c.deletes.Add(1)
	return c.Target.Delete(ctx, id, tag)
}

// A connection without Authentication is never asked anything, however
// well it would prove the deployment: through it a copy behind a proxy
// would answer as the deployment does. The record stays, Unverified, with
// one Warning Event naming the connection and saying what to do, and the
// state's gauge; an authenticated connection offered after it is used.
func TestUnauthenticatedConnectionIsNeverUsed(t *testing.T) {
	e := newEnv(t)
	o := newWidget(t, e.c, e.users, "unverified")
	role := e.create(t, o, e.a)
	e.deleteOwner(t, o)
	e.clock.Step(settled)
	plain := &counting{Target: e.a}
	offered := []sweep.Candidate{{Name: "plain", Target: plain}}
	opts := e.options(e.c)
	opts.Targets = sweep.TargetsFn(func(context.Context, *ledger.Record) ([]sweep.Candidate, error) { return offered, nil })
	s, err := sweep.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Unverified: 1}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if n, m := plain.proofs.Load(), plain.deletes.Load(); n+m > 0 {
		t.Errorf("the unauthenticated connection was asked %d proofs and %d deletes", n, m)
	}
	if !e.hasRecord(t, o) || !e.roleExists(t, role) {
		t.Fatal("record or role gone")
	}
	if got := metric(t, "finale_sweep_records", "state", "unverified"); got != 1 {
		t.Errorf("finale_sweep_records{state=unverified} = %v, want 1", got)
	}
	evs := e.events.byReason(sweep.ReasonUnverified)
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Regarding != ledger.ConfigMapName(o.UID) {
		t.Fatalf("events = %+v, want one Warning about the record", evs)
	}
	for _, want := range []string{"not used: plain", "verify-full", role, ledger.Tag(o), "kubectl -n " + e.store.Namespace() + " delete configmap " + ledger.ConfigMapName(o.UID)} {
		if !strings.Contains(evs[0].Note, want) {
			t.Errorf("event note %q lacks %q", evs[0].Note, want)
		}
	}
	if n := len(e.events.byReason(sweep.ReasonSwept)); n > 0 {
		t.Errorf("%d Swept events", n)
	}

	// An authenticated connection after it: that one sweeps.
	verified := &counting{Target: e.a}
	offered = append(offered, sweep.Candidate{Name: "verified", Target: verified, Authentication: authenticated})
	e.clock.Step(sweep.DefaultMaxBackoff)
	if rep, err = s.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sweep.Report{Deleted: 1, Removed: 1}, rep); diff != "" {
		t.Errorf("report with an authenticated connection (-want +got):\n%s", diff)
	}
	if plain.proofs.Load()+plain.deletes.Load() > 0 || verified.deletes.Load() != 1 {
		t.Errorf("asked: unauthenticated %d proofs, %d deletes; authenticated %d deletes (want 1)", plain.proofs.Load(), plain.deletes.Load(), verified.deletes.Load())
	}
	if e.hasRecord(t, o) || e.roleExists(t, role) {
		t.Error("record or role left after the authenticated sweep")
	}
}

// A kept record is reported once per change of the sweeper's verdict, not
// once per process: the verdict is kept on the record
// (ledger.Note), so a restarted sweeper, or a new leader, does not event
// a Retain record or an unreachable one again.
func TestKeptRecordReportedOncePerChange(t *testing.T) {
	e := newEnv(t)
	kept := newWidget(t, e.c, e.users, "kept")
	e.createWith(t, ledger.Plan{Owner: kept, Policy: ledger.PolicyRetain}, e.a)
	lost := newWidget(t, e.c, e.users, "lost")
	e.create(t, lost, e.a)
	e.deleteOwner(t, kept)
	e.deleteOwner(t, lost)
	e.clock.Step(settled)
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t)) // not the records' deployment
	for restart := range 3 {
		s := e.sweeper(t, e.c, b)
		if _, err := s.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Step(time.Hour)
		if n := len(e.events.byReason(sweep.ReasonRetained)); n != 1 {
			t.Errorf("after %d restarts: %d Retained Events, want 1", restart, n)
		}
		if n := len(e.events.byReason(sweep.ReasonUnreachable)); n != 1 {
			t.Errorf("after %d restarts: %d Unreachable Events, want 1", restart, n)
		}
	}
	for o, want := range map[ledger.Owner]ledger.Note{
		kept: {State: string(sweep.Retained)},
		lost: {State: string(sweep.Unreachable), Class: string(errclass.Unknown)}, // the class its Event names
	} {
		r, err := e.store.Get(t.Context(), o.UID)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Note.Same(want) || !r.Note.Since.Equal(t0.Add(settled)) { // the first pass's time
			t.Errorf("note on %s = %+v, want %+v since the first pass", o.Name, r.Note, want)
		}
	}
}
