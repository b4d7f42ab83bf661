package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/internal/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// ownerIn creates a real owner object (a ConfigMap in its own namespace) so
// that UIDs come from the apiserver.
func ownerIn(t *testing.T, c client.Client, ns, name string) ledger.Owner {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	return ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: cm.UID}
}

type env struct {
	c     client.Client
	store *ledger.ConfigMapStore
	clock *clocktesting.FakeClock
	l     *ledger.Ledger
	users string // namespace for owners
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testenv.Client(t, testenv.Scheme())
	opNS := testenv.Namespace(t, c)
	store, err := ledger.NewConfigMapStore(c, opNS)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(t0)
	return &env{c: c, store: store, clock: clk, l: ledger.New(store, ledger.Options{Clock: clk}), users: testenv.Namespace(t, c)}
}

func createRole(tg *pgtarget.Target, name string, calls *atomic.Int32) ledger.CreateFunc {
	return func(ctx context.Context, tag string) ([]string, error) {
		calls.Add(1)
		return []string{name}, tg.CreateRole(ctx, name, tag)
	}
}

func TestCreateWritesRecordBeforeCreating(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "a")
	name := pgtarget.RandomName("ledger_a_")
	var sawRecord bool
	rec, err := e.l.Create(t.Context(), owner, tg, func(ctx context.Context, tag string) ([]string, error) {
		r, err := e.store.Get(ctx, owner.UID)
		if err != nil {
			t.Errorf("create called without a stored record: %v", err)
		} else {
			sawRecord = r.Tag == tag && r.LastCreateAttempt.Equal(t0)
		}
		return []string{name}, tg.CreateRole(ctx, name, tag)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawRecord {
		t.Error("record at create time lacked the tag or the attempt time")
	}
	got, err := e.store.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	id, err := tg.Identify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := &ledger.Record{
		Schema: ledger.SchemaVersion, Owner: owner, Deployment: id.Deployment, Proof: ledger.Commit(id),
		Tag: "finale:configmap:" + string(owner.UID), ExternalIDs: []string{name},
		CreatedAt: t0, LastCreateAttempt: t0, Version: rec.Version, Source: got.Source,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored record (-want +got):\n%s", diff)
	}
	if got.Source.Namespace != e.store.Namespace() || got.Source.Name != "finale-cleanup-"+string(owner.UID) {
		t.Errorf("record stored at %s/%s", got.Source.Namespace, got.Source.Name)
	}
	var cm corev1.ConfigMap
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: got.Source.Name}, &cm); err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		ledger.LabelRecord: ledger.LabelRecordValue, ledger.LabelKind: "configmap",
		ledger.LabelDeployment: ledger.DeploymentLabel(id.Deployment), "app.kubernetes.io/managed-by": "finale",
	}
	if diff := cmp.Diff(wantLabels, cm.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

func TestCreateNotCalledWhenRecordWriteFails(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	// A namespace that does not exist refuses the record, as a terminating
	// one would.
	store, err := ledger.NewConfigMapStore(c, "no-such-namespace-for-records")
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(store, ledger.Options{Clock: clocktesting.NewFakeClock(t0)})
	owner := ownerIn(t, c, testenv.Namespace(t, c), "a")
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	var calls atomic.Int32
	_, err = l.Create(t.Context(), owner, tg, createRole(tg, pgtarget.RandomName("never_"), &calls))
	if !errors.Is(err, ledger.ErrRecordWrite) {
		t.Fatalf("Create error = %v, want ErrRecordWrite", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("create called %d times although the record was not written", n)
	}
}

// failPuts makes the Nth and later Puts fail, as a crash right after the
// external create would: the ID never reaches the record.
type failPuts struct {
	ledger.Store
	n, after int32
}

func (f *failPuts) Put(ctx context.Context, r *ledger.Record) error {
	if atomic.AddInt32(&f.n, 1) > f.after {
		return errors.New("operator crashed")
	}
	return f.Store.Put(ctx, r)
}

func TestCrashBetweenCreateAndRecordingIsResolvedByTag(t *testing.T) {
	e := newEnv(t)
	tg, dsn := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "crash")
	var calls atomic.Int32
	crashing := ledger.New(&failPuts{Store: e.store, after: 1}, ledger.Options{Clock: e.clock})
	first := pgtarget.RandomName("ledger_crash_")
	if _, err := crashing.Create(t.Context(), owner, tg, createRole(tg, first, &calls)); err == nil {
		t.Fatal("Create succeeded although recording the ID failed")
	}
	rec, err := e.store.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.ExternalIDs) != 0 {
		t.Fatalf("IDs recorded despite the crash: %q", rec.ExternalIDs)
	}

	// Restart: a new ledger, a new connection, the same owner. A retried
	// create would use a new random name and leave a duplicate.
	e.clock.Step(time.Minute)
	tg2, err := pgtarget.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer tg2.Close()
	restarted := ledger.New(e.store, ledger.Options{Clock: e.clock})
	rec, err = restarted.Create(t.Context(), owner, tg2, createRole(tg2, pgtarget.RandomName("ledger_dup_"), &calls))
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("create called %d times, want 1 (the retry must adopt by tag)", n)
	}
	if diff := cmp.Diff([]string{first}, rec.ExternalIDs); diff != "" {
		t.Errorf("recorded IDs (-want +got):\n%s", diff)
	}
	tagged, err := tg2.FindByTag(t.Context(), rec.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{first}, tagged); diff != "" {
		t.Errorf("roles carrying the tag (-want +got):\n%s", diff)
	}
	if !rec.LastCreateAttempt.Equal(t0.Add(time.Minute)) {
		t.Errorf("LastCreateAttempt = %v, want the retry's time", rec.LastCreateAttempt)
	}
}

func TestCreateRefusesRecordOfAnotherDeployment(t *testing.T) {
	e := newEnv(t)
	pg := testenv.Postgres(t)
	a, _ := pgtarget.Fresh(t, pg)
	b, _ := pgtarget.Fresh(t, pg)
	owner := ownerIn(t, e.c, e.users, "switch")
	// The create in A loses its answer: a record without IDs.
	_, err := e.l.Create(t.Context(), owner, a, func(context.Context, string) ([]string, error) {
		return nil, errors.New("connection reset")
	})
	if err == nil {
		t.Fatal("want the create error")
	}
	before, err := e.store.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	_, err = e.l.Create(t.Context(), owner, b, createRole(b, pgtarget.RandomName("ledger_b_"), &calls))
	if !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("Create through B = %v, want ErrNotProven", err)
	}
	if calls.Load() != 0 {
		t.Error("create called in B for a record of A")
	}
	_, err = e.l.Observe(t.Context(), owner.UID, b, []string{"from-b"}, time.Time{})
	if !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("Observe through B = %v, want ErrNotProven", err)
	}
	after, err := e.store.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("record changed (-want +got):\n%s", diff)
	}
}

func TestObserveRewritesOnNewerAttempt(t *testing.T) {
	for name, tc := range map[string]struct {
		ids         []string
		attempt     time.Duration // after t0; negative is older
		wantWrite   bool
		wantIDs     []string
		wantAttempt time.Duration
	}{
		"same IDs, same time":       {ids: []string{"x"}, attempt: 0, wantIDs: []string{"x"}},
		"same IDs, no time":         {ids: []string{"x"}, attempt: -1, wantIDs: []string{"x"}},
		"same IDs, older time":      {ids: []string{"x"}, attempt: -time.Hour, wantIDs: []string{"x"}},
		"same IDs, newer time":      {ids: []string{"x"}, attempt: time.Hour, wantWrite: true, wantIDs: []string{"x"}, wantAttempt: time.Hour},
		"new ID, same time":         {ids: []string{"x", "y"}, attempt: 0, wantWrite: true, wantIDs: []string{"x", "y"}},
		"fewer IDs never shrink it": {ids: nil, attempt: 0, wantIDs: []string{"x"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := ledger.Identity{Deployment: "dep-1", Token: []byte("0123456789abcdef0123")}
			conn := ledger.TargetFuncs{
				IdentifyFn:  func(context.Context) (ledger.Identity, error) { return id, nil },
				FindByTagFn: func(context.Context, string) ([]string, error) { return nil, nil },
			}
			owner := ownerIn(t, e.c, e.users, "o")
			first, err := e.l.Create(t.Context(), owner, conn, func(context.Context, string) ([]string, error) { return []string{"x"}, nil })
			if err != nil {
				t.Fatal(err)
			}
			var at time.Time
			if tc.attempt != -1 {
				at = t0.Add(tc.attempt)
			}
			got, err := e.l.Observe(t.Context(), owner.UID, conn, tc.ids, at)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := e.store.Get(t.Context(), owner.UID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantWrite, stored.Version != first.Version); diff != "" {
				t.Errorf("rewritten (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantIDs, stored.ExternalIDs); diff != "" {
				t.Errorf("IDs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(t0.Add(tc.wantAttempt), stored.LastCreateAttempt); diff != "" {
				t.Errorf("attempt (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(stored.Version, got.Version); diff != "" {
				t.Errorf("returned version (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCleanupOnlyThroughTheProvenDeployment(t *testing.T) {
	e := newEnv(t)
	pg := testenv.Postgres(t)
	a, _ := pgtarget.Fresh(t, pg)
	b, _ := pgtarget.Fresh(t, pg)
	owner := ownerIn(t, e.c, e.users, "cleanup")
	var calls atomic.Int32
	role := pgtarget.RandomName("ledger_cleanup_")
	rec, err := e.l.Create(t.Context(), owner, a, createRole(a, role, &calls))
	if err != nil {
		t.Fatal(err)
	}
	// A tagged resource whose ID never reached the record.
	stray := pgtarget.RandomName("ledger_stray_")
	if err := a.CreateRole(t.Context(), stray, rec.Tag); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Cleanup(t.Context(), owner.UID, b); !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("Cleanup through B = %v, want ErrNotProven", err)
	}
	// A server claiming A's deployment, with what a record reader knows.
	spoof := ledger.TargetFuncs{
		IdentifyFn: func(context.Context) (ledger.Identity, error) {
			return ledger.Identity{Deployment: rec.Deployment, Token: []byte(rec.Proof)}, nil
		},
		FindByTagFn: func(context.Context, string) ([]string, error) { return nil, nil },
		DeleteFn: func(context.Context, string) error {
			t.Error("Delete sent to a spoofing server")
			return nil
		},
	}
	if _, err := e.l.Cleanup(t.Context(), owner.UID, spoof); !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("Cleanup through a spoofing server = %v, want ErrNotProven", err)
	}
	if ok, _ := a.RoleExists(t.Context(), role); !ok {
		t.Fatal("Cleanup through the wrong deployment deleted the role")
	}
	res, err := e.l.Cleanup(t.Context(), owner.UID, a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ledger.CleanupResult{Deleted: []string{role, stray}, Removed: true}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	for _, r := range []string{role, stray} {
		if ok, err := a.RoleExists(t.Context(), r); err != nil || ok {
			t.Errorf("role %s exists=%v err=%v after cleanup", r, ok, err)
		}
	}
	if _, err := e.store.Get(t.Context(), owner.UID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("record after cleanup: %v, want ErrNotFound", err)
	}
	if res, err := e.l.Cleanup(t.Context(), owner.UID, a); err != nil || res.Removed {
		t.Errorf("second Cleanup = %+v, %v; want nothing to do", res, err)
	}
}

func TestRecordsHoldNoSecret(t *testing.T) {
	e := newEnv(t)
	pg := testenv.Postgres(t)
	tg, dsn := pgtarget.Fresh(t, pg)
	// The connection's credential, as an operator would keep it.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.users, Name: "pg-credentials"},
		StringData: map[string]string{"password": pg.Password, "dsn": dsn},
	}
	if err := e.c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	token, err := tg.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		owner := ownerIn(t, e.c, e.users, "nosecret-"+string(rune('a'+i)))
		var calls atomic.Int32
		if _, err := e.l.Create(t.Context(), owner, tg, createRole(tg, pgtarget.RandomName("ledger_ns_"), &calls)); err != nil {
			t.Fatal(err)
		}
	}
	secrets := map[string]string{"sentinel token": token}
	for k, v := range secret.Data {
		secrets["Secret key "+k] = string(v)
	}
	var list corev1.ConfigMapList
	if err := e.c.List(t.Context(), &list, client.InNamespace(e.store.Namespace())); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d record ConfigMaps, want 3", len(list.Items))
	}
	for _, cm := range list.Items {
		var all []string
		for k, v := range cm.Data {
			all = append(all, k, v)
		}
		for k, v := range cm.Labels {
			all = append(all, k, v)
		}
		for k, v := range cm.Annotations {
			all = append(all, k, v)
		}
		text := strings.Join(all, "\n")
		for what, s := range secrets {
			if len(s) >= 8 && strings.Contains(text, s) {
				t.Errorf("record %s contains the %s", cm.Name, what)
			}
		}
	}
}

func TestStoreConflictsAndPages(t *testing.T) {
	e := newEnv(t)
	id := ledger.Identity{Deployment: "dep", Token: []byte("0123456789abcdef")}
	var uids []types.UID
	for i := range 7 {
		uid := types.UID("00000000-0000-0000-0000-00000000000" + string(rune('0'+i)))
		uids = append(uids, uid)
		owner := ledger.Owner{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "gone", Name: "w", UID: uid}
		r := &ledger.Record{Schema: ledger.SchemaVersion, Owner: owner, Deployment: id.Deployment, Proof: ledger.Commit(id),
			Tag: ledger.Tag(owner), CreatedAt: t0, LastCreateAttempt: t0}
		if err := e.store.Put(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			stale := r.DeepCopy()
			r.ExternalIDs = []string{"a"}
			if err := e.store.Put(t.Context(), r); err != nil {
				t.Fatal(err)
			}
			stale.ExternalIDs = []string{"b"}
			if err := e.store.Put(t.Context(), stale); !errors.Is(err, ledger.ErrConflict) {
				t.Errorf("stale Put = %v, want ErrConflict", err)
			}
			if err := e.store.Delete(t.Context(), stale); !errors.Is(err, ledger.ErrConflict) {
				t.Errorf("stale Delete = %v, want ErrConflict", err)
			}
			dup := stale.DeepCopy()
			dup.Version = ""
			if err := e.store.Put(t.Context(), dup); !errors.Is(err, ledger.ErrConflict) {
				t.Errorf("second create = %v, want ErrConflict", err)
			}
		}
	}
	var seen []types.UID
	pages := 0
	cont := ""
	for {
		p, err := e.store.List(t.Context(), 3, cont)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range p.Records {
			seen = append(seen, r.Owner.UID)
		}
		if cont = p.Continue; cont == "" {
			break
		}
	}
	if diff := cmp.Diff(uids, seen); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	if pages != 3 {
		t.Errorf("%d pages of 3 for 7 records, want 3", pages)
	}
}

func TestInvalidRecordsAreReportedNotUsed(t *testing.T) {
	e := newEnv(t)
	id := ledger.Identity{Deployment: "dep", Token: []byte("0123456789abcdef")}
	owner := ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: "x", Name: "y", UID: "11111111-2222-3333-4444-555555555555"}
	good := &ledger.Record{Schema: ledger.SchemaVersion, Owner: owner, Deployment: id.Deployment, Proof: ledger.Commit(id),
		Tag: ledger.Tag(owner), CreatedAt: t0, LastCreateAttempt: t0}
	if err := e.store.Put(t.Context(), good); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(d map[string]string){
		"tag edited":         func(d map[string]string) { d["tag"] = "finale:configmap:someone-else" },
		"schema from future": func(d map[string]string) { d["schemaVersion"] = "2" },
		"garbage IDs":        func(d map[string]string) { d["externalIDs"] = "{not json" },
		"uid moved":          func(d map[string]string) { d["ownerUID"] = "99999999-2222-3333-4444-555555555555" },
		"no deployment":      func(d map[string]string) { d["deployment"] = "" },
	} {
		t.Run(name, func(t *testing.T) {
			var cm corev1.ConfigMap
			if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(owner.UID)}, &cm); err != nil {
				t.Fatal(err)
			}
			orig := cm.DeepCopy()
			edit(cm.Data)
			if err := e.c.Update(t.Context(), &cm); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cm.Data = orig.Data
				if err := e.c.Update(context.WithoutCancel(t.Context()), &cm); err != nil {
					t.Fatal(err)
				}
			}()
			if _, err := e.store.Get(t.Context(), owner.UID); !errors.Is(err, ledger.ErrInvalidRecord) {
				t.Errorf("Get = %v, want ErrInvalidRecord", err)
			}
			p, err := e.store.List(t.Context(), 10, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Records) != 0 || len(p.Invalid) != 1 || p.Invalid[0].Record.Source.Name != cm.Name {
				t.Errorf("List = %d records, %d invalid; want the record as invalid", len(p.Records), len(p.Invalid))
			}
			tg := ledger.TargetFuncs{
				IdentifyFn:  func(context.Context) (ledger.Identity, error) { return id, nil },
				FindByTagFn: func(context.Context, string) ([]string, error) { return nil, nil },
				DeleteFn: func(context.Context, string) error {
					t.Error("Delete called for an invalid record")
					return nil
				},
			}
			if _, err := e.l.Cleanup(t.Context(), owner.UID, tg); !errors.Is(err, ledger.ErrInvalidRecord) {
				t.Errorf("Cleanup = %v, want ErrInvalidRecord", err)
			}
			if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(&cm), &cm); err != nil {
				t.Errorf("invalid record gone: %v", err)
			}
		})
	}
}

func TestNewConfigMapStoreNamespace(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	t.Setenv(ledger.NamespaceEnv, "")
	if _, err := ledger.NewConfigMapStore(c, ""); err == nil || !strings.Contains(err.Error(), ledger.NamespaceEnv) {
		t.Errorf("no namespace: err = %v, want one naming $%s", err, ledger.NamespaceEnv)
	}
	t.Setenv(ledger.NamespaceEnv, "operator-ns")
	s, err := ledger.NewConfigMapStore(c, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("operator-ns", s.Namespace()); diff != "" {
		t.Errorf("namespace (-want +got):\n%s", diff)
	}
}

func TestCommitmentIsAProof(t *testing.T) {
	id := ledger.Identity{Deployment: "dep", Token: []byte("0123456789abcdef")}
	c := ledger.Commit(id)
	for name, tc := range map[string]struct {
		id   ledger.Identity
		want bool
	}{
		"genuine":                {id: id, want: true},
		"claims ID, wrong token": {id: ledger.Identity{Deployment: "dep", Token: []byte("fedcba9876543210")}, want: false},
		"replays the commitment": {id: ledger.Identity{Deployment: "dep", Token: []byte(c)}, want: false},
		"claims ID, no token":    {id: ledger.Identity{Deployment: "dep"}, want: false},
		"right token, other ID":  {id: ledger.Identity{Deployment: "dep2", Token: id.Token}, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ledger.Proves(tc.id, "dep", c)); diff != "" {
				t.Errorf("Proves (-want +got):\n%s", diff)
			}
		})
	}
	if strings.Contains(id.String(), string(id.Token)) || strings.Contains(id.GoString(), string(id.Token)) {
		t.Error("Identity formatting leaks the token")
	}
}
