// Package acheck_test runs finale check's results-stalled experiment, the
// seed incident (argo-workflows #17024), against the stock Argo
// Workflows controller v4.1.4 (examples/argo/stack), alone and with the
// guard (examples/argo/guard), through check's Go API. Each dependent is a
// Workflow whose one Pod is its result-capture child: the Pod runs (the
// description plays the kubelet), the controller's workflow workers stop
// (operator.stalled: --workflow-workers=0, its Pod cleanup running), the
// Pod succeeds and its executor reports the output (results.complete, the
// Pod's conditions aged past Argo's two-minute floor), check deletes the
// Pod, and the workers come back. The stock controller removes its status
// finalizer on the elapsed time, the Pod goes, and the Workflow records the
// node as "Error: pod deleted": no-lost-result breaks. The guard holds the
// Pod until the node is recorded Succeeded with its output: it holds.
package acheck_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/argobin"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the report says what happened
	testenv.Main(m)
}

// dependents is how many Workflows a run makes (one Pod each).
const dependents = 2

// spec describes the stock controller (guarded: with the guard beside it)
// to check.
func spec(t *testing.T, guarded bool) *check.Spec {
	t.Helper()
	ctx := t.Context()
	bin, err := argobin.Ensure(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := argobin.ModuleDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := filepath.Glob(filepath.Join(mod, "manifests/base/crds/minimal/argoproj.io_*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("Argo's CRDs in %s: %v (%d files)", mod, err, len(crds))
	}
	wf, err := yaml.Marshal(argo.Workflow("", "wf-{{.Index}}").Object)
	if err != nil {
		t.Fatal(err)
	}
	cs := &clients{}
	return &check.Spec{
		Name:     map[bool]string{false: "argo-stock", true: "argo-guarded"}[guarded],
		Operator: check.Operator{Start: operator(bin, guarded), Stalled: &check.Stalled{}},
		CRDs:     crds,
		Dependents: check.Dependents{Count: dependents, Template: string(wf),
			// Argo's Workflow condition: a Pod of it runs (the node is
			// recorded Running, which the seed needs: Argo re-creates the
			// Pod of a node still Pending).
			ReadyCondition: "PodRunning"},
		Results: &check.Results{
			Children: check.Children{APIVersion: "v1", Kind: "Pod"},
			Probe:    check.ResultsProbe{Func: cs.results},
			Run:      check.Hook{Func: cs.runPods},
			Complete: check.Hook{Func: cs.completePods},
		},
		Timeouts: check.Timeouts{
			Ready:  metav1.Duration{Duration: 90 * time.Second},
			Finish: metav1.Duration{Duration: 30 * time.Second},
			// Argo's own timeout is the two-minute floor after a Pod's last
			// transition; results.complete ages the Pod's conditions past
			// it (argo.SeedAge), as the report waited, so the stall need
			// only cover the stalled controller's start (its informers
			// list the deleted Pods) and its cleanup: 20s, measured at 8
			// to 15 on 2 shared cores. The stall ends as soon as the Pods
			// are gone.
			Hold: metav1.Duration{Duration: 20 * time.Second},
		},
	}
}

// operator runs the stock controller on the run's namespace (its
// configuration there, workflow workers stopped when stalled) and, guarded,
// the guard on the same namespace with its admission policy bound to it.
// The guard is not stalled: it is the part that must keep running.
func operator(bin string, guarded bool) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		ns := e.Values.Namespace
		c, err := client.New(e.Config, client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			return err
		}
		if err := argo.Install(ctx, c, ns); err != nil {
			return err
		}
		if guarded {
			if err := argo.InstallPolicy(ctx, c, ns); err != nil {
				return err
			}
			g, err := argo.StartGuard(ctx, e.Config, testenv.Scheme(), ns, guard.Options{})
			if err != nil {
				return err
			}
			defer func() { _ = g.Stop() }() // the run's end or a kill
		}
		workers := argo.SeedWorkers
		if e.Stalled {
			workers = 0
		}
		ctl, err := argo.Start(ctx, argo.Options{Kubeconfig: e.Values.Kubeconfig, Namespace: ns, Workers: workers, BinDir: bin})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return ctl.Stop()
	}
}

// clients keeps one client per kubeconfig check hands the hooks.
type clients struct {
	mu sync.Mutex
	by map[string]client.Client
}

func (cs *clients) get(v check.Values) (client.Client, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c, ok := cs.by[v.Kubeconfig]; ok {
		return c, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", v.Kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return nil, err
	}
	if cs.by == nil {
		cs.by = map[string]client.Client{}
	}
	cs.by[v.Kubeconfig] = c
	return c, nil
}

func (cs *clients) pods(ctx context.Context, v check.Values) (client.Client, []corev1.Pod, error) {
	c, err := cs.get(v)
	if err != nil {
		return nil, nil, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(v.Namespace), client.HasLabels{argo.LabelWorkflow}); err != nil {
		return nil, nil, err
	}
	return c, pods.Items, nil
}

// runPods plays the kubelet starting every workflow Pod not yet running.
func (cs *clients) runPods(ctx context.Context, v check.Values) error {
	c, pods, err := cs.pods(ctx, v)
	if err != nil {
		return err
	}
	for i := range pods {
		if p := &pods[i]; p.Status.Phase == "" || p.Status.Phase == corev1.PodPending {
			if err := argo.RunPod(ctx, c, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// completePods plays each Pod's executor (its WorkflowTaskResult with
// argo.Output) and the kubelet (the Pod Succeeded, its conditions
// argo.SeedAge old).
func (cs *clients) completePods(ctx context.Context, v check.Values) error {
	c, pods, err := cs.pods(ctx, v)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		if err := argo.ReportOutputs(ctx, c, p, argo.Output); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := argo.SucceedPod(ctx, c, p, argo.SeedAge); err != nil {
			return err
		}
	}
	return nil
}

// results is the results probe: a child per workflow Pod, a result
// produced per final WorkflowTaskResult, and a result persisted per node
// the Workflow recorded Succeeded with the output completePods reported. A
// node recorded "Error: pod deleted" has not persisted the Pod's result
// (the Pod succeeded), whatever outputs Argo copied into it. (Argo deletes
// a WorkflowTaskResult once it has read it; check keeps what was
// produced.)
func (cs *clients) results(ctx context.Context, v check.Values) (check.ResultSet, error) {
	var rs check.ResultSet
	c, pods, err := cs.pods(ctx, v)
	if err != nil {
		return rs, err
	}
	for _, p := range pods {
		rs.Children = append(rs.Children, p.Annotations[argo.AnnotationNodeID])
	}
	trs := &unstructured.UnstructuredList{}
	trs.SetGroupVersionKind(argo.WorkflowTaskResultGVK.GroupVersion().WithKind("WorkflowTaskResultList"))
	if err := c.List(ctx, trs, client.InNamespace(v.Namespace), client.MatchingLabels{argo.LabelReportOutputsCompleted: "true"}); err != nil {
		return rs, err
	}
	for _, tr := range trs.Items {
		rs.Produced = append(rs.Produced, tr.GetName())
	}
	wfs := &unstructured.UnstructuredList{}
	wfs.SetGroupVersionKind(argo.WorkflowGVK.GroupVersion().WithKind("WorkflowList"))
	if err := c.List(ctx, wfs, client.InNamespace(v.Namespace)); err != nil {
		return rs, err
	}
	for _, wf := range wfs.Items {
		nodes, _, _ := unstructured.NestedMap(wf.Object, "status", "nodes")
		for id := range nodes {
			if n, ok := argo.NodeOf(&wf, id); ok && n.Phase == argo.NodeSucceeded && n.Result == argo.Output {
				rs.Persisted = append(rs.Persisted, id)
			}
		}
	}
	return rs, nil
}

// TestResultsStalledThroughCheck: the seed through finale check. The stock
// controller breaks no-lost-result in results-stalled, every result lost;
// with the guard it holds.
func TestResultsStalledThroughCheck(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		t.Run(map[bool]string{false: "stock", true: "guarded"}[guarded], func(t *testing.T) {
			opts := check.Options{Quick: true, Seed: 1, Only: []string{check.ResultsStalled}, Progress: testLog{t}, WorkDir: t.TempDir()}
			rep, err := check.Run(t.Context(), spec(t, guarded), opts)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			_ = rep.WriteText(&b)
			t.Logf("report:\n%s", b.String())
			want := map[string]check.Verdict{check.ResultsStalled: check.Held}
			if !guarded {
				want[check.ResultsStalled] = check.Broke
			}
			if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
				var j strings.Builder
				_ = rep.WriteJSON(&j) // the timelines of runs that held too
				t.Fatalf("verdicts (-want +got):\n%s\n%s", diff, j.String())
			}
			run := rep.Experiments[0].Runs[0]
			var got []check.Invariant
			for _, v := range run.Violations {
				got = append(got, v.Invariant)
			}
			wantInv, wantLost := []check.Invariant(nil), 0
			if !guarded {
				wantInv, wantLost = []check.Invariant{check.NoLostResult}, dependents
			}
			if diff := cmp.Diff(wantInv, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			if run.Produced != dependents || len(run.Lost) != wantLost {
				t.Errorf("results produced %d, lost %v; want %d produced, %d lost", run.Produced, run.Lost, dependents, wantLost)
			}
			if !guarded && !strings.Contains(b.String(), fmt.Sprintf("results lost (%d produced", dependents)) {
				t.Errorf("the report does not list the lost results")
			}
		})
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
