package controller_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/controller"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/testenv"
)

// The tests of README.md's table that the other tests of the package do
// not already run in both service modes. Each runs the same steps in both
// and asserts what each mode guarantees.

// errRecordsRefused is what the apiserver answers every write of a cleanup
// record with, in TestNoRecordNoCreate.
var errRecordsRefused = apierrors.NewServiceUnavailable("cleanup records refused by the test's fault script")

// When the cleanup record cannot be written, nothing is created: the
// APIKey reports CleanupRecordFailed and the service holds no key. The
// record is written by the ledger before the adapter is asked to create,
// whatever the service's mode, so this holds in both.
func TestNoRecordNoCreate(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			script := faultinject.NewScript(faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Err: errRecordsRefused})
			w := &world{t: t, c: env.Client, sys: testenv.Namespace(t, env.Client), dir: t.TempDir(), ids: t.TempDir(), mode: mode,
				newClient: func(cfg *rest.Config, o client.Options) (client.Client, error) {
					c, err := client.New(cfg, o)
					if err != nil {
						return nil, err
					}
					return faultinject.WrapClient(c, script), nil
				}}
			w.svc = w.serve("", w.dir, w.ids)
			w.run(controller.Options{ServiceMode: mode})
			ns := w.tenant()
			k := apiKey(ns, "k")
			w.create(k)
			w.waitFor("the APIKey to say CleanupRecordFailed", func(ctx context.Context) (bool, error) {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
					return false, err
				}
				c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionSynced)
				return c != nil && c.Reason == lifecycle.ReasonRecordFailed, nil
			})
			refused := slices.ContainsFunc(script.Calls(), func(c faultinject.Call) bool {
				return c.Verb == faultinject.Create && c.Kind == "ConfigMap" && c.Namespace == w.sys && c.Err != nil
			})
			if !refused {
				t.Fatalf("no refused record write in the records namespace %s: the test proves nothing", w.sys)
			}
			if got := w.svc.Keys(); len(got) != 0 {
				t.Errorf("the service holds %v with no record written: a create without a record leaks when its owner goes", got)
			}
		})
	}
}

// loseFirstCreate is a front for the key service that lets the first
// create reach the service and then drops the connection before its
// answer: the create lands, the operator does not learn its ID.
type loseFirstCreate struct {
	next    http.Handler
	lost    atomic.Bool
	creates atomic.Int32 // creates that reached the service
}

func (l *loseFirstCreate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/keys" {
		l.next.ServeHTTP(w, r)
		return
	}
	l.creates.Add(1)
	if !l.lost.CompareAndSwap(false, true) {
		l.next.ServeHTTP(w, r)
		return
	}
	l.next.ServeHTTP(httptest.NewRecorder(), r)
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// front serves h on a loopback port for the test.
func front(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(s.Close)
	return s.URL
}

func reverse(t *testing.T, target string) *httputil.ReverseProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	return httputil.NewSingleHostReverseProxy(u)
}

// A create whose answer is lost (it landed in the service) is not made a
// second time: the retry finds the key by its tag and adopts it. The
// id-only service still lists keys by tag, as the seed's listed keys by
// their name prefix, so this holds in both modes.
func TestLostCreateAnswerIsAdopted(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			w := &world{t: t, c: env.Client, sys: testenv.Namespace(t, env.Client), dir: t.TempDir(), ids: t.TempDir(), mode: mode}
			w.svc = w.serve("", w.dir, w.ids)
			lose := &loseFirstCreate{next: reverse(t, w.svc.URL)}
			w.run(controller.Options{ServiceMode: mode})
			ns := testenv.Namespace(t, w.c)
			w.keyServerAt(ns, front(t, lose))
			k := apiKey(ns, "k")
			w.create(k)
			w.ready(k)
			if !lose.lost.Load() {
				t.Fatal("no create answer was lost: the test proves nothing")
			}
			if n := lose.creates.Load(); n != 1 {
				t.Errorf("%d creates reached the service, want 1: the retry must adopt, not create", n)
			}
			if got := w.svc.Keys(); len(got) != 1 {
				t.Errorf("the service holds %v, want exactly one key", got)
			}
			if err := w.c.Delete(t.Context(), k); err != nil {
				t.Fatal(err)
			}
			w.waitFor("the APIKey to be gone", func(ctx context.Context) (bool, error) {
				err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			w.noLeaks()
		})
	}
}

// splice is a front that, once spliced, sends the identity calls to the
// service and every other call to another backend: the seed's follow-up 6,
// a rolling update that puts the identity check and the delete on pods
// of different databases, or a proxy splicing a session.
type splice struct {
	real, other http.Handler
	on          atomic.Bool
	deletes     atomic.Int32 // deletes sent to the other backend
}

func (s *splice) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.on.Load() || strings.HasPrefix(r.URL.Path, "/v1/identity") {
		s.real.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodDelete {
		s.deletes.Add(1)
	}
	s.other.ServeHTTP(w, r)
}

// An APIKey deleted while its calls are spliced between the service and
// another, empty backend.
//
// challenge: a proof is one request answered where the token is kept,
// listing what still carries the tag; the delete reaches the other
// backend and removes nothing, so the proof after it still lists the key:
// the deletion fails (DeleteFailed), the key and the record stay, and once
// the splice ends the deletion finishes and nothing is left.
//
// id-only: the identity check and the list are separate requests; the
// identity still comes from the service, the read, the delete and the
// list after it from the other backend, which has no such key. The
// cleanup takes that for done, removes the record and lets the APIKey go,
// while the service keeps the key: it leaked.
func TestSplicedBackends(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			w := &world{t: t, c: env.Client, sys: testenv.Namespace(t, env.Client), dir: t.TempDir(), ids: t.TempDir(), mode: mode}
			w.svc = w.serve("", w.dir, w.ids)
			other := w.serve("", t.TempDir(), t.TempDir())
			sp := &splice{real: reverse(t, w.svc.URL), other: reverse(t, other.URL)}
			w.run(controller.Options{ServiceMode: mode})
			ns := testenv.Namespace(t, w.c)
			w.keyServerAt(ns, front(t, sp))
			k := apiKey(ns, "k")
			w.create(k)
			w.ready(k)
			want := w.svc.Keys()
			if len(want) != 1 {
				t.Fatalf("the service holds %v, want one key", want)
			}

			sp.on.Store(true)
			if err := w.c.Delete(t.Context(), k); err != nil {
				t.Fatal(err)
			}
			if mode == service.ModeIDOnly {
				w.waitFor("the APIKey to be gone", func(ctx context.Context) (bool, error) {
					err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k)
					return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
				})
				if recs, err := w.records(t.Context()); err != nil || len(recs) != 0 {
					t.Fatalf("records %v (%v), want none: the spliced answers confirmed the delete", recs, err)
				}
				if got := w.svc.Keys(); !cmp.Equal(got, want) {
					t.Fatalf("the service holds %v after the APIKey went, want %v: the id-only mode must leak the key here, or this row of README.md's table is wrong", got, want)
				}
				return
			}

			w.waitFor("the deletion to fail (DeleteFailed) after a delete reached the other backend", func(ctx context.Context) (bool, error) {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
					return false, err
				}
				c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionSynced)
				return sp.deletes.Load() > 0 && c != nil && c.Reason == lifecycle.ReasonDeleteFailed, nil
			})
			if !slices.Contains(k.Finalizers, controller.Finalizer) {
				t.Fatal("the APIKey lost its cleanup finalizer while the service still holds its key")
			}
			if got := w.svc.Keys(); !cmp.Equal(got, want) {
				t.Fatalf("the service holds %v, want %v", got, want)
			}
			if recs, err := w.records(t.Context()); err != nil || len(recs) != 1 {
				t.Fatalf("records %v (%v), want the APIKey's", recs, err)
			}

			sp.on.Store(false)
			w.waitFor("the APIKey to be gone", func(ctx context.Context) (bool, error) {
				err := w.c.Get(ctx, client.ObjectKeyFromObject(k), k)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			w.noLeaks()
		})
	}
}

// Setup refuses a service mode it does not know rather than fall back to
// one: the mode decides whether the sweeper may act.
func TestSetupRefusesUnknownMode(t *testing.T) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = controller.Setup(t.Context(), mgr, controller.Options{RecordsNamespace: testenv.Namespace(t, env.Client), ServiceMode: "seed", SkipNameValidation: true})
	if !errors.Is(err, controller.ErrServiceMode) {
		t.Errorf("Setup with ServiceMode %q = %v, want ErrServiceMode", "seed", err)
	}
}
