// Command keyoperator runs the example key operator (package controller:
// KeyServers and APIKeys in the key service of examples/keys/service)
// against any cluster: --kubeconfig, or the in-cluster config. Cleanup
// records and the operator key go to --records-namespace (or
// $POD_NAMESPACE).
//
//	go run ./examples/keys/cmd/keyoperator --kubeconfig ~/.kube/config --records-namespace keys-system
//
// It is what examples/keys/check/operator.yaml runs under finale check:
// a process of its own, so that SIGKILL is real. Metrics and health probes
// are off unless asked for. --cache-kubeconfig points the manager's cache
// (its lists and watches) at another apiserver of the same cluster, which
// is how finale check gives it a stale view while its writes and live
// reads stay fresh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr/funcr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/controller"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/ledger"
)

// errFlags is wrapped by the errors about the command line (exit 2).
var errFlags = errors.New("keyoperator: bad flags")

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "keyoperator:", err)
		if errors.Is(err, errFlags) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// settings are the command's flags.
type settings struct {
	recordsNS   string
	cacheConfig string
	metricsAddr string
	probeAddr   string
	opts        controller.Options
	verbosity   int
}

func parse(args []string) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("keyoperator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&s.recordsNS, "records-namespace", "", "namespace of the cleanup records, the operator key and the sweeper's KeyServers; empty is $"+ledger.NamespaceEnv)
	fs.StringVar(&s.cacheConfig, "cache-kubeconfig", "", "a kubeconfig the manager's cache lists and watches through (another apiserver of the same cluster); empty is --kubeconfig's. Writes and live reads always use --kubeconfig")
	fs.StringVar(&s.metricsAddr, "metrics-bind-address", "0", "metrics address (plain HTTP); 0 turns metrics off")
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", "0", "health probe address; 0 turns probes off")
	fs.DurationVar(&s.opts.HoldTimeout, "hold-timeout", 0, "bound of a KeyServer's deletion hold; 0 is hold's default (10m)")
	fs.DurationVar(&s.opts.CallTimeout, "call-timeout", 0, "bound of each call to a key service; a call over it evicts its client; 0 is 10s")
	fs.DurationVar(&s.opts.RetryInterval, "retry-interval", 0, "how soon an APIKey that needs the user is looked at again; 0 is lifecycle's default")
	fs.DurationVar(&s.opts.SweepSettle, "sweep-settle", 0, "how long the sweeper leaves a record of a gone owner alone; 0 is sweep's default (5m)")
	fs.DurationVar(&s.opts.SweepInterval, "sweep-interval", 0, "time between sweep passes; 0 is sweep's default (1m)")
	fs.DurationVar(&s.opts.SweepClockSkew, "sweep-clock-skew", 0, "clock difference tolerated between replicas; 0 is sweep's default (1m)")
	fs.IntVar(&s.opts.Workers, "workers", 0, "concurrent APIKey reconciles; 0 is lifecycle's default")
	mode := fs.String("service-mode", string(service.ModeChallenge), "API shape of the key services: "+string(service.ModeChallenge)+", or "+string(service.ModeIDOnly)+" (the G2 seed's shape: the sweeper never acts and a copy of a service is taken for it; see examples/keys/README.md)")
	fs.IntVar(&s.verbosity, "v", 0, "log verbosity")
	if kc := flag.CommandLine.Lookup("kubeconfig"); kc != nil {
		fs.Var(kc.Value, kc.Name, kc.Usage)
	}
	err := fs.Parse(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errFlags, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errFlags, fs.Args())
	}
	if s.recordsNS == "" {
		s.recordsNS = os.Getenv(ledger.NamespaceEnv)
	}
	if s.recordsNS == "" {
		return nil, fmt.Errorf("%w: no namespace for cleanup records: set $%s or --records-namespace", errFlags, ledger.NamespaceEnv)
	}
	s.opts.RecordsNamespace = s.recordsNS
	if s.opts.ServiceMode, err = service.ParseMode(*mode); err != nil {
		return nil, fmt.Errorf("%w: --service-mode: %w", errFlags, err)
	}
	return s, nil
}

// run runs the operator until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := parse(args)
	if err != nil {
		return err
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(stderr, prefix, args) }, funcr.Options{Verbosity: s.verbosity})
	ctrl.SetLogger(log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	scheme := clientgoscheme.Scheme
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: s.metricsAddr},
		HealthProbeBindAddress: s.probeAddr,
	}
	if s.cacheConfig != "" {
		cacheCfg, err := clientcmd.BuildConfigFromFlags("", s.cacheConfig)
		if err != nil {
			return fmt.Errorf("--cache-kubeconfig: %w", err)
		}
		opts.NewCache = func(_ *rest.Config, co cache.Options) (cache.Cache, error) {
			co.HTTPClient = nil // its own, for the other apiserver
			return cache.New(cacheCfg, co)
		}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if _, err := controller.Setup(ctx, mgr, s.opts); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
