package clientpool_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/internal/eventrec"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/watchdog"
)

// The seed incident, end to end: a WorkerDeployment-like custom kind whose
// deletion finalizer cleans up through a gRPC service, reached through the
// pool and a fault proxy, reconciled by a real controller-runtime manager
// on the real control plane. The cached connection is poisoned (frozen:
// it swallows requests, while new connections work) and the object is
// deleted.

const (
	seedGroup     = "g1.test.finale.dev"
	seedKind      = "Worker"
	seedFinalizer = seedGroup + "/server-cleanup"
	seedWait      = 60 * time.Second
	// seedCallTimeout is the per-call bound, as the Temporal SDK's own RPC
	// timeout was in the incident.
	seedCallTimeout = 300 * time.Millisecond
	// seedThreshold is the watchdog's stuck threshold, on its fake clock.
	seedThreshold = 5 * time.Minute
	// naiveRetries is "many retries" for the naive pool before it is
	// declared stuck.
	naiveRetries = 10
)

var seedGVK = schema.GroupVersionKind{Group: seedGroup, Version: "v1", Kind: seedKind}

func seedCRD() *apiextensionsv1.CustomResourceDefinition {
	return testenv.OpenCRD(seedGVK, "workers", true)
}

func newWorker(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(seedGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// workerReconciler is the controller under test, shaped like the upstream
// one: the ordinary reconcile and the deletion cleanup both use the cached
// client, here through the pool's Do.
type workerReconciler struct {
	c    client.Client
	pool *clientpool.Pool[endpoint, *grpc.ClientConn]
	key  endpoint
	wd   *watchdog.Watchdog
	// timeout, when positive, bounds every Reconcile's context, as
	// controller-runtime's ReconciliationTimeout (v0.22 and later) does.
	timeout time.Duration

	observed atomic.Int64 // successful ordinary reconciles (client cached)
	attempts atomic.Int64 // cleanup attempts
	failures atomic.Int64 // failed cleanup attempts
}

func (r *workerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	u := newWorker(req.Namespace, req.Name)
	if err := r.c.Get(ctx, req.NamespacedName, u); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if u.GetDeletionTimestamp() == nil {
		if controllerutil.AddFinalizer(u, seedFinalizer) {
			return reconcile.Result{}, r.c.Update(ctx, u)
		}
		// Describe the server-side deployment: dials and caches the client.
		if err := r.pool.Do(ctx, r.key, check(servingService)); err != nil {
			return reconcile.Result{}, fmt.Errorf("describe worker deployment: %w", err)
		}
		r.observed.Add(1)
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(u, seedFinalizer) {
		return reconcile.Result{}, nil
	}
	err := r.pool.Do(ctx, r.key, check(servingService))
	r.attempts.Add(1)
	r.wd.Attempt(ctx, u, seedFinalizer, err)
	if err != nil {
		r.failures.Add(1)
		return reconcile.Result{}, fmt.Errorf("clean up server-side deployment data, will retry: %w", err)
	}
	controllerutil.RemoveFinalizer(u, seedFinalizer)
	if err := r.c.Update(ctx, u); err != nil {
		return reconcile.Result{}, err
	}
	r.wd.Done(ctx, u, seedFinalizer)
	return reconcile.Result{}, nil
}

// seedRun is one run of the incident with a given eviction policy.
type seedRun struct {
	c       client.Client
	b       *backend
	gc      *grpcCounters
	r       *workerReconciler
	clk     *clocktesting.FakeClock
	worker  *unstructured.Unstructured
	mu      sync.Mutex
	emitted map[string]int // Events by "type reason"; guarded by mu
}

func (s *seedRun) events() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.emitted {
		out[k] = v
	}
	return out
}

// seedConfig varies one run of the incident.
type seedConfig struct {
	policy clientpool.Policy
	// callTimeout is the pool's CallTimeout; zero is seedCallTimeout.
	callTimeout time.Duration
	// reconcileTimeout is the deadline of every Reconcile's context, as
	// controller-runtime's ReconciliationTimeout sets it; zero is none.
	reconcileTimeout time.Duration
}

// startSeed runs the manager and controller as cfg says, creates a Worker,
// waits until the cleanup client is cached, poisons the cached connection
// and deletes the Worker.
func startSeed(t *testing.T, name string, cfg seedConfig) *seedRun {
	t.Helper()
	ctx := t.Context()
	sch := testenv.Scheme()
	c := testenv.Client(t, sch)
	if err := controlplane.InstallCRDs(ctx, c, seedCRD()); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c)

	s := &seedRun{c: c, b: newBackend(t, "api-key"), gc: &grpcCounters{}, emitted: map[string]int{}}
	s.clk = clocktesting.NewFakeClock(time.Now())
	o := s.gc.options(uniqueName(t), staticToken("api-key"))
	o.Policy = cfg.policy
	o.CallTimeout = cmp.Or(cfg.callTimeout, seedCallTimeout)
	pool, err := clientpool.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })

	mgr, err := manager.New(testenv.ControlPlane(t).Config, manager.Options{
		Scheme:                 sch,
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := eventrec.For(mgr, "finale-g1-seed")
	if err != nil {
		t.Fatal(err)
	}
	s.r = &workerReconciler{
		c:       mgr.GetClient(),
		pool:    pool,
		key:     endpoint{Addr: s.b.proxy.Addr(), SecretName: "temporal-cloud-api-key"},
		timeout: cfg.reconcileTimeout,
		wd: watchdog.New(watchdog.Options{
			Clock:     s.clk,
			Threshold: seedThreshold,
			Scheme:    sch,
			Recorder: watchdog.RecorderFn(func(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
				s.mu.Lock()
				s.emitted[eventtype+" "+reason]++
				s.mu.Unlock()
				rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
			}),
			Conditions: watchdog.StatusConditions{Reader: mgr.GetAPIReader(), Status: c},
		}),
	}
	err = builder.ControllerManagedBy(mgr).
		Named(fmt.Sprintf("%s-%d", name, poolSeq.Add(1))). // unique per run, so -count=N works
		For(newWorker("", "")).
		WithOptions(controller.Options{
			// A short, steady retry cadence (the incident's was 10s) so
			// "many retries" takes seconds.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](20*time.Millisecond, 100*time.Millisecond),
		}).
		Complete(s.r)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	s.worker = newWorker(ns, "example-nestjs-temporal-worker")
	if err := c.Create(ctx, s.worker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cleanup client to be cached by an ordinary reconcile", func() bool { return s.r.observed.Load() > 0 })
	if got := s.b.proxy.Freeze(); got != 1 {
		t.Fatalf("froze %d connections, want the 1 cached", got)
	}
	if err := c.Delete(ctx, s.worker); err != nil {
		t.Fatal(err)
	}
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := controlplane.WaitFor(t.Context(), seedWait, what, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatal(err)
	}
}

// TestPoisonedClientNaivePoolStaysStuck: with eviction off, as upstream
// before the fix, every retry reuses the poisoned client; the deletion is
// still stuck after many retries, and the watchdog reports it once the
// threshold passes: a Warning Event once (not per retry) and the
// CleanupBlocked condition. Only removing the fault (the incident's pod
// restart) lets it finish.
func TestPoisonedClientNaivePoolStaysStuck(t *testing.T) {
	s := startSeed(t, "g1-seed-naive", seedConfig{policy: clientpool.NeverEvict})
	ctx := t.Context()

	waitFor(t, fmt.Sprintf("%d failed cleanup attempts", naiveRetries), func() bool { return s.r.failures.Load() >= naiveRetries })
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(s.worker), s.worker); err != nil {
		t.Fatalf("worker after %d retries: %v", naiveRetries, err)
	}
	if !controllerutil.ContainsFinalizer(s.worker, seedFinalizer) {
		t.Fatal("finalizer removed although every cleanup failed")
	}
	if diff := gocmp.Diff(counts{Dials: 1, Closes: 0, Accepted: 1}, s.b.counts(s.gc)); diff != "" {
		t.Errorf("the naive pool must keep reusing the first client (-want +got):\n%s", diff)
	}
	if got := s.r.attempts.Load(); got != s.r.failures.Load() {
		t.Errorf("attempts %d, failures %d: an attempt succeeded on the poisoned client", got, s.r.failures.Load())
	}

	pending := s.r.wd.Pending()
	if len(pending) != 1 || pending[0].LastClass != errclass.Transport || pending[0].Attempts < naiveRetries || pending[0].Blocked {
		t.Fatalf("watchdog within the threshold: got %+v, want one unblocked deletion, >= %d attempts, last class Transport", pending, naiveRetries)
	}

	// The threshold passes on the watchdog's clock; the next retry blocks.
	s.clk.SetTime(s.worker.GetDeletionTimestamp().Add(seedThreshold + time.Second))
	waitFor(t, "the watchdog to report the deletion blocked", func() bool {
		p := s.r.wd.Pending()
		return len(p) == 1 && p[0].Blocked
	})
	cond := waitCondition(t, s, metav1.ConditionTrue)
	if cond.Reason != watchdog.ReasonCleanupBlocked {
		t.Errorf("condition reason %q, want %q", cond.Reason, watchdog.ReasonCleanupBlocked)
	}
	waitFor(t, "the Warning Event in the API", func() bool {
		var list eventsv1.EventList
		if err := s.c.List(ctx, &list, client.InNamespace(s.worker.GetNamespace())); err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.UID == s.worker.GetUID() && e.Reason == watchdog.ReasonCleanupBlocked && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
		return false
	})
	after := s.r.failures.Load()
	waitFor(t, "five more failed retries", func() bool { return s.r.failures.Load() >= after+5 })
	if diff := gocmp.Diff(map[string]int{"Warning " + watchdog.ReasonCleanupBlocked: 1}, s.events()); diff != "" {
		t.Errorf("Events: once per transition, not per retry (-want +got):\n%s", diff)
	}

	// Remove the fault (the incident's pod restart): the deletion finishes
	// and the watchdog announces the recovery.
	s.b.proxy.Thaw()
	if err := controlplane.WaitGone(ctx, s.c, s.worker, seedWait); err != nil {
		t.Fatal(err)
	}
	// The reconciler calls Done right after its Update removed the
	// finalizer, so possibly after the object is already gone.
	waitFor(t, "the watchdog to see the deletion done", func() bool { return len(s.r.wd.Pending()) == 0 })
	if diff := gocmp.Diff(map[string]int{"Warning " + watchdog.ReasonCleanupBlocked: 1, "Normal " + watchdog.ReasonCleanupRecovered: 1}, s.events()); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
}

// TestPoisonedClientDefaultPolicyFinishes: with finale's policy the first
// retry after the fault times out, classifies Transport and evicts; the
// next dials a fresh connection and the deletion finishes: two attempts,
// one failure, one new connection, nothing leaked.
func TestPoisonedClientDefaultPolicyFinishes(t *testing.T) {
	s := startSeed(t, "g1-seed-finale", seedConfig{policy: clientpool.DefaultPolicy})
	ctx := t.Context()

	if err := controlplane.WaitGone(ctx, s.c, s.worker, seedWait); err != nil {
		t.Fatalf("deletion did not finish: %v (attempts %d, failures %d, watchdog %+v)", err, s.r.attempts.Load(), s.r.failures.Load(), s.r.wd.Pending())
	}
	got := struct{ Attempts, Failures int64 }{s.r.attempts.Load(), s.r.failures.Load()}
	if diff := gocmp.Diff(struct{ Attempts, Failures int64 }{2, 1}, got); diff != "" {
		t.Errorf("cleanup attempts after the fault (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(counts{Dials: 2, Closes: 1, Accepted: 2}, s.b.counts(s.gc)); diff != "" {
		t.Errorf("one eviction, one fresh dial, the poisoned client closed (-want +got):\n%s", diff)
	}
	waitFor(t, "the watchdog to see the deletion done", func() bool { return len(s.r.wd.Pending()) == 0 })
	if got := s.events(); len(got) != 0 {
		t.Errorf("a deletion that finished within the threshold raised Events: %v", got)
	}
}

// waitCondition waits for the Worker's CleanupBlocked condition with status.
func waitCondition(t *testing.T, s *seedRun, status metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	err := controlplane.WaitFor(t.Context(), seedWait, "CleanupBlocked condition "+string(status), func(ctx context.Context) (bool, error) {
		cur := newWorker(s.worker.GetNamespace(), s.worker.GetName())
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			if apierrors.IsNotFound(err) {
				return false, errors.New("worker is gone")
			}
			return false, err
		}
		conds, _, err := unstructured.NestedSlice(cur.Object, "status", "conditions")
		if err != nil {
			return false, err
		}
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == watchdog.ConditionType && m["status"] == string(status) {
				return true, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &got)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestPoisonedClientShortReconcileTimeoutEvicts: the
// manager's ReconciliationTimeout (2s) is far shorter than the pool's
// CallTimeout (a minute), so every Reconcile's context ends before the
// pool's CallTimeout could. Before the fix the hung call failed with the
// caller's deadline, classified Canceled and never evicted: the deletion
// stayed stuck on the frozen connection, as in the seed. Now the pool's
// bound fires first (nine tenths of the caller's time), the hung client is
// evicted and closed, and the next reconcile dials afresh and finishes.
func TestPoisonedClientShortReconcileTimeoutEvicts(t *testing.T) {
	s := startSeed(t, "g1-seed-reconcile-timeout", seedConfig{
		policy:           clientpool.DefaultPolicy,
		callTimeout:      time.Minute,
		reconcileTimeout: 2 * time.Second,
	})
	ctx := t.Context()

	if err := controlplane.WaitGone(ctx, s.c, s.worker, seedWait); err != nil {
		t.Fatalf("deletion did not finish: %v (attempts %d, failures %d, %+v)", err, s.r.attempts.Load(), s.r.failures.Load(), s.b.counts(s.gc))
	}
	got := struct{ Attempts, Failures int64 }{s.r.attempts.Load(), s.r.failures.Load()}
	if diff := gocmp.Diff(struct{ Attempts, Failures int64 }{2, 1}, got); diff != "" {
		t.Errorf("cleanup attempts after the fault (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(counts{Dials: 2, Closes: 1, Accepted: 2}, s.b.counts(s.gc)); diff != "" {
		t.Errorf("one eviction, one fresh dial, the hung client closed (-want +got):\n%s", diff)
	}
}
