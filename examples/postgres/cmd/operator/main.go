// Command operator runs the reference PostgreSQL operator (Server, Role,
// Database) against any cluster: --kubeconfig, or the in-cluster config.
// Cleanup records go to $POD_NAMESPACE (or --records-namespace).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr/funcr"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/ledger"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		recordsNS   = flag.String("records-namespace", "", "namespace of the cleanup records; empty means $"+ledger.NamespaceEnv)
		metricsAddr = flag.String("metrics-bind-address", ":8080", "metrics address; 0 turns metrics off")
		probeAddr   = flag.String("health-probe-bind-address", ":8081", "health probe address; 0 turns probes off")
		leaderElect = flag.Bool("leader-elect", false, "elect a leader (run several replicas)")
		workers     = flag.Int("workers", 4, "concurrent reconciles per kind")
		naive       = flag.Bool("naive", false, "switch the guarantees off (no records, no hold, no eviction): for comparisons only")
		holdTimeout = flag.Duration("hold-timeout", 0, "bound of a Server's deletion hold; 0 is the default (10m)")
		sweepSettle = flag.Duration("sweep-settle", 0, "how long the sweeper leaves a record of a gone owner alone after its last create attempt; 0 is the default (5m)")
		sweepEvery  = flag.Duration("sweep-interval", 0, "time between sweep passes; 0 is the default (1m)")
		sweepSkew   = flag.Duration("sweep-clock-skew", 0, "clock difference tolerated between replicas, added to the settle window; 0 is the default (1m)")
		sweepSrvs   = flag.String("sweep-servers", "", "comma-separated namespace/name Servers the sweeper may use for any record they prove, besides those in the records namespace")
		keySecret   = flag.String("key-secret", "", "Secret in the records namespace holding the operator key (created on first start); empty is "+ledger.KeySecretName)
		verbosity   = flag.Int("v", 0, "log verbosity")
	)
	flag.Parse()
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: *verbosity}))

	ns := *recordsNS
	if ns == "" {
		ns = os.Getenv(ledger.NamespaceEnv)
	}
	if ns == "" && !*naive {
		return fmt.Errorf("no namespace for cleanup records: set $%s (downward API metadata.namespace) or --records-namespace", ledger.NamespaceEnv)
	}
	extra, err := controller.ParseServers(*sweepSrvs)
	if err != nil {
		return fmt.Errorf("--sweep-servers: %w", err)
	}
	// --kubeconfig is controller-runtime's flag (registered by its config
	// package): a file, else $KUBECONFIG, else in-cluster, else ~/.kube.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	scheme := clientgoscheme.Scheme
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "postgres-operator.finale.dev",
		LeaderElectionNamespace: ns,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if _, err := controller.Setup(mgr, controller.Options{
		RecordsNamespace: ns, Naive: *naive, Workers: *workers, HoldTimeout: *holdTimeout,
		SweepSettle: *sweepSettle, SweepInterval: *sweepEvery, SweepClockSkew: *sweepSkew, SweepServers: extra, KeySecret: *keySecret,
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
