package check_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/check"
)

// stuckToy owns ConfigMaps, one external resource each. Its broken build's
// cleanup fails the same way on every retry and changes nothing anyone
// can see; its slow build's cleanup keeps quiet for quiet after the
// deletion, as an operator's hold waiting out its timeout does, then
// deletes and releases.
type stuckToy struct {
	c      client.Client
	svc    *toyService
	broken bool
	quiet  time.Duration
}

// errToyCleanup is the broken build's one error.
var errToyCleanup = errors.New("toy: cleanup failed: connection refused")

func (s stuckToy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var o corev1.ConfigMap
	if err := s.c.Get(ctx, req.NamespacedName, &o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if o.DeletionTimestamp != nil {
		if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
			return reconcile.Result{}, nil
		}
		if s.broken {
			return reconcile.Result{}, errToyCleanup
		}
		if wait := time.Until(o.DeletionTimestamp.Add(s.quiet)); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		s.svc.delete(extName(&o))
		patch := client.MergeFrom(o.DeepCopy())
		controllerutil.RemoveFinalizer(&o, patFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(s.c.Patch(ctx, &o, patch))
	}
	if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
		patch := client.MergeFrom(o.DeepCopy())
		controllerutil.AddFinalizer(&o, patFinalizer)
		return reconcile.Result{}, s.c.Patch(ctx, &o, patch)
	}
	return reconcile.Result{}, s.svc.create(ctx, extName(&o))
}

func startStuck(toy stuckToy) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		mgr, err := patManager(e)
		if err != nil {
			return err
		}
		// A copy per start: lanes start operators side by side, and
		// each must use its own lane's client.
		t := toy
		t.c = mgr.GetClient()
		if err := ctrl.NewControllerManagedBy(mgr).Named("toy-stuck").For(&corev1.ConfigMap{}, patOwners).Complete(t); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
}

// A broken cleanup that changes nothing ends its run once nothing moved
// for timeouts.stuck, long before timeouts.finish, with the finished
// violation saying so and naming what stayed, and the leak found.
func TestStuckRunEndsEarly(t *testing.T) {
	svc := newToyService(0)
	spec := patSpec("toy-stuck", startStuck(stuckToy{svc: svc, broken: true}), svc)
	spec.Timeouts.Stuck = metav1Duration(5 * time.Second)
	spec.Timeouts.Finish = metav1Duration(3 * time.Minute)
	rep, text := patCheck(t, spec, check.Options{Only: []string{check.OrderDependentsFirst}})
	wantPattern(t, rep, text, map[string]check.Verdict{check.OrderDependentsFirst: check.Broke},
		map[string][]check.Invariant{check.OrderDependentsFirst: {check.Finished, check.NoLeak}},
		"ConfigMap dep-0 ["+patFinalizer+"]")
	run := rep.Experiments[0].Runs[0]
	if run.EndedEarly == "" || !strings.Contains(run.Violations[0].Detail, "no progress for 5s") {
		t.Errorf("the run did not end early on no progress:\n%s", text)
	}
	if time.Duration(run.Elapsed) >= spec.Timeouts.Finish.Duration {
		t.Errorf("the run took %s, not less than timeouts.finish %s:\n%s", run.Elapsed, spec.Timeouts.Finish.Duration, text)
	}
}

// In the default mode a crash experiment has 3 runs; its first broken run
// settles the verdict and the other two are not run, the report saying
// why.
func TestBrokenRunSettlesExperiment(t *testing.T) {
	svc := newToyService(0)
	spec := patSpec("toy-stuck", startStuck(stuckToy{svc: svc, broken: true}), svc)
	spec.Timeouts.Stuck = metav1Duration(5 * time.Second)
	rep, err := check.Run(t.Context(), spec, check.Options{Seed: 1, Only: []string{check.KillDuringDeletion}, Progress: testLog{t}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := rep.Experiments[0]
	if e.Verdict != check.Broke || len(e.Runs) != 1 || !strings.Contains(e.Reason, "run 1 broke, which settles the verdict; 2 more run(s) not run") {
		t.Errorf("verdict %s, %d run(s), reason %q; want broke, 1 run, settled", e.Verdict, len(e.Runs), e.Reason)
	}
}

// A cleanup that keeps quiet longer than timeouts.stuck, but within the
// operator's hold (timeouts.hold), is waited for: the window is never
// shorter than the hold with operator-down's margin, and the run holds.
func TestQuietHoldIsNotCut(t *testing.T) {
	const quiet = 12 * time.Second
	svc := newToyService(0)
	spec := patSpec("toy-quiet", startStuck(stuckToy{svc: svc, quiet: quiet}), svc)
	spec.Timeouts.Stuck = metav1Duration(5 * time.Second)
	spec.Timeouts.Hold = metav1Duration(quiet)
	spec.Timeouts.Finish = metav1Duration(3 * time.Minute)
	rep, text := patCheck(t, spec, check.Options{Only: []string{check.OrderDependentsFirst}})
	wantPattern(t, rep, text, map[string]check.Verdict{check.OrderDependentsFirst: check.Held}, nil, "")
	if f := time.Duration(rep.Experiments[0].Runs[0].Finish); f < quiet {
		t.Errorf("the deletion finished in %s, before the toy's %s of quiet: the test proves nothing:\n%s", f, quiet, text)
	}
}

// BenchmarkCheckBrokenOperator runs finale check, default mode then
// --quick, every setting at its default but the operator's own hold and
// sweeper timeouts (which operator-down and escaped need), against an
// operator whose cleanup never succeeds: every experiment that applies
// breaks. It prints each mode's wall time against its target, then one
// broken run (order-dependents-first) with and without the early end (the
// baseline: timeouts.stuck longer than timeouts.finish), as a ratio.
// FINALE_BENCH_STUCK (a duration) sets timeouts.stuck but for the
// baseline, a lab setting that shows how much of the time is the window.
// The toy runs in this process, which keeps the default at one lane, so
// the benchmark asks for the two lanes a description whose probe reaches
// its own service through {{.ServiceAddr}} gets by default; its probe
// lists only its run's resources, as --lanes asserts.
//
//	go test -run '^$' -bench CheckBrokenOperator -benchtime=1x -timeout 60m ./check/
func BenchmarkCheckBrokenOperator(b *testing.B) {
	window := check.DefaultStuck.String() + " (the default)"
	var stuck time.Duration
	if v := os.Getenv("FINALE_BENCH_STUCK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("FINALE_BENCH_STUCK: %v", err)
		}
		stuck, window = d, d.String()+" (FINALE_BENCH_STUCK)"
	}
	const off = time.Hour // longer than timeouts.finish: no early end
	cases := []struct {
		name   string
		quick  bool
		only   []string
		stuck  time.Duration
		target time.Duration // 0: none
	}{
		{"default mode", false, nil, stuck, 10 * time.Minute},
		{"--quick", true, nil, stuck, 4 * time.Minute},
		{"one run, early end", true, []string{check.OrderDependentsFirst}, stuck, 0},
		{"one run, no early end (baseline)", true, []string{check.OrderDependentsFirst}, off, 0},
	}
	type row struct {
		name                  string
		runs, broke, skipped  int
		wall, target          time.Duration
		inRuns                time.Duration // the experiments' own time, setup left out
		loadBefore, loadAfter string
	}
	var rows []row
	for range b.N {
		rows = rows[:0]
		for _, tc := range cases {
			svc := newToyService(0)
			spec := patSpec("toy-broken", startStuck(stuckToy{svc: svc, broken: true}), svc)
			spec.Probe.Func = svc.listRun
			spec.Parent = check.Parent{
				Secret: `{apiVersion: v1, kind: Secret, metadata: {name: creds}, stringData: {token: t}}`,
				Object: `{apiVersion: v1, kind: ConfigMap, metadata: {name: conn}}`,
			}
			spec.Timeouts.Hold = metav1Duration(10 * time.Second)
			spec.Timeouts.Sweep = metav1Duration(15 * time.Second)
			spec.Timeouts.Stuck = metav1Duration(tc.stuck)
			before := loadAverage()
			t0 := time.Now()
			rep, err := check.Run(b.Context(), spec, check.Options{Quick: tc.quick, Only: tc.only, Seed: 1, Lanes: 2, Progress: os.Stderr, WorkDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			r := row{name: tc.name, wall: time.Since(t0), target: tc.target, loadBefore: before, loadAfter: loadAverage()}
			r.runs, _ = rep.Runs()
			for _, e := range rep.Experiments {
				r.inRuns += time.Duration(e.Elapsed)
				switch e.Verdict {
				case check.Broke:
					r.broke++
				case check.Skipped:
					r.skipped++
				case check.Held:
					b.Errorf("%s held against an operator whose cleanup never succeeds", e.Name)
				}
			}
			rows = append(rows, r)
		}
	}
	fmt.Printf("finale check against an operator whose cleanup never succeeds; timeouts.stuck %s\n", window)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tRUNS\tBROKE\tSKIPPED\tIN RUNS\tWALL\tTARGET\tWITHIN\tLOAD (1, 5, 15 min) BEFORE\tAFTER")
	for _, r := range rows {
		target, within := "-", "-"
		if r.target > 0 {
			target, within = r.target.String(), fmt.Sprint(r.wall <= r.target)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, r.runs, r.broke, r.skipped,
			r.inRuns.Round(time.Second), r.wall.Round(time.Second), target, within, r.loadBefore, r.loadAfter)
	}
	_ = tw.Flush()
	if n := len(rows); n >= 2 && rows[n-2].inRuns > 0 {
		fmt.Printf("one broken run: %.1fx faster with the early end than without (in runs)\n", rows[n-1].inRuns.Seconds()/rows[n-2].inRuns.Seconds())
	}
}

// loadAverage is /proc/loadavg's three load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
