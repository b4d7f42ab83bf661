package check_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
)

// markerToy is an operator of APIKeys that says it is done with a status
// condition (Ready, reason Marked) once it holds its finalizer and, with a
// service, made the key's resource there; deleted, it cleans up and
// releases, unless stuck (a cleanup that never ends).
type markerToy struct {
	c     client.Client
	svc   *toyService // nil: it makes nothing outside the cluster
	stuck bool
}

const markerReason = "Marked"

func (m markerToy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var k v1alpha1.APIKey
	if err := m.c.Get(ctx, req.NamespacedName, &k); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !k.DeletionTimestamp.IsZero() {
		if m.stuck {
			return reconcile.Result{}, nil
		}
		if m.svc != nil {
			m.svc.delete(extName(&k))
		}
		controllerutil.RemoveFinalizer(&k, toyFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(m.c.Update(ctx, &k))
	}
	if controllerutil.AddFinalizer(&k, toyFinalizer) {
		return reconcile.Result{}, m.c.Update(ctx, &k)
	}
	if m.svc != nil {
		if err := m.svc.create(ctx, extName(&k)); err != nil {
			return reconcile.Result{}, err
		}
	}
	if meta.SetStatusCondition(&k.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: markerReason, ObservedGeneration: k.Generation}) {
		return reconcile.Result{}, m.c.Status().Update(ctx, &k)
	}
	return reconcile.Result{}, nil
}

func startMarker(svc *toyService, stuck bool) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		s := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(s))
		utilruntime.Must(v1alpha1.AddToScheme(s))
		mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
			Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard(),
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err != nil {
			return err
		}
		if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.APIKey{}).Named("marker").Complete(markerToy{c: mgr.GetClient(), svc: svc, stuck: stuck}); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
}

// markerSpec describes the marker toy: APIKeys alone, no parent.
func markerSpec(name string, start check.StartFunc) *check.Spec {
	return &check.Spec{
		Name:     name,
		Operator: check.Operator{Start: start, Grace: metav1Duration(5 * time.Second)},
		CRDs:     []string{"../examples/keys/config/crd/keys.finale.dev_apikeys.yaml"},
		Dependents: check.Dependents{Count: 2,
			Template: "{apiVersion: keys.finale.dev/v1alpha1, kind: APIKey, metadata: {name: k{{.Index}}}, spec: {name: k{{.Index}}, keyServerRef: {name: keys}}}"},
	}
}

func reportText(rep check.Report) string {
	var b strings.Builder
	_ = rep.WriteText(&b)
	return b.String()
}

// timelineHas reports whether a run's timeline has a step containing s.
// An operator that makes nothing outside the cluster, described without a
// probe and without fault points, its readiness a condition with a
// reason: the experiments that apply hold (its kills included), escaped is
// skipped for want of a probe, and the report says that no-leak and
// no-duplicate were not checked. Stuck in its cleanup, it breaks finished,
// and the violation lists the APIKeys left, with their finalizer and
// their deletion, and nothing else.
func TestProbeLessOperator(t *testing.T) {
	t.Run("holds", func(t *testing.T) {
		spec := markerSpec("marker", startMarker(nil, false))
		spec.Dependents.Ready = &check.Readiness{Condition: "Ready", Reason: markerReason}
		spec.Timeouts = check.Timeouts{Finish: metav1Duration(30 * time.Second)}
		rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 1, Progress: testLog{t}, WorkDir: t.TempDir(),
			Only: []string{check.OrderAllAtOnce, check.OrderDependentsFirst, check.KillDuringCreates, check.KillDuringDeletion, check.Escaped}})
		if err != nil {
			t.Fatal(err)
		}
		text := reportText(rep)
		want := map[string]check.Verdict{
			check.OrderAllAtOnce: check.Held, check.OrderDependentsFirst: check.Held,
			check.KillDuringCreates: check.Held, check.KillDuringDeletion: check.Held, check.Escaped: check.Skipped,
		}
		if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
			t.Fatalf("verdicts (-want +got):\n%s\n%s", diff, text)
		}
		for _, s := range []string{
			"skipped escaped: the description has no probe",
			"note: no-leak and no-duplicate (what the operator makes in an external service) were not checked",
		} {
			if !strings.Contains(text, s) {
				t.Errorf("the report does not say %q:\n%s", s, text)
			}
		}
		if run := rep.Experiments[0].Runs[0]; !timelineHas(run, "ready: every dependent Ready=True (reason Marked)") {
			t.Errorf("the first run's timeline names no readiness by the rule: %v", run.Timeline)
		}
		if run := rep.Experiments[2].Runs[0]; run.Kills != 2 {
			t.Errorf("kill-during-creates killed %d times, want 2", run.Kills)
		}
	})
	t.Run("stuck", func(t *testing.T) {
		spec := markerSpec("marker-stuck", startMarker(nil, true))
		spec.Dependents.Ready = &check.Readiness{Condition: "Ready"}
		spec.Timeouts = check.Timeouts{Finish: metav1Duration(5 * time.Second)}
		rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 1, Progress: testLog{t}, WorkDir: t.TempDir(),
			Only: []string{check.OrderDependentsFirst}})
		if err != nil {
			t.Fatal(err)
		}
		text := reportText(rep)
		if diff := cmp.Diff(map[string]check.Verdict{check.OrderDependentsFirst: check.Broke}, rep.Verdicts()); diff != "" {
			t.Fatalf("verdicts (-want +got):\n%s\n%s", diff, text)
		}
		run := rep.Experiments[0].Runs[0]
		if len(run.Violations) == 0 || run.Violations[0].Invariant != check.Finished {
			t.Fatalf("violations %v, want finished first", run.Violations)
		}
		v := run.Violations[0]
		var got []string
		for _, o := range v.Objects {
			got = append(got, o.Kind+" "+o.Name+" "+strings.Join(o.Finalizers, ","))
			if o.Deleting <= 0 {
				t.Errorf("%s %s: not deleting, want how long it has been", o.Kind, o.Name)
			}
		}
		if diff := cmp.Diff([]string{"APIKey k0 " + toyFinalizer, "APIKey k1 " + toyFinalizer}, got); diff != "" {
			t.Errorf("the violation's objects (-want +got):\n%s", diff)
		}
		if want := "every APIKey not gone 5s after the deletion: APIKey k0 [" + toyFinalizer + "] deleting for "; !strings.HasPrefix(v.Detail, want) {
			t.Errorf("violation %q, want it to begin %q", v.Detail, want)
		}
	})
}

// detached returns at once when its context ends, leaving the manager to
// stop behind it: a kill as quick as a SIGKILL, so that what delays a
// kill is check's own doing, not the manager's shutdown.
func detached(start check.StartFunc) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		go func() { _ = start(mctx, e) }()
		<-ctx.Done()
		cancel()
		return nil
	}
}

// A readiness rule as a JSONPath filter expression with a value, on an
// operator with a slow probe: the runs get ready by the rule, and the
// kills land at the moments drawn from the seed, not pushed back by the
// probe's latency (counting after each kill used to take it).
func TestJSONPathReadyAndSlowProbe(t *testing.T) {
	const latency = 2 * time.Second
	svc := newToyService(0)
	spec := markerSpec("marker-slow-probe", detached(startMarker(svc, false)))
	spec.Dependents.Ready = &check.Readiness{JSONPath: `{.status.conditions[?(@.type=="Ready")].reason}`, Value: markerReason}
	spec.Probe = check.Probe{Interval: metav1Duration(latency), Func: func(ctx context.Context, v check.Values) ([]string, error) {
		t := time.NewTimer(latency) // the probe's own latency: a command calling a slow API
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		return svc.list(ctx, v)
	}}
	spec.Faults = []check.FaultPoint{{Name: "toy", Address: "127.0.0.1:9"}} // the service is in this process; nothing dials this
	spec.Timeouts = check.Timeouts{Finish: metav1Duration(30 * time.Second)}
	const window = 500 * time.Millisecond // every gap between kills is shorter than the probe's latency
	rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 1, Progress: testLog{t}, WorkDir: t.TempDir(),
		KillWindow: window, Only: []string{check.KillDuringCreates}})
	if err != nil {
		t.Fatal(err)
	}
	text := reportText(rep)
	if diff := cmp.Diff(map[string]check.Verdict{check.KillDuringCreates: check.Held}, rep.Verdicts()); diff != "" {
		t.Fatalf("verdicts (-want +got):\n%s\n%s", diff, text)
	}
	run := rep.Experiments[0].Runs[0]
	if !timelineHas(run, `every dependent {.status.conditions[?(@.type=="Ready")].reason}=Marked`) {
		t.Errorf("the timeline names no readiness by the rule: %v", run.Timeline)
	}
	var drawnAt time.Duration
	var moments, kills []time.Duration
	for _, e := range run.Timeline {
		if rest, ok := strings.CutPrefix(e.What, "kills drawn at ["); ok {
			drawnAt = time.Duration(e.At)
			list, _, _ := strings.Cut(rest, "]")
			for _, f := range strings.Fields(list) {
				d, err := time.ParseDuration(f)
				if err != nil {
					t.Fatalf("kill moment %q: %v", f, err)
				}
				moments = append(moments, d)
			}
		}
		if strings.HasPrefix(e.What, "fault: SIGKILL the operator") {
			kills = append(kills, time.Duration(e.At)-drawnAt)
		}
	}
	t.Logf("moments drawn %v, kills at %v after the draw", moments, kills)
	if len(moments) != 2 || len(kills) != 2 {
		t.Fatalf("moments %v, kills %v: want 2 of each\n%s", moments, kills, text)
	}
	// A kill may come a little late (the creates, a loaded machine); a
	// kill that waited for the probe's count comes at least latency -
	// window late.
	const late = (latency - window) / 2
	for i := range moments {
		if d := kills[i] - moments[i]; d < 0 || d > late {
			t.Errorf("kill %d at +%s after the draw, drawn at +%s: %s off, want within [0, %s]", i, kills[i], moments[i], d, late)
		}
	}
}
