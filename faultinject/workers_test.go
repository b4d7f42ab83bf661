package faultinject_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
)

// seen records which requests a reconciler got, and when first.
type seen struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func (s *seen) Reconcile(_ context.Context, r reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first = map[string]time.Time{}
	}
	if _, ok := s.first[r.Name]; !ok {
		s.first[r.Name] = time.Now()
	}
	return reconcile.Result{}, nil
}

func (s *seen) at(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.first[name]
	return t, ok
}

// startManager runs a manager with one ConfigMap controller in namespace ns.
func startManager(t *testing.T, ns string, r reconcile.Reconciler, h handler.EventHandler) {
	t.Helper()
	cp := testenv.ControlPlane(t)
	mgr, err := manager.New(cp.Config, manager.Options{
		Scheme:  testenv.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	inNS := func(o client.Object) bool { return o.GetNamespace() == ns }
	b := builder.ControllerManagedBy(mgr).Named("cm-" + ns).WithOptions(ctrlOpts())
	if h == nil {
		b = b.For(&corev1.ConfigMap{}, builder.WithPredicates(predicateFunc(inNS)))
	} else {
		b = b.WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&corev1.ConfigMap{}), h, predicateFunc(inNS)))
	}
	if err := b.Complete(r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func TestGatePausesOnlyItsController(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	inner := &seen{}
	gate := &faultinject.Gate{Inner: inner}
	gate.Pause()
	startManager(t, ns, gate, nil)

	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, 30*time.Second, "a reconcile to wait at the gate", func(context.Context) (bool, error) {
		return gate.Waiting() == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inner.at("a"); ok {
		t.Fatal("the inner reconciler ran while the gate was paused")
	}
	gate.Resume()
	err = controlplane.WaitFor(ctx, 30*time.Second, "the reconcile to run after Resume", func(context.Context) (bool, error) {
		_, ok := inner.at("a")
		return ok, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEventFaultDropsAndDelays(t *testing.T) {
	ctx := t.Context()
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	inner := &seen{}
	fault := &faultinject.EventFault{}
	fault.SetDrop(func(o client.Object) bool { return o.GetName() == "unseen" })
	const delay = 500 * time.Millisecond
	fault.SetDelay(delay)
	startManager(t, ns, inner, fault.Handler(&handler.EnqueueRequestForObject{}))

	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unseen"}}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}}); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(ctx, 30*time.Second, "the delayed event", func(context.Context) (bool, error) {
		_, ok := inner.at("late")
		return ok, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := inner.at("late")
	if got := at.Sub(created); got < delay {
		t.Errorf("delayed event reconciled after %s, want at least %s", got, delay)
	}
	// Events for "unseen" were routed before "late"'s, so by now a
	// delivered one would have been reconciled too.
	if _, ok := inner.at("unseen"); ok {
		t.Error("a dropped event reached the reconciler")
	}
	if fault.Dropped() == 0 {
		t.Error("Dropped() = 0, want the drop counted")
	}
}
