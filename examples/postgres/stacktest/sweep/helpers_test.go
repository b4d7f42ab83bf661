package sweep_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

func TestMain(m *testing.M) {
	logf.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{}))
	testenv.Main(m)
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Widget is the test's owner kind: a CRD, so that owners and record
// ConfigMaps are different kinds in the cache.
var widgetGVK = schema.GroupVersionKind{Group: "sweep.test.finale.dev", Version: "v1", Kind: "Widget"}

var (
	installOnce sync.Once
	installErr  error // every caller's, not only the first's
)

func installWidgets(t testing.TB, c client.Client) {
	t.Helper()
	installOnce.Do(func() {
		installErr = controlplane.InstallCRDs(context.Background(), c, testenv.OpenCRD(widgetGVK, "widgets", false))
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
}

func widget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// newWidget creates a Widget and returns it as a ledger owner.
func newWidget(t testing.TB, c client.Client, ns, name string) ledger.Owner {
	t.Helper()
	u := widget(ns, name)
	if err := c.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	return ownerOf(u)
}

func ownerOf(u *unstructured.Unstructured) ledger.Owner {
	return ledger.Owner{APIVersion: widgetGVK.GroupVersion().String(), Kind: "Widget", Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()}
}

// logLines captures log lines.
type logLines struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// recorder captures Events.
type recorder struct {
	mu     sync.Mutex // guards events
	events []event
}

type event struct{ Regarding, Type, Reason, Note string }

func (r *recorder) Eventf(regarding, _ runtime.Object, typ, reason, _, note string, args ...interface{}) {
	ref, _ := regarding.(*corev1.ObjectReference)
	name := ""
	if ref != nil {
		name = ref.Name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{Regarding: name, Type: typ, Reason: reason, Note: fmt.Sprintf(note, args...)})
}

func (r *recorder) byReason(reason string) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	for _, e := range r.events {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// env is an operator namespace with a ledger, a user namespace with Widgets,
// and deployment A (a fresh database on the shared PostgreSQL server).
type env struct {
	c      client.Client
	store  *ledger.ConfigMapStore
	clock  *clocktesting.FakeClock
	key    ledger.Key
	l      *ledger.Ledger
	users  string
	a      *pgtarget.Target
	aDSN   string
	events *recorder
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testenv.Client(t, testenv.Scheme())
	installWidgets(t, c)
	store, err := ledger.NewConfigMapStore(c, testenv.Namespace(t, c))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(t0)
	a, dsn := pgtarget.Fresh(t, testenv.Postgres(t))
	key := ledger.GenerateKey()
	l, err := ledger.New(store, ledger.Options{Key: key, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, store: store, clock: clk, key: key, l: l,
		users: testenv.Namespace(t, c), a: a, aDSN: dsn, events: &recorder{}}
}

// settled is how far the clock must move for a record to be swept.
const settled = sweep.DefaultSettle + sweep.DefaultMaxClockSkew + time.Second

// create makes owner's role in target through the ledger and returns its name.
func (e *env) create(t *testing.T, owner ledger.Owner, tg *pgtarget.Target) string {
	t.Helper()
	return e.createWith(t, ledger.Plan{Owner: owner}, tg)
}

func (e *env) createWith(t *testing.T, p ledger.Plan, tg *pgtarget.Target) string {
	t.Helper()
	name := pgtarget.RandomName("sweep_")
	if _, err := e.l.Create(t.Context(), p, tg, func(ctx context.Context, tag string) ([]string, error) {
		return []string{name}, tg.CreateRole(ctx, name, tag)
	}); err != nil {
		t.Fatal(err)
	}
	return name
}

// authenticated is the Authentication the tests' targets claim: a
// connection straight to the test's own PostgreSQL, with nothing in the
// path.
const authenticated = "the test's own connection, nothing in the path"

// candidates offers the same targets for every record, named target-0,
// ..., each authenticated.
func candidates(targets ...ledger.Target) sweep.Targets {
	return sweep.TargetsFn(func(context.Context, *ledger.Record) ([]sweep.Candidate, error) {
		var out []sweep.Candidate
		for i, tg := range targets {
			out = append(out, sweep.Candidate{Name: fmt.Sprintf("target-%d", i), Target: tg, Authentication: authenticated})
		}
		return out, nil
	})
}

func (e *env) options(owners client.Reader, targets ...ledger.Target) sweep.Options {
	return sweep.Options{
		Ledger: e.l, Owners: owners, Live: e.c, Recorder: e.events, Clock: e.clock, Interval: time.Minute,
		Targets: candidates(targets...),
	}
}

func (e *env) sweeper(t *testing.T, owners client.Reader, targets ...ledger.Target) *sweep.Sweeper {
	t.Helper()
	s, err := sweep.New(e.options(owners, targets...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) deleteOwner(t *testing.T, o ledger.Owner) {
	t.Helper()
	if err := controlplane.DeleteAndWait(t.Context(), e.c, widget(o.Namespace, o.Name), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

func (e *env) roleExists(t *testing.T, name string) bool {
	t.Helper()
	ok, err := e.a.RoleExists(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func (e *env) hasRecord(t *testing.T, o ledger.Owner) bool {
	t.Helper()
	var cm corev1.ConfigMap
	err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.store.Namespace(), Name: ledger.ConfigMapName(o.UID)}, &cm)
	if err != nil && client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return err == nil
}

// metric returns the value of the finale metric name with the given label
// (or without labels when label is ""), from controller-runtime's registry.
func metric(t *testing.T, name, label, value string) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
