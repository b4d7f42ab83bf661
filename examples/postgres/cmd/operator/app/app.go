package app

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/fence"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// LeaderElectionID names the election's Lease, in the records namespace.
const LeaderElectionID = "postgres-operator.finale.dev"

// The election's defaults: controller-runtime's own.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrFlags is wrapped by the errors about the command line.
var ErrFlags = errors.New("operator: bad flags")

// Settings are the command's flags.
type Settings struct {
	recordsNS       string
	metricsAddr     string
	secureMetrics   bool
	metricsCertPath string
	metricsCertName string
	metricsCertKey  string
	enableHTTP2     bool
	probeAddr       string
	leaderElect     bool
	leaseDuration   time.Duration
	renewDeadline   time.Duration
	retryPeriod     time.Duration
	fenceMargin     time.Duration
	identity        string
	watchNamespaces []string
	workers         int
	naive           bool
	skip            lifecycle.Guarantee
	holdTimeout     time.Duration
	callTimeout     time.Duration
	connectTimeout  time.Duration
	cacheKubeconfig string
	sweepSettle     time.Duration
	sweepEvery      time.Duration
	sweepSkew       time.Duration
	sweepClaimGrace time.Duration
	sweepServers    []types.NamespacedName
	sweepTrusted    []string
	keySecret       string
	allowedServers  []string
	verbosity       int

	// metricsCertWatcher is set by ManagerOptions when --metrics-cert-path
	// names a certificate.
	metricsCertWatcher *certwatcher.CertWatcher
	// lock is the election's fenced Lease lock, set by ManagerOptions with
	// --leader-elect.
	lock *fence.Lock
}

// NewFlags defines the command's flags on a fresh set (and shares
// controller-runtime's --kubeconfig, which ctrl.GetConfig reads).
func NewFlags() (*flag.FlagSet, *Settings) {
	s := &Settings{}
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.StringVar(&s.recordsNS, "records-namespace", "", "namespace of the cleanup records and the election Lease; empty means $"+ledger.NamespaceEnv)
	fs.StringVar(&s.metricsAddr, "metrics-bind-address", "0", "metrics address (for example :8443); 0 turns metrics off")
	fs.BoolVar(&s.secureMetrics, "metrics-secure", true, "serve metrics over HTTPS to authenticated and authorized clients only; false serves plain HTTP to anyone who reaches the port")
	fs.StringVar(&s.metricsCertPath, "metrics-cert-path", "", "directory of the metrics server's certificate; empty generates a self-signed one")
	fs.StringVar(&s.metricsCertName, "metrics-cert-name", "tls.crt", "certificate file in --metrics-cert-path")
	fs.StringVar(&s.metricsCertKey, "metrics-cert-key", "tls.key", "key file in --metrics-cert-path")
	fs.BoolVar(&s.enableHTTP2, "enable-http2", false, "allow HTTP/2 on the metrics server (off: HTTP/2 rapid reset, CVE-2023-44487 and CVE-2023-39325)")
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081", "health probe address; 0 turns probes off")
	fs.BoolVar(&s.leaderElect, "leader-elect", false, "elect a leader through a Lease (run several replicas); the leader's PostgreSQL calls are fenced by its lease")
	fs.DurationVar(&s.leaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration, "how long the others wait, after the leader's last renewal they saw, before taking the lease (whole seconds are recorded)")
	fs.DurationVar(&s.renewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline, "how long the leader retries renewing before it gives up leading and exits")
	fs.DurationVar(&s.retryPeriod, "leader-elect-retry-period", DefaultRetryPeriod, "time between the candidates' attempts")
	fs.DurationVar(&s.fenceMargin, "leader-elect-fence-margin", 0, "how long before the lease could pass the leader's PostgreSQL calls stop; 0 is a fifth of the lease duration")
	fs.StringVar(&s.identity, "leader-elect-identity", "", "this replica's identity in the election, unique per replica; empty is <host name>_<random UUID>")
	fs.Func("watch-namespaces", "comma-separated namespaces whose Servers, Roles and Databases this operator manages, besides the records namespace; repeatable; unset is every namespace", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
				return fmt.Errorf("%q: %s", n, strings.Join(errs, "; "))
			}
			s.watchNamespaces = append(s.watchNamespaces, n)
		}
		return nil
	})
	fs.IntVar(&s.workers, "workers", 4, "concurrent reconciles per kind")
	fs.BoolVar(&s.naive, "naive", false, "switch the guarantees off (no records, no hold, no eviction, no fence): for comparisons only")
	fs.Func("skip", "comma-separated guarantees to switch off alone, records or hold (the pool and the fence stay): for comparisons only, so that a benchmark can tell what each costs", func(v string) error {
		for _, g := range strings.Split(v, ",") {
			switch strings.TrimSpace(g) {
			case "records":
				s.skip |= lifecycle.SkipLedger
			case "hold":
				s.skip |= lifecycle.SkipHold
			default:
				return fmt.Errorf("%q is not a guarantee --skip switches off: records or hold", g)
			}
		}
		return nil
	})
	fs.DurationVar(&s.holdTimeout, "hold-timeout", 0, "bound of a Server's deletion hold; 0 is the default (10m)")
	fs.DurationVar(&s.callTimeout, "call-timeout", 0, "bound of each PostgreSQL call; a call over it evicts its connection; 0 is the default (30s)")
	fs.DurationVar(&s.connectTimeout, "connect-timeout", 0, "bound of each connection attempt to PostgreSQL; 0 is the default")
	fs.StringVar(&s.cacheKubeconfig, "cache-kubeconfig", "", "a kubeconfig the manager's cache lists and watches through (another apiserver of the same cluster); empty is --kubeconfig's. Writes and live reads always use --kubeconfig")
	fs.DurationVar(&s.sweepSettle, "sweep-settle", 0, "how long the sweeper leaves a record of a gone owner alone after its last create attempt; 0 is the default (5m)")
	fs.DurationVar(&s.sweepEvery, "sweep-interval", 0, "time between sweep passes; 0 is the default (1m)")
	fs.DurationVar(&s.sweepSkew, "sweep-clock-skew", 0, "clock difference tolerated between replicas, added to the settle window; 0 is the default (1m)")
	fs.DurationVar(&s.sweepClaimGrace, "sweep-claim-grace", 0, "how long the sweeper keeps a record claimed without an admin's approval (a namespace created again), from its first sight of the claim, before it sweeps it; 0 is the default (24h)")
	fs.Func("sweep-servers", "comma-separated namespace/name Servers the sweeper may use for any record they prove, besides those in the records namespace; only those with sslMode verify-full (or on a --sweep-trusted-hosts host and port) are used", func(v string) error {
		extra, err := controller.ParseServers(v)
		s.sweepServers = append(s.sweepServers, extra...)
		return err
	})
	fs.StringVar(&s.keySecret, "key-secret", "", "Secret in the records namespace holding the operator key (created on first start); empty is "+ledger.KeySecretName)
	fs.Func("allowed-servers", "comma-separated hosts Servers may point at: DNS names, *.wildcards, IPs and CIDR prefixes (for example db.example.com,*.pg.internal,10.20.0.0/16); repeatable; unset allows any host", func(v string) error {
		s.allowedServers = append(s.allowedServers, strings.Split(v, ",")...)
		return nil
	})
	fs.Func("sweep-trusted-hosts", "comma-separated host:port pairs (IPv6 in brackets: [::1]:5432) whose every path from the operator you vouch is authenticated outside PostgreSQL's TLS, such as a sidecar proxy in the operator's pod that authenticates the server; the sweeper acts through Servers with exactly that host and port whatever their sslMode; a host without a port is an error (it would trust every port of the host); repeatable; unset is none", func(v string) error {
		entries := strings.Split(v, ",")
		if _, err := controller.NewTrustedEndpoints(entries); err != nil {
			return err
		}
		s.sweepTrusted = append(s.sweepTrusted, entries...)
		return nil
	})
	fs.IntVar(&s.verbosity, "v", 0, "log verbosity")
	if kc := flag.CommandLine.Lookup("kubeconfig"); kc != nil {
		fs.Var(kc.Value, kc.Name, kc.Usage)
	}
	return fs, s
}

// Parse reads args into Settings, resolves the records namespace and
// checks the election's timing, before anything touches the cluster.
func Parse(args []string) (*Settings, error) {
	fs, s := NewFlags()
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFlags, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", ErrFlags, fs.Args())
	}
	if s.recordsNS == "" {
		s.recordsNS = os.Getenv(ledger.NamespaceEnv)
	}
	if s.callTimeout < 0 || s.connectTimeout < 0 {
		return nil, fmt.Errorf("%w: --call-timeout and --connect-timeout must not be negative", ErrFlags)
	}
	if s.recordsNS == "" && (!s.naive || s.leaderElect) {
		return nil, fmt.Errorf("no namespace for cleanup records and the election: set $%s (downward API metadata.namespace) or --records-namespace", ledger.NamespaceEnv)
	}
	if s.leaderElect {
		if err := checkElection(s.leaseDuration, s.renewDeadline, s.retryPeriod); err != nil {
			return nil, err
		}
		if err := s.fenceOptions().Validate(); err != nil {
			return nil, fmt.Errorf("%w: --leader-elect-lease-duration, --leader-elect-fence-margin: %w", ErrFlags, err)
		}
	}
	return s, nil
}

// Main runs the operator with the command line args (without the program
// name), logging to stderr, until ctx is done; with --leader-elect it also
// returns when this replica loses its lease (the error says so), so that
// its process exits.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := Parse(args)
	if err != nil {
		return err
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(stderr, prefix, args) }, funcr.Options{Verbosity: s.verbosity})
	ctrl.SetLogger(log)
	// --kubeconfig is controller-runtime's flag (registered by its config
	// package): a file, else $KUBECONFIG, else in-cluster, else ~/.kube.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	opts, err := s.ManagerOptions(log)
	if err != nil {
		return err
	}
	if s.leaderElect {
		if err := s.fence(cfg, &opts, log); err != nil {
			return err
		}
	}
	mgr, err := s.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// ManagerOptions are the manager's options: the metrics server (secure by
// default), probes, leader election, and the cache and client settings
// that keep Secrets' data out of the cache (controller.CacheOptions,
// controller.ClientOptions), limited to --watch-namespaces when given.
func (s *Settings) ManagerOptions(log logr.Logger) (ctrl.Options, error) {
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
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: s.recordsNS,
		LeaseDuration:           &s.leaseDuration,
		RenewDeadline:           &s.renewDeadline,
		RetryPeriod:             &s.retryPeriod,
		Cache:                   controller.CacheOptions(),
		Client:                  controller.ClientOptions(),
	}
	if s.cacheKubeconfig != "" {
		cacheCfg, err := clientcmd.BuildConfigFromFlags("", s.cacheKubeconfig)
		if err != nil {
			return ctrl.Options{}, fmt.Errorf("--cache-kubeconfig: %w", err)
		}
		opts.NewCache = func(_ *rest.Config, co cache.Options) (cache.Cache, error) {
			co.HTTPClient = nil // its own, for the other apiserver
			return cache.New(cacheCfg, co)
		}
	}
	if len(s.watchNamespaces) > 0 {
		// The records namespace is always watched: the hold and the
		// sweeper read it.
		opts.Cache.DefaultNamespaces = map[string]cache.Config{s.recordsNS: {}}
		for _, n := range s.watchNamespaces {
			opts.Cache.DefaultNamespaces[n] = cache.Config{}
		}
	}
	// Started by the manager (NewManager adds it), so a rotated
	// certificate is picked up without a restart.
	s.metricsCertWatcher = watcher
	return opts, nil
}

// fence makes the election's Lease lock, wrapped by fence.New, the
// manager's lock and (unless --naive) the operator's pool's fence.
func (s *Settings) fence(cfg *rest.Config, opts *ctrl.Options, log logr.Logger) error {
	lease, err := fence.NewLease(cfg, fence.LeaseOptions{Namespace: s.recordsNS, Name: LeaderElectionID, Identity: s.identity, RenewDeadline: s.renewDeadline})
	if err != nil {
		return err
	}
	if s.lock, err = fence.New(lease, s.fenceOptions()); err != nil {
		return err
	}
	opts.LeaderElectionResourceLockInterface = s.lock
	log.Info("leader election", "identity", s.lock.Identity(), "lease", s.lock.Describe(), "fenceMargin", s.lock.Margin().String())
	return nil
}

func (s *Settings) fenceOptions() fence.Options {
	return fence.Options{LeaseDuration: s.leaseDuration, Margin: s.fenceMargin}
}

// NewManager builds the manager with opts and sets the operator up in it.
func (s *Settings) NewManager(cfg *rest.Config, opts ctrl.Options) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if s.metricsCertWatcher != nil {
		if err := mgr.Add(s.metricsCertWatcher); err != nil {
			return nil, err
		}
	}
	o := controller.Options{
		RecordsNamespace: s.recordsNS, Naive: s.naive, Skip: s.skip, Workers: s.workers, HoldTimeout: s.holdTimeout,
		CallTimeout: s.callTimeout, ConnectTimeout: s.connectTimeout,
		SweepSettle: s.sweepSettle, SweepInterval: s.sweepEvery, SweepClockSkew: s.sweepSkew, SweepClaimGrace: s.sweepClaimGrace, SweepServers: s.sweepServers, SweepTrustedHosts: s.sweepTrusted, KeySecret: s.keySecret,
		AllowedServers: s.allowedServers,
	}
	if s.lock != nil && !s.naive {
		o.Fence = s.lock
	}
	if _, err := controller.Setup(mgr, o); err != nil {
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
