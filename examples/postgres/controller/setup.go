package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

// Finalizer is the cleanup finalizer of Roles and Databases.
const Finalizer = "postgres.finale.dev/cleanup"

// Options configure the operator.
type Options struct {
	// RecordsNamespace holds the cleanup records; "" is $POD_NAMESPACE.
	RecordsNamespace string
	// Naive switches the guarantees off: no cleanup records, no hold, a pool
	// that never evicts. Only for the comparisons of the benchmarks and
	// the fault scenarios.
	Naive bool
	// Clock is injected everywhere time decides; nil is the real clock.
	Clock clock.Clock
	// HoldTimeout bounds a Server's hold; zero is hold.DefaultTimeout.
	HoldTimeout time.Duration
	// RetryInterval is how soon a Role or Database that needs the user is
	// looked at again; zero is lifecycle.DefaultRetryInterval.
	RetryInterval time.Duration
	// SweepSettle and SweepInterval tune the sweeper of records whose owner
	// went without its delete (the hold ended first); zero is sweep's
	// default.
	SweepSettle, SweepInterval time.Duration
	// CallTimeout bounds each PostgreSQL call; a call over it is a Transport
	// error and evicts its connection. Zero is 30s; ignored when Naive.
	CallTimeout time.Duration
	// Workers per kind; zero is 4.
	Workers int
	// AllowedServers is the admin's allow-list of where Servers may point
	// (see NewServerPolicy: host names, *.wildcards, IPs, CIDR prefixes); a
	// Server elsewhere is refused (ServerNotAllowed) and never dialled.
	// Empty allows every host.
	AllowedServers []string
	// PoolName labels the pool's metrics; "" is "postgres".
	PoolName string
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
	// Statements, when set, hears of every PostgreSQL statement (see
	// PoolOptions.Statements); for the fault campaigns.
	Statements func(ctx context.Context, sql string, err error)
	// WrapReconciler, when set, wraps each controller's reconciler
	// (controller is ControllerRole, ControllerDatabase or
	// ControllerServer), so that a harness can pause one controller's
	// workers while the others run. It must return a non-nil reconciler.
	WrapReconciler func(controller string, r reconcile.Reconciler) reconcile.Reconciler
	// WrapEventHandler, when set, wraps the event handler of each
	// controller's primary watch (its own kind), so that a harness can
	// delay or drop the events one controller sees. It must return a
	// non-nil handler.
	WrapEventHandler func(controller string, h handler.EventHandler) handler.EventHandler
}

// The controllers' names, as WrapReconciler sees them.
const (
	ControllerRole     = "postgres-role"
	ControllerDatabase = "postgres-database"
	ControllerServer   = "postgres-server"
)

// Operator is what Setup wired, for tests and the demo.
type Operator struct {
	Pool     *Pool
	Ledger   *ledger.Ledger // nil when Naive
	Hold     *hold.Hold     // nil when Naive
	Sweeper  *sweep.Sweeper // nil when Naive
	Watchdog *watchdog.Watchdog
}

// Setup registers the Server, Role and Database controllers (and the hold
// on Servers and their Secrets) with mgr.
func Setup(mgr ctrl.Manager, o Options) (*Operator, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.PoolName == "" {
		o.PoolName = "postgres"
	}
	policy, err := NewServerPolicy(o.AllowedServers)
	if err != nil {
		return nil, err
	}
	scheme := mgr.GetScheme()
	classifier := errclass.New(catalog.Classify)
	pool, err := NewPool(mgr.GetAPIReader(), PoolOptions{Name: o.PoolName, Naive: o.Naive, CallTimeout: o.CallTimeout, Classifier: classifier, Statements: o.Statements})
	if err != nil {
		return nil, err
	}
	op := &Operator{Pool: pool}
	srvs := servers{r: mgr.GetCache(), policy: policy}
	recorder := mgr.GetEventRecorder("finale-postgres")
	op.Watchdog = watchdog.New(watchdog.Options{
		Clock: o.Clock, Recorder: recorder, Classifier: classifier, Scheme: scheme,
		Conditions: watchdog.StatusConditions{Reader: mgr.GetAPIReader(), Status: mgr.GetClient()},
	})
	if err := mgr.Add(op.Watchdog.Runnable(watchdog.DefaultCheckInterval, mgr.GetAPIReader())); err != nil {
		return nil, err
	}
	if !o.Naive {
		store, err := ledger.NewConfigMapStore(struct {
			client.Reader
			client.Writer
		}{mgr.GetAPIReader(), mgr.GetClient()}, o.RecordsNamespace)
		if err != nil {
			return nil, err
		}
		op.Ledger = ledger.New(store, ledger.Options{Clock: o.Clock, Classifier: classifier})
		if op.Hold, err = newHold(scheme, srvs, pool, o, recorder, classifier); err != nil {
			return nil, err
		}
		if err := op.Hold.SetupWithManager(mgr); err != nil {
			return nil, err
		}
		op.Sweeper, err = sweep.New(sweep.Options{
			Store: store, Owners: mgr.GetClient(), Targets: sweep.TargetsFn(sweepTargets(mgr.GetClient(), srvs, pool)),
			Recorder: recorder, Clock: o.Clock, Settle: o.SweepSettle, Interval: o.SweepInterval, Classifier: classifier,
		})
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(op.Sweeper); err != nil {
			return nil, err
		}
	}
	copts := controller.Options{MaxConcurrentReconciles: o.Workers}
	if o.SkipNameValidation {
		copts.SkipNameValidation = &o.SkipNameValidation
	}
	lopts := func(p lifecycle.DeletionPolicy) lifecycle.Options {
		return lifecycle.Options{
			Finalizer: Finalizer, Scheme: scheme, Ledger: op.Ledger, Hold: op.Hold, Watchdog: op.Watchdog,
			Recorder: recorder, Classifier: classifier, Clock: o.Clock, DefaultPolicy: p, RetryInterval: o.RetryInterval,
			APIReader: mgr.GetAPIReader(),
		}
	}
	roles, err := lifecycle.New(mgr.GetClient(), func() *v1alpha1.Role { return &v1alpha1.Role{} },
		roleAdapter{servers: srvs, passwords: passwords{r: mgr.GetAPIReader(), w: mgr.GetClient(), scheme: scheme}}, pool, lopts(lifecycle.PolicyDelete))
	if err != nil {
		return nil, err
	}
	// Data safety: a Database without a policy is retained (the API
	// defaults it to Retain too).
	dbs, err := lifecycle.New(mgr.GetClient(), func() *v1alpha1.Database { return &v1alpha1.Database{} },
		databaseAdapter{servers: srvs}, pool, lopts(lifecycle.PolicyRetain))
	if err != nil {
		return nil, err
	}
	wrap := func(name string, r reconcile.Reconciler) reconcile.Reconciler {
		if o.WrapReconciler == nil {
			return r
		}
		return o.WrapReconciler(name, r)
	}
	// primary watches a controller's own kind: For, unless the events are
	// to be wrapped, then the same handler For would use, wrapped.
	primary := func(name string, obj client.Object) *builder.Builder {
		b := ctrl.NewControllerManagedBy(mgr).Named(name).WithOptions(copts)
		if o.WrapEventHandler == nil {
			return b.For(obj)
		}
		return b.Watches(obj, o.WrapEventHandler(name, &handler.EnqueueRequestForObject{}))
	}
	wake := func(list func() client.ObjectList, refs func(client.ObjectList) []types.NamespacedName) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if op.Hold == nil {
				return nil
			}
			l := list()
			if err := mgr.GetClient().List(ctx, l, client.InNamespace(o.GetNamespace()), client.MatchingFields{hold.ParentIndex: o.GetName()}); err != nil {
				return nil
			}
			var out []reconcile.Request
			for _, n := range refs(l) {
				out = append(out, reconcile.Request{NamespacedName: n})
			}
			return out
		})
	}
	err = primary(ControllerRole, &v1alpha1.Role{}).
		Watches(&v1alpha1.Server{}, wake(func() client.ObjectList { return &v1alpha1.RoleList{} }, func(l client.ObjectList) (out []types.NamespacedName) {
			for _, r := range l.(*v1alpha1.RoleList).Items {
				out = append(out, client.ObjectKeyFromObject(&r))
			}
			return out
		})).Complete(wrap(ControllerRole, roles))
	if err != nil {
		return nil, fmt.Errorf("role controller: %w", err)
	}
	err = primary(ControllerDatabase, &v1alpha1.Database{}).
		Watches(&v1alpha1.Server{}, wake(func() client.ObjectList { return &v1alpha1.DatabaseList{} }, func(l client.ObjectList) (out []types.NamespacedName) {
			for _, d := range l.(*v1alpha1.DatabaseList).Items {
				out = append(out, client.ObjectKeyFromObject(&d))
			}
			return out
		})).Complete(wrap(ControllerDatabase, dbs))
	if err != nil {
		return nil, fmt.Errorf("database controller: %w", err)
	}
	sr := &ServerReconciler{c: mgr.GetClient(), servers: srvs, pool: pool, recorder: recorder, clock: o.Clock, classifier: classifier}
	if err := primary(ControllerServer, &v1alpha1.Server{}).Complete(wrap(ControllerServer, sr)); err != nil {
		return nil, fmt.Errorf("server controller: %w", err)
	}
	return op, nil
}

func newHold(scheme *runtime.Scheme, srvs servers, pool *Pool, o Options, rec lifecycle.Recorder, classifier *errclass.Classifier) (*hold.Hold, error) {
	return hold.New(hold.Config{
		Parent: &v1alpha1.Server{}, Scheme: scheme, Clock: o.Clock, Timeout: o.HoldTimeout, Recorder: rec, Classifier: classifier,
		SecretName: func(p client.Object) string { return p.(*v1alpha1.Server).Spec.CredentialsSecretRef.Name },
		Dependents: []hold.Dependent{
			{Object: &v1alpha1.Role{}, CleanupFinalizer: Finalizer, ParentName: func(o client.Object) string { return o.(*v1alpha1.Role).Spec.ServerRef.Name }},
			{Object: &v1alpha1.Database{}, CleanupFinalizer: Finalizer, ParentName: func(o client.Object) string { return o.(*v1alpha1.Database).Spec.ServerRef.Name }},
		},
		// Follow-up 1 of the seed: keep repairing access during the hold, so
		// a Secret fixed late still lets the dependents delete.
		Access: hold.AccessFn(func(ctx context.Context, p client.Object) (bool, error) {
			key, err := srvs.key(ctx, p.(*v1alpha1.Server))
			if err == nil {
				err = pool.Do(ctx, key, func(ctx context.Context, c *Conn) error { return c.Ping(ctx) })
			}
			return err == nil, err
		}),
	})
}
