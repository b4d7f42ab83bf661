package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finale-dev/finale/internal/widget"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// Widget is the tiny managed kind of these tests (internal/widget): a
// PostgreSQL role named Spec.RoleName, reached through the DSN in the
// ConfigMap Spec.Parent.
type (
	Widget       = widget.Widget
	WidgetSpec   = widget.WidgetSpec
	WidgetStatus = widget.WidgetStatus
	WidgetList   = widget.WidgetList
)

var widgetGV = widget.GroupVersion

const finalizer = "lifecycle.test.finale.dev/cleanup"

func scheme() *runtime.Scheme {
	s := testenv.Scheme()
	widget.AddToScheme(s)
	return s
}

var (
	crdOnce sync.Once
	crdErr  error // every caller's, not only the first's
)

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return testenv.OpenCRD(widgetGV.WithKind("Widget"), "widgets", true)
}

// env is one test's world: a namespace, a fresh PostgreSQL deployment, a
// record store and an adapter whose calls are counted.
type env struct {
	t       *testing.T
	c       client.Client
	ns      string
	target  *pgtarget.Target
	dsn     string
	store   *ledger.ConfigMapStore
	led     *ledger.Ledger
	pool    *clientpool.Pool[string, *pgtarget.Target]
	creates atomic.Int32
	// createHook, when set, runs before the role is created.
	createHook func(ctx context.Context) error
	// afterCreate, when set, replaces the answer of a create that landed.
	afterCreate func() error
	// deleteErr, when set, is returned instead of deleting.
	deleteErr func() error
	events    *eventLog
}

func newEnv(t *testing.T, storeClient client.Client) *env {
	t.Helper()
	s := scheme()
	c := testenv.Client(t, s)
	crdOnce.Do(func() { crdErr = controlplane.InstallCRDs(context.Background(), c, widgetCRD()) })
	if crdErr != nil {
		t.Fatalf("install CRD: %v", crdErr)
	}
	e := &env{t: t, c: c, ns: testenv.Namespace(t, c), events: &eventLog{}}
	e.target, e.dsn = pgtarget.Fresh(t, testenv.Postgres(t))
	recNS := testenv.Namespace(t, c)
	if storeClient == nil {
		storeClient = c
	}
	var err error
	if e.store, err = ledger.NewConfigMapStore(storeClient, recNS); err != nil {
		t.Fatal(err)
	}
	e.led = ledgerOn(e.store)
	e.pool, err = clientpool.New(clientpool.Options[string, *pgtarget.Target]{
		Name: "lifecycle-test-" + e.ns,
		Dial: clientpool.DialFn[string, *pgtarget.Target](pgtarget.Open),
		Close: clientpool.CloseFn[*pgtarget.Target](func(t *pgtarget.Target) error {
			t.Close()
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.pool.Close() })
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "conn"}, Data: map[string]string{"dsn": e.dsn}}
	if err := c.Create(t.Context(), parent); err != nil {
		t.Fatal(err)
	}
	return e
}

// adapter is the tiny adapter: about as small as one gets.
func (e *env) adapter() lifecycle.Adapter[*Widget, string, *pgtarget.Target] {
	return lifecycle.AdapterFuncs[*Widget, string, *pgtarget.Target]{
		ConnectFn: func(ctx context.Context, w *Widget) (lifecycle.Connection[string], error) {
			var cm corev1.ConfigMap
			err := e.c.Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: w.Spec.Parent}, &cm)
			if client.IgnoreNotFound(err) != nil || err != nil {
				return lifecycle.Connection[string]{}, client.IgnoreNotFound(err)
			}
			return lifecycle.Connection[string]{Key: cm.Data["dsn"], Parent: &cm}, nil
		},
		ProveFn: func(ctx context.Context, t *pgtarget.Target, q ledger.Question) (ledger.Answer, error) {
			return t.Prove(ctx, q)
		},
		ObserveFn: func(ctx context.Context, t *pgtarget.Target, _ *Widget, tag string) (lifecycle.Observation, error) {
			ids, err := t.FindByTag(ctx, tag)
			return lifecycle.Observation{IDs: ids, UpToDate: true}, err
		},
		CreateFn: func(ctx context.Context, t *pgtarget.Target, w *Widget, tag string) (string, error) {
			if e.createHook != nil {
				if err := e.createHook(ctx); err != nil {
					return "", err
				}
			}
			e.creates.Add(1)
			if err := t.CreateRole(ctx, w.Spec.RoleName, tag); err != nil {
				return "", err
			}
			if e.afterCreate != nil {
				return "", e.afterCreate()
			}
			return w.Spec.RoleName, nil
		},
		UpdateFn: func(context.Context, *pgtarget.Target, *Widget, string, string) error { return nil },
		DeleteFn: func(ctx context.Context, t *pgtarget.Target, id, tag string) error {
			if e.deleteErr != nil {
				if err := e.deleteErr(); errors.Is(err, errLie) {
					return nil
				} else if err != nil {
					return err
				}
			}
			return t.Delete(ctx, id, tag)
		},
	}
}

func (e *env) reconciler(c lifecycle.Client, o lifecycle.Options) *lifecycle.Reconciler[*Widget, string, *pgtarget.Target] {
	e.t.Helper()
	o.Finalizer = finalizer
	o.Scheme = e.c.Scheme()
	o.Recorder = e.events
	// The tests name the guarantees they leave out by leaving them nil.
	for g, isNil := range map[lifecycle.Guarantee]bool{lifecycle.SkipLedger: o.Ledger == nil, lifecycle.SkipHold: o.Hold == nil, lifecycle.SkipWatchdog: o.Watchdog == nil} {
		if isNil {
			o.Skip |= g
		}
	}
	if c == nil {
		c = e.c
	}
	r, err := lifecycle.New(c, func() *Widget { return &Widget{} }, e.adapter(), e.pool, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) widget(name, policy string) *Widget {
	e.t.Helper()
	w := &Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec:       WidgetSpec{Parent: "conn", RoleName: pgtarget.RandomName("w_"), DeletionPolicy: policy},
	}
	w.SetGroupVersionKind(widgetGV.WithKind("Widget"))
	if err := e.c.Create(e.t.Context(), w); err != nil {
		e.t.Fatal(err)
	}
	return w
}

func (e *env) get(w *Widget) *Widget {
	e.t.Helper()
	got := &Widget{}
	if err := e.c.Get(e.t.Context(), client.ObjectKeyFromObject(w), got); err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) roleExists(name string) bool {
	e.t.Helper()
	ok, err := e.target.RoleExists(e.t.Context(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

func (e *env) record(uid types.UID) *ledger.Record {
	e.t.Helper()
	r, err := e.store.Get(e.t.Context(), uid)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

type event struct{ Type, Reason string }

// eventLog is a Recorder that keeps what it is given.
type eventLog struct {
	mu     sync.Mutex // guards events
	events []event
}

func (l *eventLog) Eventf(_, _ runtime.Object, typ, reason, _, _ string, _ ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event{typ, reason})
}

func (l *eventLog) take() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

// errLie makes the adapter's delete report success without deleting.
var errLie = errors.New("lie")

func mustStore(t *testing.T, c client.Client, ns string) *ledger.ConfigMapStore {
	t.Helper()
	s, err := ledger.NewConfigMapStore(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testKey is the one operator key of these tests: every ledger over any
// store signs alike, as one operator's replicas do.
var testKey = ledger.GenerateKey()

func ledgerOn(s ledger.Store) *ledger.Ledger {
	l, err := ledger.New(s, ledger.Options{Key: testKey})
	if err != nil {
		panic(err)
	}
	return l
}

func waitGone(t *testing.T, e *env, w *Widget) error {
	t.Helper()
	return controlplane.WaitGone(t.Context(), e.c, w, 30*time.Second)
}
