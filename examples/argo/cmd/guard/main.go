// Command guard runs finale's guard beside a stock Argo Workflows
// controller: it releases its own finalizer (placed on every workflow Pod at
// admission by the MutatingAdmissionPolicy in examples/argo/config, while
// the guard's heartbeat Lease is fresh) only by capture's rule, never on a
// timer. --kubeconfig, or the in-cluster config.
//
//	guard [flags]                     run the guard
//	guard uninstall [flags]           remove the finalizer from every Pod, then the policy, its bindings and the heartbeat
//
// Exit status (internal/exitcode, finale's table): 0 success, 1 failed,
// 64 a usage error (unknown flag, bad value, extra argument).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/examples/argo/guard"
	"github.com/finale-dev/finale/internal/eventrec"
	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/watchdog"
)

const usage = `usage:
  guard [flags]                 run the guard (flags below)
  guard uninstall [--kubeconfig PATH] [--namespace NS] [--wait 60s]
                                remove %s from every Pod (in every namespace,
                                terminating or not), then delete the guard's admission
                                policy, its bindings and, last, its heartbeat Lease;
                                Argo's own finalizers are untouched

flags:
`

// podNamespaceEnv is set by the Deployment from the downward API.
const podNamespaceEnv = "POD_NAMESPACE"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "guard:", err)
		os.Exit(exitcode.Of(err))
	}
}

func run(args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "uninstall" {
		return uninstall(args[1:], out)
	}
	return serve(args)
}

// uninstall is `guard uninstall`: guard.Uninstall, with its counts printed.
func uninstall(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	fs.SetOutput(out)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; default $KUBECONFIG, then the in-cluster config, then ~/.kube/config")
	ns := fs.String("namespace", "argo", "the guard's namespace (its heartbeat Lease; admission is probed there with a dry-run Pod, or elsewhere when it is terminating)")
	waitFor := fs.Duration("wait", guard.DefaultUninstallWait, "how long to wait for the apiserver to stop adding the finalizer")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usage, guard.Finalizer)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err == flag.ErrHelp {
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("uninstall: %w", err))
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef("uninstall: unexpected arguments %q: guard uninstall takes only flags", fs.Args())
	}
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	rep, err := guard.Uninstall(ctx, c, guard.UninstallOptions{Namespace: *ns, Wait: *waitFor})
	for _, b := range rep.Bindings {
		fmt.Fprintf(out, "deleted MutatingAdmissionPolicyBinding %s\n", b)
	}
	if rep.Policy {
		fmt.Fprintf(out, "deleted MutatingAdmissionPolicy %s\n", guard.PolicyName)
	}
	if rep.Heartbeat {
		fmt.Fprintf(out, "deleted Lease %s/%s (the guard's heartbeat)\n", *ns, guard.HeartbeatName)
	}
	if err != nil {
		// The error names the step, the Pods released and what is left.
		return fmt.Errorf("uninstall: %w", err)
	}
	if rep.ProbedIn != "" && rep.ProbedIn != *ns {
		fmt.Fprintf(out, "namespace %s refuses new objects (terminating); admission was probed in %s\n", *ns, rep.ProbedIn)
	}
	fmt.Fprintf(out, "new workflow Pods no longer get %s\n", guard.Finalizer)
	fmt.Fprintf(out, "removed %s from %d Pods (%d of them being deleted); other finalizers untouched\n", guard.Finalizer, rep.Released, rep.Deleting)
	fmt.Fprintln(out, "next: kubectl delete -k examples/argo/config/default (the guard's Deployment and RBAC)")
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a Pod: %w", err)
	}
	return cfg, nil
}

// serve runs the guard.
func serve(args []string) error {
	flag.CommandLine.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), usage, guard.Finalizer)
		flag.PrintDefaults()
	}
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
		hbNS        = flag.String("heartbeat-namespace", "", "namespace of the heartbeat Lease, where the policy binding's paramRef points; default $"+podNamespaceEnv+", then --namespace")
		hbDuration  = flag.Duration("heartbeat-duration", guard.DefaultHeartbeatDuration, "the heartbeat Lease's duration: new workflow Pods stop getting the finalizer this long after the guard stops")
	)
	// flag.CommandLine (controller-runtime registers --kubeconfig there)
	// would exit 2 on a wrong flag: that is finale's "violation found".
	// The error is returned instead, and exits 64, a usage error.
	flag.CommandLine.Init("guard", flag.ContinueOnError)
	if err := flag.CommandLine.Parse(args); err == flag.ErrHelp {
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if flag.NArg() > 0 {
		return exitcode.Usagef("unexpected arguments %q: guard takes only flags (guard uninstall removes it)", flag.Args())
	}
	heartbeatNS := *hbNS
	if heartbeatNS == "" {
		heartbeatNS = os.Getenv(podNamespaceEnv)
	}
	if heartbeatNS == "" {
		heartbeatNS = *namespace
	}
	if heartbeatNS == "" {
		return fmt.Errorf("the heartbeat Lease needs a namespace: pass --heartbeat-namespace (the guard's namespace), or set $%s", podNamespaceEnv)
	}
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: *verbosity}))

	cfg, err := restConfig("")
	if err != nil {
		return err
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
		err := guard.CheckPolicy(ctx, mgr.GetAPIReader(), heartbeatNS)
		cancel()
		if err != nil {
			return fmt.Errorf("%w (or pass --skip-policy-check)", err)
		}
	}
	// A terminating namespace refuses Events, and that is where the guard
	// releases Pods because their namespace goes: those Events, and the
	// overdue ones, go to the guard's own namespace instead.
	if err := eventrec.Informer(context.Background(), mgr); err != nil {
		return err
	}
	rec, err := eventrec.For(mgr, "argo-guard", eventrec.Options{
		Namespaces: mgr.GetCache(),
		Fallback:   heartbeatNS,
		Redirect:   []string{capture.EventReasonReleasedNamespaceTerminating, capture.EventReasonPending},
	})
	if err != nil {
		return err
	}
	wd := watchdog.New(watchdog.Options{Scheme: scheme, Recorder: rec})
	g, err := guard.New(mgr.GetAPIReader(), mgr.GetClient(), guard.Options{
		Events:                  rec,
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
	hb, err := guard.NewHeartbeat(mgr.GetAPIReader(), mgr.GetClient(), guard.HeartbeatOptions{Namespace: heartbeatNS, Duration: *hbDuration})
	if err != nil {
		return err
	}
	if err := mgr.Add(hb); err != nil {
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
