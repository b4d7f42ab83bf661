package controller

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/clientpool"
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
	// Skip switches single guarantees off (lifecycle.SkipLedger,
	// lifecycle.SkipHold), so that the benchmarks can tell what each one
	// costs; the pool is the guarantees' own. Naive overrides it. Only for
	// those comparisons.
	Skip lifecycle.Guarantee
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
	// SweepClockSkew is the clock difference tolerated between replicas,
	// added to the settle window; zero is sweep's default.
	SweepClockSkew time.Duration
	// SweepClaimGrace is how long the sweeper keeps a record that a Role
	// or Database claims without an admin's approval (a namespace deleted
	// and created again), from its first sight of the claim; then it
	// sweeps it. Zero is sweep.DefaultClaimGrace (24h).
	SweepClaimGrace time.Duration
	// SweepServers are Servers, besides those in the records namespace,
	// that the sweeper may use for any record whose deployment they prove
	// (an admin's choice; a record's own Server is always tried first).
	// The sweeper uses a Server only if its connection authenticates the
	// server (sslMode verify-full, or SweepTrustedHosts).
	SweepServers []types.NamespacedName
	// SweepTrustedHosts are host:port pairs (IPv6 in brackets; see
	// NewTrustedEndpoints) whose every path from the operator the
	// administrator vouches is authenticated outside PostgreSQL's TLS: a
	// sidecar proxy in the operator's pod that authenticates the server
	// itself, say. The sweeper uses Servers with exactly that host and
	// port whatever their sslMode. A host without a port is refused by
	// Setup: it would trust every port of the host. Empty: none.
	SweepTrustedHosts []string
	// KeySecret names the Secret in the records namespace holding the
	// operator key; "" is ledger.KeySecretName. Created on first start.
	KeySecret string
	// ConnectTimeout bounds each connection attempt, and is how long every
	// failed one takes (see PoolOptions); zero is DefaultConnectTimeout.
	ConnectTimeout time.Duration
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
	// RateLimiter spaces the retries of failed Role and Database
	// reconciles; nil is lifecycle.DefaultRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// ServerRateLimiter spaces the retries of a Server that cannot be
	// used; nil is ServerRateLimiter().
	ServerRateLimiter workqueue.TypedRateLimiter[reconcile.Request]
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
	// Fence, when set, bounds every PostgreSQL call by this replica's lease
	// (a *fence.Lock, with leader election): none starts, and none runs on,
	// once another replica may lead. Nil is unfenced (a single replica).
	Fence clientpool.Fence
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
	Pool      *Pool
	Ledger    *ledger.Ledger // nil when Naive
	Hold      *hold.Hold     // nil when Naive
	Sweeper   *sweep.Sweeper // nil when Naive
	Watchdog  *watchdog.Watchdog
	Roles     *lifecycle.Reconciler[*v1alpha1.Role, Key, *Conn]
	Databases *lifecycle.Reconciler[*v1alpha1.Database, Key, *Conn]
}

// Setup registers the Server, Role and Database controllers (and the hold
// on Servers and their Secrets, and the sweeper) with mgr. It reads the
// operator key (creating it on first start) from the records namespace,
// live, before the manager starts.
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
	trusted, err := NewTrustedEndpoints(o.SweepTrustedHosts)
	if err != nil {
		return nil, err
	}
	scheme := mgr.GetScheme()
	classifier := errclass.New(catalog.Classify, clientpool.ClassifyFenced)
	pool, err := NewPool(mgr.GetAPIReader(), PoolOptions{Name: o.PoolName, Naive: o.Naive, CallTimeout: o.CallTimeout, ConnectTimeout: o.ConnectTimeout, Classifier: classifier, Statements: o.Statements, Fence: o.Fence})
	if err != nil {
		return nil, err
	}
	srvs := servers{r: mgr.GetCache(), policy: policy, trusted: trusted}
	skip := o.Skip
	if o.Naive {
		// The naive build: the upstream pool, no record, no hold, no
		// watchdog. Only for the comparisons.
		skip = lifecycle.Unprotected
	}
	records := o.RecordsNamespace
	if records == "" {
		records = os.Getenv(ledger.NamespaceEnv)
	}
	setup := func(name string) lifecycle.SetupOptions {
		so := lifecycle.SetupOptions{Name: name, Workers: o.Workers, SkipNameValidation: o.SkipNameValidation, RateLimiter: o.RateLimiter}
		if o.WrapReconciler != nil {
			so.WrapReconciler = func(r reconcile.Reconciler) reconcile.Reconciler { return o.WrapReconciler(name, r) }
		}
		if o.WrapEventHandler != nil {
			so.WrapEventHandler = func(h handler.EventHandler) handler.EventHandler { return o.WrapEventHandler(name, h) }
		}
		return so
	}
	// A generated password Secret that is deleted or edited wakes its Role.
	// The watch is metadata-only: owner references are all it needs, and a
	// typed one would cache every Secret's data in the cluster.
	roleSetup := setup(ControllerRole)
	roleSetup.Extend = func(b *builder.Builder) *builder.Builder {
		// Watches with the owner handler rather than Owns, which a harness
		// that wraps the kind's own watch (no For) cannot use.
		return b.Watches(&corev1.Secret{}, handler.EnqueueRequestForOwner(scheme, mgr.GetRESTMapper(), &v1alpha1.Role{}, handler.OnlyControllerOwner()), builder.OnlyMetadata)
	}
	// One call wires both kinds on the Server: one pool, ledger, hold (on
	// the Server and its credential Secret, its access checked by a proof
	// through the pool on every pass), watchdog and sweeper.
	parts, err := lifecycle.Setup(context.Background(), mgr, lifecycle.Kind[*v1alpha1.Role, *v1alpha1.Server, Key, *Conn]{
		// Password Secrets are read live, never through the cache: a
		// cached read would make the manager hold every Secret's data.
		Adapter:    roleAdapter{servers: srvs, passwords: passwords{r: mgr.GetAPIReader(), live: mgr.GetAPIReader(), w: mgr.GetClient(), scheme: scheme}},
		Pool:       pool,
		ParentName: func(r *v1alpha1.Role) string { return r.Spec.ServerRef.Name },
		SecretName: func(s *v1alpha1.Server) string { return s.Spec.CredentialsSecretRef.Name },
		Options:    lifecycle.Options{Finalizer: Finalizer, RetryInterval: o.RetryInterval, Skip: skip},
		Controller: roleSetup,
		Clock:      o.Clock, RecordsNamespace: records, KeySecret: o.KeySecret, EventSource: "finale-postgres", WatchNamespaces: true,
		HoldOptions:  hold.Config{Timeout: o.HoldTimeout},
		SweepOptions: sweep.Options{Settle: o.SweepSettle, MaxClockSkew: o.SweepClockSkew, Interval: o.SweepInterval, ClaimGrace: o.SweepClaimGrace},
		Designated:   designated(mgr.GetClient(), records, o.SweepServers),
		// Zero for the naive build's unbounded calls: lifecycle's default.
		CreateLanding: CreateLanding(pool.CallTimeout()),
	}, lifecycle.Kind[*v1alpha1.Database, *v1alpha1.Server, Key, *Conn]{
		Adapter:    databaseAdapter{servers: srvs},
		ParentName: func(d *v1alpha1.Database) string { return d.Spec.ServerRef.Name },
		// Data safety: a Database without a policy is retained (the API
		// defaults it to Retain too).
		Options:    lifecycle.Options{Finalizer: Finalizer, RetryInterval: o.RetryInterval, Skip: skip, DefaultPolicy: lifecycle.PolicyRetain},
		Controller: setup(ControllerDatabase),
	})
	if err != nil {
		return nil, err
	}
	op := &Operator{Pool: pool, Ledger: parts.Ledger, Hold: parts.Hold, Sweeper: parts.Sweeper, Watchdog: parts.Watchdog}
	op.Roles, _ = parts.Reconcilers["Role"].(*lifecycle.Reconciler[*v1alpha1.Role, Key, *Conn])
	op.Databases, _ = parts.Reconcilers["Database"].(*lifecycle.Reconciler[*v1alpha1.Database, Key, *Conn])
	recorder := parts.Recorder
	sr := &ServerReconciler{c: mgr.GetClient(), servers: srvs, pool: pool, recorder: recorder, clock: o.Clock, classifier: classifier}
	if o.ServerRateLimiter == nil {
		o.ServerRateLimiter = ServerRateLimiter()
	}
	b := ctrl.NewControllerManagedBy(mgr).Named(ControllerServer).WithOptions(controller.Options{
		MaxConcurrentReconciles: o.Workers, SkipNameValidation: &o.SkipNameValidation, RateLimiter: o.ServerRateLimiter})
	if o.WrapEventHandler == nil {
		b = b.For(&v1alpha1.Server{})
	} else {
		b = b.Watches(&v1alpha1.Server{}, o.WrapEventHandler(ControllerServer, &handler.EnqueueRequestForObject{}))
	}
	var rec reconcile.Reconciler = sr
	if o.WrapReconciler != nil {
		rec = o.WrapReconciler(ControllerServer, rec)
	}
	if err := b.Complete(rec); err != nil {
		return nil, fmt.Errorf("server controller: %w", err)
	}
	return op, nil
}
