package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
)

func TestCreateWritesRecordBeforeCreating(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "a")
	name := pgtarget.RandomName("ledger_a_")
	via := &ledger.ConnectionRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: e.users, Name: "conn", UID: "c0ffee00-0000-4000-8000-000000000001"}
	var sawRecord bool
	rec, err := e.l.Create(t.Context(), ledger.Plan{Owner: owner, Policy: ledger.PolicyRetain, Via: via}, tg, func(ctx context.Context, tag string) ([]string, error) {
		r, err := e.l.Get(ctx, owner.UID)
		if err != nil {
			t.Errorf("create called without a stored, signed record: %v", err)
		} else {
			sawRecord = r.Tag == tag && r.LastCreateAttempt.Equal(t0) && r.Policy == ledger.PolicyRetain
		}
		return []string{name}, tg.CreateRole(ctx, name, tag)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawRecord {
		t.Error("record at create time lacked the tag, the attempt time or the policy")
	}
	got, err := e.l.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tg.Prove(t.Context(), ledger.Question{KeyID: e.key.ID(), Challenge: "00"})
	if err != nil {
		t.Fatal(err)
	}
	want := &ledger.Record{
		Schema: ledger.SchemaVersion, Owner: owner, Policy: ledger.PolicyRetain, Via: via, Deployment: a.Deployment, Salt: a.Salt,
		Tag: "finale:configmap:" + string(owner.UID), ExternalIDs: []string{name},
		CreatedAt: t0, LastCreateAttempt: t0, MAC: got.MAC, Version: rec.Version, Source: got.Source,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored record (-want +got):\n%s", diff)
	}
	if got.MAC == "" {
		t.Error("record not signed")
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
		ledger.LabelDeployment: ledger.DeploymentLabel(a.Deployment), "app.kubernetes.io/managed-by": "finale",
	}
	if diff := cmp.Diff(wantLabels, cm.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

func TestCreateNotCalledWhenRecordWriteFails(t *testing.T) {
	e := newEnv(t)
	// A namespace that does not exist refuses the record, as a terminating
	// one would.
	store, err := ledger.NewConfigMapStore(e.c, "no-such-namespace-for-records")
	if err != nil {
		t.Fatal(err)
	}
	l := e.ledger(t, store)
	owner := ownerIn(t, e.c, e.users, "a")
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	var calls atomic.Int32
	_, err = l.Create(t.Context(), e.plan(owner), tg, createRole(tg, pgtarget.RandomName("never_"), &calls))
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
	crashing := e.ledger(t, &failPuts{Store: e.store, after: 1})
	first := pgtarget.RandomName("ledger_crash_")
	if _, err := crashing.Create(t.Context(), e.plan(owner), tg, createRole(tg, first, &calls)); err == nil {
		t.Fatal("Create succeeded although recording the ID failed")
	}
	rec, err := e.l.Get(t.Context(), owner.UID)
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
	rec, err = e.ledger(t, e.store).Create(t.Context(), e.plan(owner), tg2, createRole(tg2, pgtarget.RandomName("ledger_dup_"), &calls))
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

// TestReplicaClockBehindTheRecord: a new leader whose clock is behind the
// recorded attempt can still retry a crashed create (seed: a record whose
// attempt precedes its creation is invalid; the attempt never moves back).
func TestReplicaClockBehindTheRecord(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "skew")
	if _, err := e.l.Create(t.Context(), e.plan(owner), tg, func(context.Context, string) ([]string, error) {
		return nil, fmt.Errorf("%w: no client", ledger.ErrNotSent)
	}); err == nil {
		t.Fatal("want the create error")
	}
	// A new leader knows nothing of the attempt's outcome: it is in doubt
	// until it can no longer complete, by whatever clock the leader has.
	behind := e.ledger(t, e.store)
	e.clock.SetTime(t0.Add(-2 * time.Minute))
	var calls atomic.Int32
	create := createRole(tg, pgtarget.RandomName("ledger_skew_"), &calls)
	if _, err := behind.Create(t.Context(), e.plan(owner), tg, create); !errors.Is(err, ledger.ErrCreateInDoubt) {
		t.Fatalf("retry from a new leader while the attempt may land: %v, want ErrCreateInDoubt", err)
	}
	// The ledger that saw the attempt fail before it was sent retries at
	// once, and its clock being behind never moves the attempt back.
	rec, err := e.l.Create(t.Context(), e.plan(owner), tg, create)
	if err != nil {
		t.Fatalf("retry from the ledger that saw the outcome, its clock behind: %v", err)
	}
	if calls.Load() != 1 || !rec.LastCreateAttempt.Equal(t0) {
		t.Errorf("create calls %d, attempt %v; want 1 and the recorded attempt kept (%v)", calls.Load(), rec.LastCreateAttempt, t0)
	}
}

func TestCreateRefusesRecordOfAnotherDeployment(t *testing.T) {
	e := newEnv(t)
	pg := testenv.Postgres(t)
	a, _ := pgtarget.Fresh(t, pg)
	b, _ := pgtarget.Fresh(t, pg)
	owner := ownerIn(t, e.c, e.users, "switch")
	// The create in A loses its answer: a record without IDs.
	_, err := e.l.Create(t.Context(), e.plan(owner), a, func(context.Context, string) ([]string, error) {
		return nil, errors.New("connection reset")
	})
	if err == nil {
		t.Fatal("want the create error")
	}
	before, err := e.l.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	_, err = e.l.Create(t.Context(), e.plan(owner), b, createRole(b, pgtarget.RandomName("ledger_b_"), &calls))
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
	after, err := e.l.Get(t.Context(), owner.UID)
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
			svc := &service{deployment: "dep-1"}
			owner := ownerIn(t, e.c, e.users, "o")
			first, err := e.l.Create(t.Context(), e.plan(owner), svc, func(context.Context, string) ([]string, error) { return []string{"x"}, nil })
			if err != nil {
				t.Fatal(err)
			}
			var at time.Time
			if tc.attempt != -1 {
				at = t0.Add(tc.attempt)
			}
			got, err := e.l.Observe(t.Context(), owner.UID, svc, tc.ids, at)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := e.l.Get(t.Context(), owner.UID)
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

// spoof is a server that claims a deployment with everything a reader of
// records (and of the wire, once) knows: the deployment ID and the salt. It
// cannot compute the response, so it replays one it saw.
type spoof struct {
	t          *testing.T
	deployment string
	salt       string
	seen       string
}

func (s spoof) Prove(_ context.Context, q ledger.Question) (ledger.Answer, error) {
	return ledger.Answer{Deployment: s.deployment, Salt: s.salt, Response: s.seen}, nil
}

func (s spoof) Delete(context.Context, string, string) error {
	s.t.Error("Delete sent to a spoofing server")
	return nil
}

func TestCleanupOnlyThroughTheProvenDeployment(t *testing.T) {
	e := newEnv(t)
	pg := testenv.Postgres(t)
	a, _ := pgtarget.Fresh(t, pg)
	b, _ := pgtarget.Fresh(t, pg)
	owner := ownerIn(t, e.c, e.users, "cleanup")
	var calls atomic.Int32
	role := pgtarget.RandomName("ledger_cleanup_")
	rec, err := e.l.Create(t.Context(), e.plan(owner), a, createRole(a, role, &calls))
	if err != nil {
		t.Fatal(err)
	}
	// A tagged resource whose ID never reached the record.
	stray := pgtarget.RandomName("ledger_stray_")
	if err := a.CreateRole(t.Context(), stray, rec.Tag); err != nil {
		t.Fatal(err)
	}
	// B is another deployment enrolled with the same key.
	if _, err := e.l.Create(t.Context(), e.plan(ownerIn(t, e.c, e.users, "in-b")), b, func(context.Context, string) ([]string, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Cleanup(t.Context(), owner.UID, b); !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("Cleanup through B = %v, want ErrNotProven", err)
	}
	old, err := a.Prove(t.Context(), ledger.Question{KeyID: e.key.ID(), Challenge: "aa", Tag: rec.Tag})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Cleanup(t.Context(), owner.UID, spoof{t: t, deployment: rec.Deployment, salt: rec.Salt, seen: old.Response}); !errors.Is(err, ledger.ErrNotProven) {
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

// splice proves through the genuine deployment and sends the deletes
// elsewhere: a proxy that relays the login and the proof, then splices.
type splice struct {
	genuine ledger.Prover
	deletes int
}

func (s *splice) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	return s.genuine.Prove(ctx, q)
}

func (s *splice) Delete(context.Context, string, string) error { s.deletes++; return nil }

// TestSplicedDeletesAreNotConfirmed: the second proof is computed inside
// the genuine deployment over what still carries the tag, so deletes that
// went elsewhere never confirm.
func TestSplicedDeletesAreNotConfirmed(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "spliced")
	role := pgtarget.RandomName("ledger_spliced_")
	var calls atomic.Int32
	if _, err := e.l.Create(t.Context(), e.plan(owner), tg, createRole(tg, role, &calls)); err != nil {
		t.Fatal(err)
	}
	s := &splice{genuine: tg}
	if _, err := e.l.Cleanup(t.Context(), owner.UID, s); err == nil || !strings.Contains(err.Error(), "remain") {
		t.Fatalf("Cleanup through a splicing proxy = %v, want the remaining resource reported", err)
	}
	if s.deletes == 0 {
		t.Fatal("the splicing proxy saw no delete: the test proves nothing")
	}
	if ok, _ := tg.RoleExists(t.Context(), role); !ok {
		t.Fatal("role gone")
	}
	if _, err := e.l.Get(t.Context(), owner.UID); err != nil {
		t.Fatalf("record removed although the role remains: %v", err)
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
	for i := range 3 {
		owner := ownerIn(t, e.c, e.users, "nosecret-"+string(rune('a'+i)))
		var calls atomic.Int32
		if _, err := e.l.Create(t.Context(), e.plan(owner), tg, createRole(tg, pgtarget.RandomName("ledger_ns_"), &calls)); err != nil {
			t.Fatal(err)
		}
	}
	token, err := tg.Token(t.Context(), e.key.ID())
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"sentinel token": token, "operator key": e.key.Token("")}
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
	var uids []types.UID
	for i := range 7 {
		uid := types.UID("00000000-0000-0000-0000-00000000000" + string(rune('0'+i)))
		uids = append(uids, uid)
		r := plainRecord(ledger.Owner{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "gone", Name: "w", UID: uid})
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

// TestEditedRecordsAreRefused: whoever can write the records namespace
// cannot point the sweeper or a cleanup at someone else's resource: every
// edit breaks the record's MAC, and such a record is reported and never
// acted on. Inconsistent records are refused before that.
func TestEditedRecordsAreRefused(t *testing.T) {
	e := newEnv(t)
	svc := &service{deployment: "dep", tagged: map[string][]string{}}
	owner := ownerIn(t, e.c, e.users, "victim-of-edits")
	if _, err := e.l.Create(t.Context(), e.plan(owner), svc, func(context.Context, string) ([]string, error) { return []string{"mine"}, nil }); err != nil {
		t.Fatal(err)
	}
	victimTag := "finale:role:11111111-2222-3333-4444-555555555555"
	svc.tagged[victimTag] = []string{"victims-role"}
	for name, tc := range map[string]struct {
		edit func(d map[string]string)
		want error
	}{
		"someone else's ID added":  {edit: func(d map[string]string) { d["externalIDs"] = `["mine","victims-role"]` }, want: ledger.ErrUnauthenticated},
		"owner pointed elsewhere":  {edit: func(d map[string]string) { d["ownerName"] = "a-live-object" }, want: ledger.ErrUnauthenticated},
		"policy flipped":           {edit: func(d map[string]string) { d["deletionPolicy"] = "Retain" }, want: ledger.ErrUnauthenticated},
		"MAC copied from another":  {edit: func(d map[string]string) { d["mac"] = strings.Repeat("0", 64) }, want: ledger.ErrUnauthenticated},
		"tag edited":               {edit: func(d map[string]string) { d["tag"] = victimTag }, want: ledger.ErrInvalidRecord},
		"schema from the past":     {edit: func(d map[string]string) { d["schemaVersion"] = "1" }, want: ledger.ErrInvalidRecord},
		"garbage IDs":              {edit: func(d map[string]string) { d["externalIDs"] = "{not json" }, want: ledger.ErrInvalidRecord},
		"uid moved":                {edit: func(d map[string]string) { d["ownerUID"] = "99999999-2222-3333-4444-555555555555" }, want: ledger.ErrInvalidRecord},
		"no deployment":            {edit: func(d map[string]string) { d["deployment"] = "" }, want: ledger.ErrInvalidRecord},
		"connection of a stranger": {edit: func(d map[string]string) { d["connection"] = `{"Kind":"Server","Name":"x","UID":"u"}` }, want: ledger.ErrUnauthenticated},
	} {
		t.Run(name, func(t *testing.T) {
			var cm corev1.ConfigMap
			if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(owner.UID)}, &cm); err != nil {
				t.Fatal(err)
			}
			orig := cm.DeepCopy()
			tc.edit(cm.Data)
			if err := e.c.Update(t.Context(), &cm); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cm.Data = orig.Data
				if err := e.c.Update(context.WithoutCancel(t.Context()), &cm); err != nil {
					t.Fatal(err)
				}
			}()
			// A fresh ledger remembers nothing and must read the edit.
			l := e.ledger(t, e.store)
			if _, err := l.Get(t.Context(), owner.UID); !errors.Is(err, tc.want) {
				t.Errorf("Get = %v, want %v", err, tc.want)
			}
			p, err := l.List(t.Context(), 10, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Records) != 0 || len(p.Invalid) != 1 || p.Invalid[0].Record.Source.Name != cm.Name || !errors.Is(p.Invalid[0].Err, tc.want) {
				t.Errorf("List = %d records, %d invalid; want the record as invalid (%v)", len(p.Records), len(p.Invalid), tc.want)
			}
			svc.deleted = nil
			if _, err := l.Cleanup(t.Context(), owner.UID, svc); !errors.Is(err, ledger.ErrInvalidRecord) {
				t.Errorf("Cleanup = %v, want ErrInvalidRecord", err)
			}
			if len(svc.deleted) > 0 {
				t.Errorf("deleted %q through an edited record", svc.deleted)
			}
			if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(&cm), &cm); err != nil {
				t.Errorf("invalid record gone: %v", err)
			}
		})
	}
}

// TestEnsure: a live owner's record follows its policy and connection, and
// is written again when it vanished out of band.
func TestEnsure(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "ensure")
	role := pgtarget.RandomName("ledger_ensure_")
	var calls atomic.Int32
	first, err := e.l.Create(t.Context(), e.plan(owner), tg, createRole(tg, role, &calls))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing differs: no write.
	rec, recreated, err := e.l.Ensure(t.Context(), e.plan(owner), tg, []string{role})
	if err != nil || recreated || rec.Version != first.Version {
		t.Fatalf("Ensure of a current record = %v, recreated %v, version %s (was %s); want no write", err, recreated, rec.Version, first.Version)
	}
	// The spec's policy changed: the record follows.
	rec, _, err = e.l.Ensure(t.Context(), ledger.Plan{Owner: owner, Policy: ledger.PolicyRetain}, tg, []string{role})
	if err != nil || rec.Policy != ledger.PolicyRetain {
		t.Fatalf("Ensure after a policy change = %v, %v; want Retain", rec, err)
	}
	// The record is deleted by hand; a reconcile writes it again.
	if err := e.c.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(owner.UID)}}); err != nil {
		t.Fatal(err)
	}
	rec, recreated, err = e.l.Ensure(t.Context(), ledger.Plan{Owner: owner, Policy: ledger.PolicyRetain}, tg, []string{role})
	if err != nil || !recreated {
		t.Fatalf("Ensure of a lost record = %v, recreated %v; want it written again", err, recreated)
	}
	if diff := cmp.Diff([]string{role}, rec.ExternalIDs); diff != "" || rec.Policy != ledger.PolicyRetain {
		t.Errorf("re-written record: IDs (-want +got):\n%s policy %s", diff, rec.Policy)
	}
	res, err := e.ledger(t, e.store).Cleanup(t.Context(), owner.UID, tg)
	if err != nil || !res.Removed {
		t.Fatalf("cleanup of the re-written record = %+v, %v", res, err)
	}
	if ok, _ := tg.RoleExists(t.Context(), role); ok {
		t.Error("role survives the cleanup of its re-written record")
	}
}

// TestAdopt: a record passes only to an object of the same kind, namespace
// and name, through a connection of the same name that proves its
// deployment, in the namespace it was written in unless an admin approved
// this very object, with every resource moved to the new tag before the old
// record goes.
func TestAdopt(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	var ns corev1.Namespace
	if err := e.c.Get(t.Context(), client.ObjectKey{Name: e.users}, &ns); err != nil {
		t.Fatal(err)
	}
	conn := &ledger.ConnectionRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: e.users, Name: "conn", UID: "c0000000-0000-4000-8000-000000000001"}
	plan := func(o ledger.Owner, via *ledger.ConnectionRef, nsUID types.UID) ledger.Plan {
		return ledger.Plan{Owner: o, Via: via, NamespaceUID: nsUID}
	}
	oldOwner := func(name, uid string) (ledger.Owner, string) {
		o := ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: e.users, Name: name, UID: types.UID(uid)}
		role := pgtarget.RandomName("ledger_adopt_")
		var calls atomic.Int32
		if _, err := e.l.Create(t.Context(), plan(o, conn, ns.UID), tg, createRole(tg, role, &calls)); err != nil {
			t.Fatal(err)
		}
		return o, role
	}
	retag := func(ctx context.Context, ids []string, from, to string) error {
		for _, id := range ids {
			if err := tg.Exec(ctx, `COMMENT ON ROLE `+id+` IS '`+to+`'`); err != nil {
				return err
			}
		}
		return nil
	}
	adopted := func(old, renewed ledger.Owner, role string, rec *ledger.Record) {
		t.Helper()
		if diff := cmp.Diff([]string{role}, rec.ExternalIDs); diff != "" || rec.Owner.UID != renewed.UID {
			t.Errorf("adopted record for %s, IDs (-want +got):\n%s", rec.Owner, diff)
		}
		if tagged, _ := tg.FindByTag(t.Context(), ledger.Tag(renewed)); !cmp.Equal(tagged, []string{role}) {
			t.Errorf("roles carrying the new tag: %q", tagged)
		}
		if _, err := e.l.Get(t.Context(), old.UID); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("old record after adoption: %v, want ErrNotFound", err)
		}
	}

	old, role := oldOwner("restored", "0ld00000-0000-4000-8000-000000000001")
	other := ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: "another-namespace", Name: "restored", UID: "0e000000-0000-4000-8000-000000000002"}
	if _, err := e.l.Adopt(t.Context(), old.UID, plan(other, conn, ns.UID), tg, retag); !errors.Is(err, ledger.ErrNotAdoptable) {
		t.Fatalf("adoption from another namespace = %v, want ErrNotAdoptable", err)
	}
	b, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	if _, err := e.l.Create(t.Context(), e.plan(ownerIn(t, e.c, e.users, "b-enrolled")), b, func(context.Context, string) ([]string, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	renewed := ownerIn(t, e.c, e.users, "restored")
	if _, err := e.l.Adopt(t.Context(), old.UID, plan(renewed, conn, ns.UID), b, retag); !errors.Is(err, ledger.ErrNotProven) {
		t.Fatalf("adoption through another deployment = %v, want ErrNotProven", err)
	}
	otherConn := *conn
	otherConn.Name = "another-conn"
	if _, err := e.l.Adopt(t.Context(), old.UID, plan(renewed, &otherConn, ns.UID), tg, retag); !errors.Is(err, ledger.ErrOtherConnection) {
		t.Fatalf("adoption through another connection object = %v, want ErrOtherConnection", err)
	}
	restoredConn := *conn
	restoredConn.UID = "c0000000-0000-4000-8000-000000000002" // a restore re-creates it
	rec, err := e.l.Adopt(t.Context(), old.UID, plan(renewed, &restoredConn, ns.UID), tg, retag)
	if err != nil {
		t.Fatal(err)
	}
	adopted(old, renewed, role, rec)

	// Across a namespace deleted and created again: only with an admin's
	// approval of this very object.
	old, role = oldOwner("elsewhere", "0ld00000-0000-4000-8000-000000000003")
	renewed = ownerIn(t, e.c, e.users, "elsewhere")
	recreatedNS := types.UID("a0000000-0000-4000-8000-00000000000a")
	if _, err := e.l.Adopt(t.Context(), old.UID, plan(renewed, conn, recreatedNS), tg, retag); !errors.Is(err, ledger.ErrNeedsApproval) {
		t.Fatalf("adoption across a re-created namespace = %v, want ErrNeedsApproval", err)
	}
	approve := func(uid types.UID) {
		t.Helper()
		var cm corev1.ConfigMap
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(old.UID)}, &cm); err != nil {
			t.Fatal(err)
		}
		cm.Annotations = map[string]string{ledger.AnnotationApproval: string(uid)}
		if err := e.c.Update(t.Context(), &cm); err != nil {
			t.Fatal(err)
		}
	}
	approve("someone-else")
	if _, err := e.l.Adopt(t.Context(), old.UID, plan(renewed, conn, recreatedNS), tg, retag); !errors.Is(err, ledger.ErrNeedsApproval) {
		t.Fatalf("adoption approved for another object = %v, want ErrNeedsApproval", err)
	}
	if tagged, _ := tg.FindByTag(t.Context(), ledger.Tag(old)); !cmp.Equal(tagged, []string{role}) {
		t.Fatalf("a refused adoption moved the role: the old tag holds %q", tagged)
	}
	approve(renewed.UID)
	if rec, err = e.l.Adopt(t.Context(), old.UID, plan(renewed, conn, recreatedNS), tg, retag); err != nil {
		t.Fatal(err)
	}
	adopted(old, renewed, role, rec)
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

func TestNewRequiresAKey(t *testing.T) {
	store := &failPuts{}
	if _, err := ledger.New(store, ledger.Options{}); !errors.Is(err, ledger.ErrKey) {
		t.Errorf("New without a key = %v, want ErrKey", err)
	}
	if _, err := ledger.NewKey([]byte("short")); !errors.Is(err, ledger.ErrKey) {
		t.Errorf("NewKey(short) = %v, want ErrKey", err)
	}
	k := ledger.GenerateKey()
	if strings.Contains(k.String(), k.Token("")) || strings.Contains(k.GoString(), "0x") {
		t.Error("Key formatting shows key material")
	}
}

func TestLoadKey(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	k1, err := ledger.LoadKey(t.Context(), c, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ledger.LoadKey(t.Context(), c, ns, "")
	if err != nil || k1.ID() != k2.ID() {
		t.Fatalf("second LoadKey = %v, id %s vs %s; want the same key", err, k2.ID(), k1.ID())
	}
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}, Data: map[string][]byte{ledger.KeySecretKey: []byte("short")}}
	if err := c.Create(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.LoadKey(t.Context(), c, ns, "broken"); !errors.Is(err, ledger.ErrKey) || !strings.Contains(err.Error(), "restore") {
		t.Errorf("LoadKey of a broken Secret = %v, want ErrKey saying to restore it", err)
	}
	var s corev1.Secret
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(bad), &s); err != nil || string(s.Data[ledger.KeySecretKey]) != "short" {
		t.Error("LoadKey replaced a Secret it could not use")
	}
}

// TestProofVerification is the pure decision: which answers prove a
// deployment. Each case answers the ledger's fresh question in its own way.
func TestProofVerification(t *testing.T) {
	key, other := ledger.GenerateKey(), ledger.GenerateKey()
	tagged := []string{"b", "a"}
	genuine := func(q ledger.Question) ledger.Answer {
		return ledger.Answer{Deployment: "dep", Salt: "salt-1", Tagged: tagged, Response: ledger.Respond(key.Token("salt-1"), q, "dep", "salt-1", tagged)}
	}
	rec := &ledger.Record{Owner: ledger.Owner{Kind: "Role", Name: "r"}, Deployment: "dep", Salt: "salt-1"}
	for name, tc := range map[string]struct {
		answer func(q ledger.Question) ledger.Answer
		want   bool
	}{
		"genuine": {answer: genuine, want: true},
		"the tagged list shortened on the way": {answer: func(q ledger.Question) ledger.Answer {
			a := genuine(q)
			a.Tagged = []string{"a"}
			return a
		}},
		"the tagged list emptied on the way": {answer: func(q ledger.Question) ledger.Answer {
			a := genuine(q)
			a.Tagged = nil
			return a
		}},
		"another deployment's ID": {answer: func(q ledger.Question) ledger.Answer {
			return ledger.Answer{Deployment: "dep2", Salt: "salt-1", Response: ledger.Respond(key.Token("salt-1"), q, "dep2", "salt-1", nil)}
		}},
		"another sentinel": {answer: func(q ledger.Question) ledger.Answer {
			return ledger.Answer{Deployment: "dep", Salt: "salt-2", Response: ledger.Respond(key.Token("salt-2"), q, "dep", "salt-2", nil)}
		}},
		"a reply to another challenge": {answer: func(q ledger.Question) ledger.Answer {
			old := q
			old.Challenge = "seen-before"
			return genuine(old)
		}},
		"a sentinel made by another key": {answer: func(q ledger.Question) ledger.Answer {
			return ledger.Answer{Deployment: "dep", Salt: "salt-1", Response: ledger.Respond(other.Token("salt-1"), q, "dep", "salt-1", nil)}
		}},
		"no response": {answer: func(ledger.Question) ledger.Answer { return ledger.Answer{Deployment: "dep", Salt: "salt-1"} }},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := ledger.New(&failPuts{}, ledger.Options{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			err = l.Prove(t.Context(), rec, ledger.ProverFunc(func(_ context.Context, q ledger.Question) (ledger.Answer, error) {
				return tc.answer(q), nil
			}))
			if diff := cmp.Diff(tc.want, err == nil); diff != "" {
				t.Errorf("proves (-want +got):\n%s (err %v)", diff, err)
			}
			if err != nil && !errors.Is(err, ledger.ErrNotProven) {
				t.Errorf("err = %v, want ErrNotProven", err)
			}
		})
	}
	q := ledger.Question{KeyID: "k", Challenge: "c", Tag: "t"}
	if ledger.ResponseMessage("t", q, "d", "s", []string{"b", "a"}) != ledger.ResponseMessage("t", q, "d", "s", []string{"a", "b"}) {
		t.Error("the response depends on the order the service lists IDs in")
	}
}
