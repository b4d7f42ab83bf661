package capture_test

// The operator under test: one manager running the release controller, the
// gated owner controller and (optionally) a naive timer-based release, as
// upstream does it, with every write of the release path counted.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

// naiveDelay is upstream's timer: two minutes after the last transition.
const naiveDelay = 2 * time.Minute

// pendingThreshold for the Releaser under test.
const pendingThreshold = time.Minute

type stackOptions struct {
	ownerOpen bool
	clock     clock.PassiveClock
	// naive also runs the timer-based release for pods carrying naiveFin.
	naive bool
	// failChildPatch makes every finalizer removal by the release path fail,
	// as if the operator crashed right after persisting.
	failChildPatch bool
	workers        int
	// watchdog, when set, receives every attempt and release as well.
	watchdog capture.Watchdog
	// writer replaces the Job's ResultWriter.
	writer capture.ResultWriter[*Job]
	// scheme and ownerKind put the Job type in another group (one whose
	// CRD prunes the results); scheme() and jobKind when unset.
	scheme    *runtime.Scheme
	ownerKind schema.GroupKind
}

type stack struct {
	// name of the release controller: its metrics' controller label.
	name     string
	rel      *capture.Releaser[*Job]
	watchdog *attempts
	gate     *gate
	writes   *writeLog
	events   *eventLog
	stop     func()
}

// writeLog counts the release path's API writes, in order. Guarded by mu.
type writeLog struct {
	mu     sync.Mutex
	ops    []string
	writes int
	// conflicts on the owner's status only: finalizer patches that
	// conflict (a stale cached child) are re-read, not persist retries.
	conflicts int
}

func (w *writeLog) add(op string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if apierrors.IsConflict(err) {
		if strings.HasPrefix(op, "status ") {
			w.conflicts++
		}
		op += " (conflict)"
	} else if err != nil {
		op += " (error)"
	}
	w.ops = append(w.ops, op)
}

func (w *writeLog) snapshot() (ops []string, writes, conflicts int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ops...), w.writes, w.conflicts
}

// attempts is a Watchdog that counts held attempts and releases per child
// name. Guarded by mu.
type attempts struct {
	next capture.Watchdog

	mu      sync.Mutex
	held    map[string]int
	done    map[string]int
	lastErr map[string]error
}

func (a *attempts) Attempt(ctx context.Context, obj client.Object, fin string, err error) bool {
	blocked := false
	if a.next != nil {
		blocked = a.next.Attempt(ctx, obj, fin, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[obj.GetName()]++
	a.lastErr[obj.GetName()] = err
	return blocked
}

func (a *attempts) Done(ctx context.Context, obj client.Object, fin string) {
	if a.next != nil {
		a.next.Done(ctx, obj, fin)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done[obj.GetName()]++
}

func (a *attempts) heldCount(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[name]
}

func (a *attempts) lastError(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr[name]
}

// eventLog is an EventRecorder that keeps what it is given. Guarded by mu.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (e *eventLog) Eventf(regarding, _ runtime.Object, eventtype, reason, _, _ string, _ ...interface{}) {
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, eventtype+" "+reason+" "+name)
}

func (e *eventLog) count(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events {
		if ev == s {
			n++
		}
	}
	return n
}

var stackSeq atomic.Int64

func startStack(t testing.TB, ns string, o stackOptions) *stack {
	t.Helper()
	cp := testenv.ControlPlane(t)
	s := o.scheme
	if s == nil {
		s = scheme()
	}
	if o.ownerKind.Kind == "" {
		o.ownerKind = jobKind
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	if o.writer == nil {
		o.writer = jobWriter
	}
	if o.workers == 0 {
		o.workers = 2
	}
	name := fmt.Sprintf("capture-%d", stackSeq.Add(1))
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	st := &stack{
		name:     name,
		watchdog: &attempts{next: o.watchdog, held: map[string]int{}, done: map[string]int{}, lastErr: map[string]error{}},
		gate:     newGate(o.ownerOpen), writes: &writeLog{}, events: &eventLog{}}
	base, err := client.NewWithWatch(cp.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	w := st.writes
	counted := interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			var err error
			if o.failChildPatch {
				err = errors.New("injected: operator crashed before removing the finalizer")
			} else {
				err = c.Patch(ctx, obj, patch, opts...)
			}
			w.add("patch "+obj.GetName(), err)
			return err
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			w.add(sub+" "+obj.GetName(), err)
			return err
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			err := c.Update(ctx, obj, opts...)
			w.add("update "+obj.GetName(), err)
			return err
		},
	})
	rel, err := capture.New(counted, counted, capture.Options[*Job]{
		Name:                    name,
		Finalizer:               captureFin,
		OwnerKind:               o.ownerKind,
		NewOwner:                func() *Job { return &Job{} },
		Results:                 jobResults,
		Writer:                  o.writer,
		Completion:              jobCompletion,
		Clock:                   o.clock,
		PendingThreshold:        pendingThreshold,
		Events:                  st.events,
		Watchdog:                st.watchdog,
		MaxConcurrentReconciles: o.workers,
	})
	if err != nil {
		t.Fatal(err)
	}
	st.rel = rel
	if err := rel.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	owner := &ownerController{c: mgr.GetClient(), gate: st.gate}
	if err := owner.setup(mgr, name+"-owner"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // controller-runtime's own log is off in these tests
			t.Logf("owner controller: %s", owner.failures())
		}
	})
	if o.naive {
		n := &naiveRelease{c: mgr.GetClient(), clock: o.clock}
		if err := ctrl.NewControllerManagedBy(mgr).Named(name + "-naive").For(&corev1.Pod{}).Complete(n); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	st.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(st.stop)
	if !mgr.GetCache().WaitForCacheSync(t.Context()) {
		t.Fatal("cache did not sync")
	}
	return st
}

// naiveRelease is the upstream behaviour the seed reports: on the deletion
// path, remove the finalizer once naiveDelay has passed since the Pod's last
// condition transition, whatever the owner has persisted.
type naiveRelease struct {
	c     client.Client
	clock clock.PassiveClock
}

func (n *naiveRelease) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := n.c.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(&pod, naiveFin) {
		return reconcile.Result{}, nil
	}
	var last time.Time
	for _, c := range pod.Status.Conditions {
		if c.LastTransitionTime.After(last) {
			last = c.LastTransitionTime.Time
		}
	}
	if left := naiveDelay - n.clock.Since(last); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	orig := pod.DeepCopy()
	controllerutil.RemoveFinalizer(&pod, naiveFin)
	return reconcile.Result{}, client.IgnoreNotFound(n.c.Patch(ctx, &pod, client.MergeFrom(orig)))
}

// env is one test's namespace and admin client, with the Job CRD installed.
func env(t testing.TB) (client.Client, string) {
	t.Helper()
	c := testenv.Client(t, scheme())
	if err := controlplane.InstallCRDs(t.Context(), c, jobCRD()); err != nil {
		t.Fatal(err)
	}
	return c, testenv.Namespace(t, c)
}

func deletePod(t testing.TB, c client.Client, pod *corev1.Pod) {
	t.Helper()
	if err := c.Delete(t.Context(), pod); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s: %v", pod.Name, err)
	}
}

func waitGone(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := controlplane.WaitGone(t.Context(), c, o, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFinalizerGone(t testing.TB, c client.Client, pod *corev1.Pod, fin string) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), 60*time.Second, "finalizer "+fin+" off "+pod.Name, func(ctx context.Context) (bool, error) {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		return !controllerutil.ContainsFinalizer(&got, fin), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func indexOf(ops []string, prefix string) int {
	for i, op := range ops {
		if strings.HasPrefix(op, prefix) && !strings.Contains(op, "(") {
			return i
		}
	}
	return -1
}
