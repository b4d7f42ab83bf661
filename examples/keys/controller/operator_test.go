package controller_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/config/crd"
	"github.com/finale-dev/finale/examples/keys/controller"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/testenv"
	"github.com/finale-dev/finale/watchdog"
)

var env *testenv.Env

// One control plane for the package, as a user's TestMain would start it.
func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the tests read state, not the log
	crds, err := crd.CRDs()
	if err != nil {
		panic(err)
	}
	s := testenv.Scheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	testenv.Main(m, testenv.Options{CRDs: crds, Scheme: s}, func(e *testenv.Env) error { env = e; return nil })
}

const (
	wait         = 2 * time.Minute
	serviceToken = "operator-token-0123456789"
)

// world is one operator (its own manager and records namespace) and one key
// service, on the package's control plane.
type world struct {
	t        *testing.T
	c        client.Client
	sys      string // the operator's namespace: records, key, designated KeyServers
	svc      *service.Server
	dir, ids string // the service's data and identity directories
	// mode is the service's API shape; the operator's ServiceMode must
	// match it.
	mode service.Mode
	// newClient, when set, makes the manager's client (a fault script
	// around the real one).
	newClient client.NewClientFunc
}

// modes are the service modes the tests that compare them run in: the
// default and the G2 seed's shape (README.md's table).
var modes = []service.Mode{service.ModeChallenge, service.ModeIDOnly}

func start(t *testing.T, o controller.Options) *world {
	t.Helper()
	w := &world{t: t, c: env.Client, sys: testenv.Namespace(t, env.Client), dir: t.TempDir(), ids: t.TempDir(), mode: o.ServiceMode}
	w.svc = w.serve("", w.dir, w.ids)
	w.run(o)
	return w
}

// run starts an operator with its records in w.sys and returns what stops
// it (also called when the test ends, before the control plane stops).
func (w *world) run(o controller.Options) (stop func()) {
	w.t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient:  w.newClient,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	o.RecordsNamespace = w.sys
	o.SkipNameValidation = true
	if _, err := controller.Setup(w.t.Context(), mgr, o); err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("manager: %v", err)
		}
	})
	w.t.Cleanup(stop)
	return stop
}

// serve starts the key service on addr ("" is a free port) with the given
// directories.
func (w *world) serve(addr, dir, ids string) *service.Server {
	w.t.Helper()
	s, err := service.Start(addr, service.Options{Token: serviceToken, Dir: dir, IdentityDir: ids, Mode: w.mode})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = s.Close() })
	return s
}

// swap stops the running service and starts another on its address.
func (w *world) swap(dir, ids string) {
	w.t.Helper()
	addr := w.svc.Addr()
	if err := w.svc.Close(); err != nil {
		w.t.Fatal(err)
	}
	w.svc = w.serve(addr, dir, ids)
}

// keyServer creates, in ns, the token Secret and a KeyServer named "keys"
// pointing at the service.
func (w *world) keyServer(ns string) { w.keyServerAt(ns, w.svc.URL) }

// keyServerAt is keyServer with the service at url.
func (w *world) keyServerAt(ns, url string) {
	w.t.Helper()
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys-token"}, StringData: map[string]string{"token": serviceToken + "\n"}})
	w.create(&v1alpha1.KeyServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys"}, Spec: v1alpha1.KeyServerSpec{
		URL: url, TokenSecretRef: v1alpha1.TokenSecretReference{Name: "keys-token"},
	}})
}

func (w *world) tenant() string {
	ns := testenv.Namespace(w.t, w.c)
	w.keyServer(ns)
	return ns
}

func apiKey(ns, name string, scopes ...string) *v1alpha1.APIKey {
	return &v1alpha1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.APIKeySpec{
		KeyServerRef: v1alpha1.KeyServerReference{Name: "keys"}, Name: "key " + name, Scopes: scopes,
	}}
}

func (w *world) create(obj client.Object) {
	w.t.Helper()
	if err := w.c.Create(w.t.Context(), obj); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) waitFor(what string, cond func(ctx context.Context) (bool, error)) {
	w.t.Helper()
	if err := controlplane.WaitFor(w.t.Context(), wait, what, cond); err != nil {
		w.t.Fatal(err)
	}
}

// ready waits until k is Ready for its current generation.
func (w *world) ready(k *v1alpha1.APIKey) {
	w.t.Helper()
	w.waitFor("APIKey "+k.Name+" to be Ready", func(ctx context.Context) (bool, error) {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && k.Status.ObservedGeneration == k.Generation, nil
	})
}

// records are the operator's cleanup records.
func (w *world) records(ctx context.Context) ([]string, error) {
	store, err := ledger.NewConfigMapStore(w.c, w.sys)
	if err != nil {
		return nil, err
	}
	page, err := store.List(ctx, 0, "")
	var uids []string
	for _, r := range page.Records {
		uids = append(uids, string(r.Owner.UID))
	}
	return uids, err
}

// notes are the sweeper's verdicts on the operator's records.
func (w *world) notes(ctx context.Context) ([]string, error) {
	store, err := ledger.NewConfigMapStore(w.c, w.sys)
	if err != nil {
		return nil, err
	}
	page, err := store.List(ctx, 0, "")
	var out []string
	for _, r := range page.Records {
		out = append(out, r.Note.State)
	}
	return out, err
}

// leaks fails the test if the service holds a key or a record is left.
func (w *world) noLeaks() {
	w.t.Helper()
	recs, err := w.records(w.t.Context())
	if err != nil {
		w.t.Fatal(err)
	}
	if keys := w.svc.Keys(); len(keys) > 0 || len(recs) > 0 {
		w.t.Errorf("leaked: %d key(s) in the service (%v) and %d cleanup record(s) (%v)", len(keys), keys, len(recs), recs)
	}
}

// A namespace of APIKeys, its KeyServer and token Secret deleted at once:
// the hold keeps the KeyServer and the Secret until every key is deleted
// from the service, and nothing is left behind, neither keys in the
// service nor cleanup records. It holds in both service modes: the
// owner's own deletion needs no proof the id-only service cannot give.
func TestNamespaceDeletionLeaksNothing(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			w := start(t, controller.Options{ServiceMode: mode})
			ns := w.tenant()
			const n = 4
			var keys []*v1alpha1.APIKey
			for i := range n {
				k := apiKey(ns, "k"+strconv.Itoa(i), "read", "scope-"+strconv.Itoa(i))
				w.create(k)
				keys = append(keys, k)
			}
			for _, k := range keys {
				w.ready(k)
			}
			if got := len(w.svc.Keys()); got != n {
				t.Fatalf("the service holds %d keys, want %d", got, n)
			}
			if recs, err := w.records(t.Context()); err != nil || len(recs) != n {
				t.Fatalf("%d cleanup records (%v), want %d", len(recs), err, n)
			}
			for name, obj := range map[string]client.Object{"keys": &v1alpha1.KeyServer{}, "keys-token": &corev1.Secret{}} {
				if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(obj.GetFinalizers(), hold.Finalizer) {
					t.Fatalf("%T %s carries no hold finalizer before the namespace goes: nothing keeps it for the keys' cleanup", obj, name)
				}
			}

			if err := controlplane.DeleteAndWait(t.Context(), w.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, wait); err != nil {
				t.Fatal(err)
			}
			w.noLeaks()
		})
	}
}

// A spec change reaches the service (Update), and a Retain key outlives
// its APIKey with its tag, and so does its record, marked Retain, for a
// restored APIKey to adopt (the sweeper never deletes through it).
func TestUpdateAndRetain(t *testing.T) {
	w := start(t, controller.Options{})
	ns := w.tenant()
	k := apiKey(ns, "k", "read")
	w.create(k)
	w.ready(k)
	k.Spec.Scopes = []string{"write", "read"}
	k.Spec.Name = "renamed"
	if err := w.c.Update(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	w.ready(k)
	got := w.svc.Keys()
	want := []service.Key{{ID: got[0].ID, Tag: ledger.Tag(ledger.Owner{Kind: "APIKey", UID: k.UID}), KeySpec: service.KeySpec{Name: "renamed", Scopes: []string{"read", "write"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the service's keys after the update (-want +got):\n%s", diff)
	}

	k.Spec.DeletionPolicy = v1alpha1.DeletionPolicyRetain
	if err := w.c.Update(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	w.ready(k)
	if err := controlplane.DeleteAndWait(t.Context(), w.c, k, wait); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, w.svc.Keys()); diff != "" {
		t.Errorf("a Retain key must stay, with its tag (-want +got):\n%s", diff)
	}
	if recs, err := w.records(t.Context()); err != nil || !cmp.Equal(recs, []string{string(k.UID)}) {
		t.Errorf("records after a Retain delete: %v (%v), want the APIKey's, kept", recs, err)
	}
}

// The service replaced by a copy of its data (restarted on another data
// directory copied from it, with a new identity store: a backup restored
// elsewhere, a staging clone, a reset) while an APIKey is deleted.
//
// challenge: the copy has the deployment ID and the keys but not the
// token, so it cannot prove the deployment: the deletion is refused
// (DeploymentNotProven), the key and the record stay, and with the real
// service back the deletion finishes and nothing is left.
//
// id-only (the G2 seed's shape): the copy answers the deployment ID as the
// service does, and that is all the operator can check, so the cleanup
// runs against the copy: the copy's key is deleted, the record removed and
// the APIKey goes, while the real service keeps the key. Nothing is left
// that names it: it leaked.
func TestCopyOfTheService(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			w := start(t, controller.Options{ServiceMode: mode})
			ns := w.tenant()
			k := apiKey(ns, "k")
			w.create(k)
			w.ready(k)
			want := w.svc.Keys()

			copied := t.TempDir()
			if err := os.CopyFS(copied, os.DirFS(w.dir)); err != nil {
				t.Fatal(err)
			}
			w.swap(copied, t.TempDir())
			if err := w.c.Delete(t.Context(), k); err != nil {
				t.Fatal(err)
			}

			if mode == service.ModeIDOnly {
				w.waitFor("the APIKey to be gone, cleaned up through the copy", func(ctx context.Context) (bool, error) {
					err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k)
					return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
				})
				if recs, err := w.records(t.Context()); err != nil || len(recs) != 0 {
					t.Fatalf("records %v (%v), want none: the copy's answers confirmed the delete", recs, err)
				}
				if got := w.svc.Keys(); len(got) != 0 {
					t.Fatalf("the copy still holds %v; want its key deleted", got)
				}
				leaked, err := service.ReadKeys(w.dir)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, leaked); diff != "" {
					t.Fatalf("the real service's keys after the APIKey went (-want +got): the id-only mode must leak the key here, or this row of README.md's table is wrong:\n%s", diff)
				}
				return
			}

			w.waitFor("the deletion refused as DeploymentNotProven", func(ctx context.Context) (bool, error) {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
					return false, err
				}
				c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionSynced)
				return c != nil && c.Reason == lifecycle.ReasonNotProven, nil
			})
			if !slices.Contains(k.Finalizers, controller.Finalizer) {
				t.Fatal("the APIKey lost its cleanup finalizer to a service that proved nothing")
			}
			if got := len(w.svc.Keys()); got != 1 {
				t.Fatalf("the copy holds %d keys, want the 1 it was copied with", got)
			}
			if recs, err := w.records(t.Context()); err != nil || len(recs) != 1 {
				t.Fatalf("records %v (%v), want the APIKey's", recs, err)
			}

			w.swap(w.dir, w.ids)
			w.waitFor("the APIKey to be gone", func(ctx context.Context) (bool, error) {
				err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			w.noLeaks()
		})
	}
}

// When the hold ends before the keys could be deleted (the service was
// down), the APIKeys go without their delete and their records stay.
//
// challenge: once the service is back, the sweeper deletes the keys
// through the KeyServer the admin designated (one in the operator's
// namespace: the tenant's is gone with its namespace), proven to reach the
// same deployment, and removes the records.
//
// id-only: no connection is authenticated (a copy would answer as the
// service does), so the sweeper asks nothing and deletes nothing: the
// records stay, marked unverified (the records gauge, a Warning Event
// naming the keys), and so do the keys, until an admin deletes them.
func TestSweeperFinishesWhatTheHoldGaveUp(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			w := start(t, controller.Options{ServiceMode: mode, HoldTimeout: 3 * time.Second, SweepSettle: time.Second, SweepClockSkew: time.Millisecond, SweepInterval: time.Second})
			w.keyServer(w.sys)
			ns := w.tenant()
			a, b := apiKey(ns, "a"), apiKey(ns, "b")
			w.create(a)
			w.create(b)
			w.ready(a)
			w.ready(b)

			addr := w.svc.Addr()
			if err := w.svc.Close(); err != nil {
				t.Fatal(err)
			}
			if err := controlplane.DeleteAndWait(t.Context(), w.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, wait); err != nil {
				t.Fatal(err)
			}
			if recs, err := w.records(t.Context()); err != nil || len(recs) != 2 {
				t.Fatalf("released without delete, but records are %v (%v): the keys would leak", recs, err)
			}

			w.svc = w.serve(addr, w.dir, w.ids)
			if got := len(w.svc.Keys()); got != 2 {
				t.Fatalf("the service holds %d keys after the hold gave up, want 2; the test proves nothing", got)
			}
			if mode == service.ModeIDOnly {
				w.waitFor("the sweeper to mark both records unverified", func(ctx context.Context) (bool, error) {
					notes, err := w.notes(ctx)
					return cmp.Equal(notes, []string{string(sweep.Unverified), string(sweep.Unverified)}), err
				})
				if got := len(w.svc.Keys()); got != 2 {
					t.Fatalf("the service holds %d keys, want both kept: the sweeper must not act on an unauthenticated connection", got)
				}
				return
			}
			w.waitFor("the sweeper to delete the keys and their records", func(ctx context.Context) (bool, error) {
				recs, err := w.records(ctx)
				return len(recs) == 0 && len(w.svc.Keys()) == 0, err
			})
		})
	}
}

// An APIKey restored from a backup (a new UID, the annotation naming the
// old one) after its predecessor went without its cleanup adopts the
// predecessor's key: the key is retagged to the new owner (Retag), the
// record moves, and nothing is created twice.
func TestRestoreAdoptsTheKey(t *testing.T) {
	w := &world{t: t, c: env.Client, sys: testenv.Namespace(t, env.Client), dir: t.TempDir(), ids: t.TempDir()}
	w.svc = w.serve("", w.dir, w.ids)
	stop := w.run(controller.Options{})
	ns := w.tenant()
	k := apiKey(ns, "k", "read")
	w.create(k)
	w.ready(k)
	oldUID := k.UID
	backup := apiKey(ns, "k", "read")
	backup.Annotations = map[string]string{lifecycle.AnnotationUID: k.Annotations[lifecycle.AnnotationUID]}
	if backup.Annotations[lifecycle.AnnotationUID] != string(oldUID) {
		t.Fatalf("the APIKey's %s annotation is %q, want its UID %s", lifecycle.AnnotationUID, backup.Annotations[lifecycle.AnnotationUID], oldUID)
	}

	// The disaster: the operator is down and the APIKey goes without its
	// cleanup (its finalizer removed by hand).
	stop()
	k.Finalizers = nil
	if err := w.c.Update(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.DeleteAndWait(t.Context(), w.c, k, wait); err != nil {
		t.Fatal(err)
	}

	w.create(backup)
	w.run(controller.Options{})
	w.ready(backup)
	keys := w.svc.Keys()
	if len(keys) != 1 || keys[0].Tag != ledger.Tag(ledger.Owner{Kind: "APIKey", UID: backup.UID}) {
		t.Fatalf("after the restore the service holds %v; want the one key, tagged for the new UID %s", keys, backup.UID)
	}
	recs, err := w.records(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{string(backup.UID)}, recs); diff != "" {
		t.Errorf("records after the restore (-want +got):\n%s", diff)
	}
	if err := controlplane.DeleteAndWait(t.Context(), w.c, backup, wait); err != nil {
		t.Fatal(err)
	}
	w.noLeaks()
}

// A NeedsAction answered by the dial (a token Secret without the token)
// reaches the APIKey's Synced condition as the adapter wrote it: not
// wrapped in the pool's dial error, whose key names the key service's
// address.
func TestNeedsActionFromTheDialSaysOnlyTheAction(t *testing.T) {
	w := start(t, controller.Options{})
	ns := testenv.Namespace(t, w.c)
	w.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys-token"}, StringData: map[string]string{"not-the-token": serviceToken}})
	w.create(&v1alpha1.KeyServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys"}, Spec: v1alpha1.KeyServerSpec{
		URL: w.svc.URL, TokenSecretRef: v1alpha1.TokenSecretReference{Name: "keys-token"},
	}})
	k := apiKey(ns, "k")
	w.create(k)
	var got *metav1.Condition
	w.waitFor("the APIKey to say TokenMissing", func(ctx context.Context) (bool, error) {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
			return false, err
		}
		got = meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionSynced)
		return got != nil && got.Reason == controller.ReasonTokenMissing, nil
	})
	want := fmt.Sprintf(controller.MessageTokenMissing, "keys-token", v1alpha1.DefaultTokenKey)
	if diff := cmp.Diff(want, got.Message); diff != "" {
		t.Errorf("Synced message (-want +got):\n%s", diff)
	}
	if u, err := url.Parse(w.svc.URL); err != nil || strings.Contains(got.Message, u.Host) {
		t.Errorf("the message %q names the key service's address %s (%v)", got.Message, w.svc.URL, err)
	}
}

// A key service that stops answering (established connections frozen, new
// ones refused) while an APIKey is deleted: past the watchdog's threshold
// the deletion is reported blocked, in the APIKey's CleanupBlocked
// condition, which lifecycle.Setup wires (the README's hand wiring used to
// leave it out). Once the service answers again the deletion finishes and
// nothing is left.
func TestFrozenServiceMakesCleanupBlocked(t *testing.T) {
	w := &world{t: t, c: env.Client, sys: testenv.Namespace(t, env.Client), dir: t.TempDir(), ids: t.TempDir()}
	w.svc = w.serve("", w.dir, w.ids)
	proxy, err := faultinject.NewProxy(w.svc.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	w.run(controller.Options{CallTimeout: time.Second, BlockedAfter: time.Second})
	ns := testenv.Namespace(t, w.c)
	w.keyServerAt(ns, "http://"+proxy.Addr())
	k := apiKey(ns, "k")
	w.create(k)
	w.ready(k)

	proxy.Refuse(true)
	proxy.Freeze()
	if err := w.c.Delete(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	w.waitFor("the APIKey's CleanupBlocked condition", func(ctx context.Context) (bool, error) {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(k.Status.Conditions, watchdog.ConditionType)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == watchdog.ReasonCleanupBlocked, nil
	})
	if got := len(w.svc.Keys()); got != 1 {
		t.Fatalf("the service holds %d keys while the deletion is blocked, want 1", got)
	}

	proxy.Refuse(false)
	proxy.Thaw()
	w.waitFor("the APIKey to be gone", func(ctx context.Context) (bool, error) {
		err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	w.noLeaks()
}
