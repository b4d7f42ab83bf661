// Command operator runs the reference PostgreSQL operator (Server, Role,
// Database) against any cluster: --kubeconfig, or the in-cluster config.
// Cleanup records go to $POD_NAMESPACE (or --records-namespace).
//
// Metrics are served as kubebuilder's scaffold serves them: over HTTPS
// (a self-signed certificate unless --metrics-cert-path names one), and
// only to clients whose bearer token the API server authenticates
// (TokenReview) and authorizes for GET /metrics (SubjectAccessReview):
// config/rbac's finale-postgres-metrics-reader ClusterRole is what a
// Prometheus scraper is bound to.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/ledger"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

// settings are the command's flags.
type settings struct {
	recordsNS       string
	metricsAddr     string
	secureMetrics   bool
	metricsCertPath string
	metricsCertName string
	metricsCertKey  string
	enableHTTP2     bool
	probeAddr       string
	leaderElect     bool
	workers         int
	naive           bool
	holdTimeout     time.Duration
	sweepSettle     time.Duration
	sweepEvery      time.Duration
	sweepSkew       time.Duration
	sweepServers    []types.NamespacedName
	keySecret       string
	allowedServers  []string
	verbosity       int

	// metricsCertWatcher is set by managerOptions when --metrics-cert-path
	// names a certificate.
	metricsCertWatcher *certwatcher.CertWatcher
}

// newFlags defines the command's flags on a fresh set (and shares
// controller-runtime's --kubeconfig, which ctrl.GetConfig reads).
func newFlags() (*flag.FlagSet, *settings) {
	s := &settings{}
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.StringVar(&s.recordsNS, "records-namespace", "", "namespace of the cleanup records; empty means $"+ledger.NamespaceEnv)
	fs.StringVar(&s.metricsAddr, "metrics-bind-address", "0", "metrics address (for example :8443); 0 turns metrics off")
	fs.BoolVar(&s.secureMetrics, "metrics-secure", true, "serve metrics over HTTPS to authenticated and authorized clients only; false serves plain HTTP to anyone who reaches the port")
	fs.StringVar(&s.metricsCertPath, "metrics-cert-path", "", "directory of the metrics server's certificate; empty generates a self-signed one")
	fs.StringVar(&s.metricsCertName, "metrics-cert-name", "tls.crt", "certificate file in --metrics-cert-path")
	fs.StringVar(&s.metricsCertKey, "metrics-cert-key", "tls.key", "key file in --metrics-cert-path")
	fs.BoolVar(&s.enableHTTP2, "enable-http2", false, "allow HTTP/2 on the metrics server (off: HTTP/2 rapid reset, CVE-2023-44487 and CVE-2023-39325)")
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081", "health probe address; 0 turns probes off")
	fs.BoolVar(&s.leaderElect, "leader-elect", false, "elect a leader (run several replicas)")
	fs.IntVar(&s.workers, "workers", 4, "concurrent reconciles per kind")
	fs.BoolVar(&s.naive, "naive", false, "switch the guarantees off (no records, no hold, no eviction): for comparisons only")
	fs.DurationVar(&s.holdTimeout, "hold-timeout", 0, "bound of a Server's deletion hold; 0 is the default (10m)")
	fs.DurationVar(&s.sweepSettle, "sweep-settle", 0, "how long the sweeper leaves a record of a gone owner alone after its last create attempt; 0 is the default (5m)")
	fs.DurationVar(&s.sweepEvery, "sweep-interval", 0, "time between sweep passes; 0 is the default (1m)")
	fs.DurationVar(&s.sweepSkew, "sweep-clock-skew", 0, "clock difference tolerated between replicas, added to the settle window; 0 is the default (1m)")
	fs.Func("sweep-servers", "comma-separated namespace/name Servers the sweeper may use for any record they prove, besides those in the records namespace", func(v string) error {
		extra, err := controller.ParseServers(v)
		s.sweepServers = append(s.sweepServers, extra...)
		return err
	})
	fs.StringVar(&s.keySecret, "key-secret", "", "Secret in the records namespace holding the operator key (created on first start); empty is "+ledger.KeySecretName)
	fs.Func("allowed-servers", "comma-separated hosts Servers may point at: DNS names, *.wildcards, IPs and CIDR prefixes (for example db.example.com,*.pg.internal,10.20.0.0/16); repeatable; unset allows any host", func(v string) error {
		s.allowedServers = append(s.allowedServers, strings.Split(v, ",")...)
		return nil
	})
	fs.IntVar(&s.verbosity, "v", 0, "log verbosity")
	if kc := flag.CommandLine.Lookup("kubeconfig"); kc != nil {
		fs.Var(kc.Value, kc.Name, kc.Usage)
	}
	return fs, s
}

// parse reads args into settings and resolves the records namespace.
func parse(args []string) (*settings, error) {
	fs, s := newFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if s.recordsNS == "" {
		s.recordsNS = os.Getenv(ledger.NamespaceEnv)
	}
	if s.recordsNS == "" && !s.naive {
		return nil, fmt.Errorf("no namespace for cleanup records: set $%s (downward API metadata.namespace) or --records-namespace", ledger.NamespaceEnv)
	}
	return s, nil
}

func run(args []string) error {
	s, err := parse(args)
	if err != nil {
		return err
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: s.verbosity})
	ctrl.SetLogger(log)
	// --kubeconfig is controller-runtime's flag (registered by its config
	// package): a file, else $KUBECONFIG, else in-cluster, else ~/.kube.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	opts, err := s.managerOptions(log)
	if err != nil {
		return err
	}
	mgr, err := s.newManager(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// managerOptions are the manager's options: the metrics server (secure by
// default), probes, leader election, and the cache and client settings
// that keep Secrets' data out of the cache (controller.CacheOptions,
// controller.ClientOptions).
func (s *settings) managerOptions(log logr.Logger) (ctrl.Options, error) {
	scheme := clientgoscheme.Scheme
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	var tlsOpts []func(*tls.Config)
	if !s.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metrics := metricsserver.Options{BindAddress: s.metricsAddr, SecureServing: s.secureMetrics, TLSOpts: tlsOpts}
	if s.secureMetrics {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	} else if s.metricsAddr != "0" {
		log.Info("metrics are served over plain HTTP without authentication (--metrics-secure=false): anyone who reaches the port reads them")
	}
	var watcher *certwatcher.CertWatcher
	if s.metricsCertPath != "" {
		if !s.secureMetrics {
			return ctrl.Options{}, errors.New("--metrics-cert-path needs --metrics-secure")
		}
		var err error
		watcher, err = certwatcher.New(filepath.Join(s.metricsCertPath, s.metricsCertName), filepath.Join(s.metricsCertPath, s.metricsCertKey))
		if err != nil {
			return ctrl.Options{}, fmt.Errorf("metrics certificate: %w", err)
		}
		metrics.TLSOpts = append(metrics.TLSOpts, func(c *tls.Config) { c.GetCertificate = watcher.GetCertificate })
	}
	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metrics,
		HealthProbeBindAddress:  s.probeAddr,
		LeaderElection:          s.leaderElect,
		LeaderElectionID:        "postgres-operator.finale.dev",
		LeaderElectionNamespace: s.recordsNS,
		Cache:                   controller.CacheOptions(),
		Client:                  controller.ClientOptions(),
	}
	// Started by the manager (newManager adds it), so a rotated
	// certificate is picked up without a restart.
	s.metricsCertWatcher = watcher
	return opts, nil
}

// newManager builds the manager with opts and sets the operator up in it.
func (s *settings) newManager(cfg *rest.Config, opts ctrl.Options) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if s.metricsCertWatcher != nil {
		if err := mgr.Add(s.metricsCertWatcher); err != nil {
			return nil, err
		}
	}
	if _, err := controller.Setup(mgr, controller.Options{
		RecordsNamespace: s.recordsNS, Naive: s.naive, Workers: s.workers, HoldTimeout: s.holdTimeout,
		SweepSettle: s.sweepSettle, SweepInterval: s.sweepEvery, SweepClockSkew: s.sweepSkew, SweepServers: s.sweepServers, KeySecret: s.keySecret,
		AllowedServers: s.allowedServers,
	}); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
