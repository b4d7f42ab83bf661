package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr/funcr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/fence"
	"github.com/finale-dev/finale/ledger"
)

// LeaderElectionID names the election's Lease, in the records namespace.
const LeaderElectionID = "postgres-operator.finale.dev"

// The election's defaults: controller-runtime's own.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrFlags is wrapped by Main's errors about its command line.
var ErrFlags = errors.New("operator: bad flags")

// Main runs the operator with the command line args (without the program
// name), logging to stderr, until ctx is done; with --leader-elect it also
// returns when this replica loses its lease (the error says so), so that
// its process exits.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// --kubeconfig is controller-runtime's: a file, else $KUBECONFIG,
	// else in-cluster, else ~/.kube.
	config.RegisterFlags(fs)
	var (
		recordsNS     = fs.String("records-namespace", "", "namespace of the cleanup records and the election Lease; empty means $"+ledger.NamespaceEnv)
		metricsAddr   = fs.String("metrics-bind-address", ":8080", "metrics address; 0 turns metrics off")
		probeAddr     = fs.String("health-probe-bind-address", ":8081", "health probe address; 0 turns probes off")
		leaderElect   = fs.Bool("leader-elect", false, "elect a leader through a Lease (run several replicas); the leader's PostgreSQL calls are fenced by its lease")
		leaseDuration = fs.Duration("leader-elect-lease-duration", DefaultLeaseDuration, "how long the others wait, after the leader's last renewal they saw, before taking the lease (whole seconds are recorded)")
		renewDeadline = fs.Duration("leader-elect-renew-deadline", DefaultRenewDeadline, "how long the leader retries renewing before it gives up leading and exits")
		retryPeriod   = fs.Duration("leader-elect-retry-period", DefaultRetryPeriod, "time between the candidates' attempts")
		fenceMargin   = fs.Duration("leader-elect-fence-margin", 0, "how long before the lease could pass the leader's PostgreSQL calls stop; 0 is a fifth of the lease duration")
		identity      = fs.String("leader-elect-identity", "", "this replica's identity in the election, unique per replica; empty is <host name>_<random UUID>")
		workers       = fs.Int("workers", 4, "concurrent reconciles per kind")
		naive         = fs.Bool("naive", false, "switch the guarantees off (no records, no hold, no eviction, no fence): for comparisons only")
		holdTimeout   = fs.Duration("hold-timeout", 0, "bound of a Server's deletion hold; 0 is the default (10m)")
		sweepSettle   = fs.Duration("sweep-settle", 0, "how long the sweeper leaves a record of a gone owner alone after its last create attempt; 0 is the default (5m)")
		sweepEvery    = fs.Duration("sweep-interval", 0, "time between sweep passes; 0 is the default (1m)")
		sweepSkew     = fs.Duration("sweep-clock-skew", 0, "clock difference tolerated between replicas, added to the settle window; 0 is the default (1m)")
		sweepSrvs     = fs.String("sweep-servers", "", "comma-separated namespace/name Servers the sweeper may use for any record they prove, besides those in the records namespace")
		keySecret     = fs.String("key-secret", "", "Secret in the records namespace holding the operator key (created on first start); empty is "+ledger.KeySecretName)
		verbosity     = fs.Int("v", 0, "log verbosity")
	)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrFlags, err)
	}
	fopts := fence.Options{LeaseDuration: *leaseDuration, Margin: *fenceMargin}
	if *leaderElect {
		if err := checkElection(*leaseDuration, *renewDeadline, *retryPeriod); err != nil {
			return err
		}
		if err := fopts.Validate(); err != nil {
			return fmt.Errorf("%w: --leader-elect-lease-duration, --leader-elect-fence-margin: %w", ErrFlags, err)
		}
	}
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(stderr, prefix, args) }, funcr.Options{Verbosity: *verbosity}))

	ns := *recordsNS
	if ns == "" {
		ns = os.Getenv(ledger.NamespaceEnv)
	}
	if ns == "" && (!*naive || *leaderElect) {
		return fmt.Errorf("no namespace for cleanup records and the election: set $%s (downward API metadata.namespace) or --records-namespace", ledger.NamespaceEnv)
	}
	extra, err := controller.ParseServers(*sweepSrvs)
	if err != nil {
		return fmt.Errorf("--sweep-servers: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	scheme := clientgoscheme.Scheme
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: ns,
		LeaseDuration:           leaseDuration,
		RenewDeadline:           renewDeadline,
		RetryPeriod:             retryPeriod,
	}
	var lock *fence.Lock
	if *leaderElect {
		lease, err := fence.NewLease(cfg, fence.LeaseOptions{Namespace: ns, Name: LeaderElectionID, Identity: *identity, RenewDeadline: *renewDeadline})
		if err != nil {
			return err
		}
		if lock, err = fence.New(lease, fopts); err != nil {
			return err
		}
		opts.LeaderElectionResourceLockInterface = lock
		ctrl.Log.Info("leader election", "identity", lock.Identity(), "lease", lock.Describe(), "fenceMargin", lock.Margin().String())
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	o := controller.Options{
		RecordsNamespace: ns, Naive: *naive, Workers: *workers, HoldTimeout: *holdTimeout,
		SweepSettle: *sweepSettle, SweepInterval: *sweepEvery, SweepClockSkew: *sweepSkew, SweepServers: extra, KeySecret: *keySecret,
	}
	if lock != nil && !*naive {
		o.Fence = lock
	}
	if _, err := controller.Setup(mgr, o); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// checkElection rejects timings client-go's elector would refuse at start
// (after the caches began to fill), with the flags' names.
func checkElection(lease, renew, retry time.Duration) error {
	switch {
	case retry <= 0 || renew <= 0 || lease <= 0:
		return fmt.Errorf("%w: --leader-elect-lease-duration, -renew-deadline and -retry-period must be positive", ErrFlags)
	case lease <= renew:
		return fmt.Errorf("%w: --leader-elect-lease-duration %v must be longer than --leader-elect-renew-deadline %v", ErrFlags, lease, renew)
	case float64(renew) <= 1.2*float64(retry):
		// client-go's JitterFactor: a retry may come 1.2 periods late.
		return fmt.Errorf("%w: --leader-elect-renew-deadline %v must be longer than 1.2 times --leader-elect-retry-period %v", ErrFlags, renew, retry)
	}
	return nil
}
