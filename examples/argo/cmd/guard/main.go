// Command guard runs finale's guard beside a stock Argo Workflows
// controller: it releases its own finalizer (placed on every workflow Pod at
// admission by the MutatingAdmissionPolicy in examples/argo/config) only by
// capture's rule, never on a timer. --kubeconfig, or the in-cluster config.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/argo/guard"
	"github.com/finale-dev/finale/watchdog"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "guard:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		namespace   = flag.String("namespace", "", "watch only this namespace (empty: every namespace)")
		metricsAddr = flag.String("metrics-bind-address", ":8080", "metrics address; 0 turns metrics off")
		probeAddr   = flag.String("health-probe-bind-address", ":8081", "health probe address; 0 turns probes off")
		leaderElect = flag.Bool("leader-elect", false, "elect a leader (run several replicas)")
		leaderNS    = flag.String("leader-election-namespace", "", "namespace of the leader lease; empty means in-cluster namespace")
		workers     = flag.Int("workers", 2, "concurrent release reconciles")
		pending     = flag.Duration("pending-threshold", 0, "a Pod held longer is reported as overdue; 0 is capture's default (5m)")
		skipCheck   = flag.Bool("skip-policy-check", false, "start even when the admission policy is not installed (new Pods then go unprotected)")
		verbosity   = flag.Int("v", 0, "log verbosity")
	)
	flag.Parse()
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: *verbosity}))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	scheme := clientgoscheme.Scheme
	// Only workflow Pods are cached: Argo labels each with its Workflow.
	workflowPods, err := labels.NewRequirement(guard.LabelWorkflow, selection.Exists, nil)
	if err != nil {
		return err
	}
	cacheOpts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.NewSelector().Add(*workflowPods)},
	}}
	if *namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{*namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "argo-guard.finale.dev",
		LeaderElectionNamespace: *leaderNS,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if !*skipCheck {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := guard.CheckPolicy(ctx, mgr.GetAPIReader())
		cancel()
		if err != nil {
			return fmt.Errorf("%w (or pass --skip-policy-check)", err)
		}
	}
	wd := watchdog.New(watchdog.Options{Scheme: scheme, Recorder: mgr.GetEventRecorder("argo-guard")})
	g, err := guard.New(mgr.GetAPIReader(), mgr.GetClient(), guard.Options{
		Events:                  mgr.GetEventRecorder("argo-guard"),
		Watchdog:                wd,
		PendingThreshold:        *pending,
		MaxConcurrentReconciles: *workers,
	})
	if err != nil {
		return err
	}
	if err := g.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.Add(wd.Runnable(time.Minute, mgr.GetAPIReader())); err != nil {
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
