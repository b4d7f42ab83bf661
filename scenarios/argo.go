package scenarios

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
)

// ArgoStatusCapture is G3 on the seed's own stack: the stock Argo Workflows
// controller (v4.1.4), with finale's guard beside it; its -naive variant
// runs the stock controller alone and must lose the result.
const (
	ArgoStatusCapture      = "argo-status-capture"
	ArgoStatusCaptureNaive = ArgoStatusCapture + NaiveSuffix
)

func init() { registry[ArgoStatusCapture] = runArgoStatusCapture }

// runArgoStatusCapture runs the report's sequence (argo.Seed) and checks
// no-lost-result (the node Succeeded with its output) and finished (the
// Pod is gone once the Workflow recorded it).
func runArgoStatusCapture(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error) {
	var r Result
	scheme := newScheme()
	c, err := client.New(env.ControlPlane.Config, client.Options{Scheme: scheme})
	if err != nil {
		return r, err
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "argo-status-capture-"}}
	if err := c.Create(ctx, nsObj); err != nil {
		return r, err
	}
	ns := nsObj.Name
	defer func() { _ = client.IgnoreNotFound(c.Delete(context.WithoutCancel(ctx), nsObj)) }()
	if err := argo.Install(ctx, c, ns); err != nil {
		return r, err
	}
	var g *argo.GuardRun
	if !naive {
		if err := argo.InstallPolicy(ctx, c, ns); err != nil {
			return r, err
		}
		if g, err = argo.StartGuard(ctx, env.ControlPlane.Config, scheme, ns, guard.Options{}); err != nil {
			return r, err
		}
		defer func() { _ = g.Stop() }()
		say(out, "guard: admission policy %s bound to %s; finalizer %s", guard.PolicyName, ns, guard.Finalizer)
	} else {
		say(out, "stock controller alone (no guard)")
	}
	ctl, err := argo.Start(ctx, argo.Options{Kubeconfig: env.ControlPlane.Kubeconfig, Namespace: ns, Workers: argo.SeedWorkers, Log: out})
	if err != nil {
		return r, err
	}
	defer func() { _ = ctl.Stop() }()

	res, err := argo.Seed(ctx, c, ctl, ns, "status-capture-repro", func(format string, args ...any) { say(out, format, args...) })
	if err != nil {
		return r, err
	}
	r.fault(FaultPausedWorkers)
	r.fault(FaultRestart)
	r.fault(FaultRestart)
	r.note("Pod %s: gone while the workers were stopped: %v; held by %v", res.Pod.Name, res.GoneWhileStopped, res.HeldBy)
	r.note("node: %s %q, outputs.result %q", res.Node.Phase, res.Node.Message, res.Node.Result)
	if res.Node.Phase != argo.NodeSucceeded || res.Node.Result != argo.Output {
		r.add(Violation{NoLostResult, fmt.Sprintf("Pod %s succeeded and reported %q; the Workflow recorded %s %q with outputs.result %q", res.Pod.Name, argo.Output, res.Node.Phase, res.Node.Message, res.Node.Result)})
	}
	vs, err := CheckFinished(ctx, c, env.bound(), &res.Pod)
	if err != nil {
		return r, err
	}
	r.add(vs...)
	if g != nil {
		r.note("guard: %d API writes (%d of them conflicts, redone), %d Events for 1 Pod", g.Writes.Load(), g.Conflicts.Load(), g.Events.Load())
	}
	return r, nil
}
