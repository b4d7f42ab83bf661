package guard_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/argo/guard"
	argo "github.com/finale-dev/finale/examples/argo/stack"
	"github.com/finale-dev/finale/internal/testenv"
)

// benchPods is the benchmark's fleet: FINALE_ARGO_BENCH_PODS, else 200.
func benchPods(b *testing.B) int {
	if s := os.Getenv("FINALE_ARGO_BENCH_PODS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("FINALE_ARGO_BENCH_PODS=%q: want a positive number", s)
		}
		return n
	}
	return 200
}

// BenchmarkGuardFleet: 200 Pods of one Workflow finish and are deleted
// while the workflow workers are stopped; then the workers return. Guard
// off (the stock controller alone, the baseline, measured in the same run)
// and guard on. Reported: results kept of the Pods (on: must be all),
// the guard's API writes per Pod, and how long each held Pod took to go
// once the workers returned.
//
//	go test -run '^$' -bench GuardFleet -benchtime=1x -timeout 30m ./examples/argo/guard/
func BenchmarkGuardFleet(b *testing.B) {
	n := benchPods(b)
	for b.Loop() {
		off := fleet(b, false, n)
		on := fleet(b, true, n)
		if on.Kept != n {
			b.Errorf("guard on: %d of %d results kept, want all", on.Kept, n)
		}
		if off.Kept == n {
			b.Errorf("guard off: every result kept; the baseline did not reproduce the loss")
		}
		pct := percentiles(on.Release)
		lag := percentiles(on.Lag)
		b.ReportMetric(float64(off.Kept), "kept-off")
		b.ReportMetric(float64(on.Kept), "kept-on")
		b.ReportMetric(float64(on.Held), "held-on")
		b.ReportMetric(float64(onWrites)/float64(n), "guard-writes/pod")
		b.ReportMetric(float64(onConflicts)/float64(n), "guard-conflicts/pod")
		b.ReportMetric(float64(onEvents)/float64(n), "guard-events/pod")
		b.ReportMetric(pct(0.5).Seconds(), "release-p50-s")
		b.ReportMetric(pct(0.99).Seconds(), "release-p99-s")
		b.ReportMetric(lag(0.5).Seconds()*1000, "lag-p50-ms")
		b.ReportMetric(lag(0.99).Seconds()*1000, "lag-p99-ms")
		b.ReportMetric(on.Recorded.Seconds(), "recorded-on-s")
		b.ReportMetric(off.Recorded.Seconds(), "recorded-off-s")
		fmt.Fprintf(os.Stderr, "guard fleet, %d Pods: off kept %d lost %d; on kept %d lost %d held %d, %.2f writes/Pod (%.2f conflicts), %.2f Events/Pod, release p50 %s p99 %s max %s (after the node recorded: p50 %s p99 %s max %s, %d measured), Workflow finished %s after the workers returned (off: %s)\n",
			n, off.Kept, off.Lost, on.Kept, on.Lost, on.Held, float64(onWrites)/float64(n), float64(onConflicts)/float64(n), float64(onEvents)/float64(n),
			pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond),
			lag(0.5).Round(time.Millisecond), lag(0.99).Round(time.Millisecond), lag(1).Round(time.Millisecond), len(on.Lag), on.Recorded.Round(time.Millisecond), off.Recorded.Round(time.Millisecond))
	}
}

// percentiles returns the p-quantile function of ds (0 when empty).
func percentiles(ds []time.Duration) func(p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return func(p float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
}

// The guard's writes in the last guarded fleet.
var onWrites, onConflicts, onEvents int64

func fleet(b *testing.B, guarded bool, n int) argo.FleetOutcome {
	b.Helper()
	s := testenv.Scheme()
	c := testenv.Client(b, s)
	ns := testenv.Namespace(b, c)
	ctx := b.Context()
	if err := argo.Install(ctx, c, ns); err != nil {
		b.Fatal(err)
	}
	var g *argo.GuardRun
	if guarded {
		if err := argo.InstallPolicy(ctx, c, ns); err != nil {
			b.Fatal(err)
		}
		var err error
		g, err = argo.StartGuard(ctx, testenv.ControlPlane(b).Config, s, ns, guard.Options{MaxConcurrentReconciles: 2})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = g.Stop() }()
	}
	ctl, err := argo.Start(ctx, argo.Options{Kubeconfig: testenv.ControlPlane(b).Kubeconfig, Namespace: ns, Workers: argo.SeedWorkers, Log: os.Stderr})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ctl.Stop() }()
	wc, err := client.NewWithWatch(testenv.ControlPlane(b).Config, client.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	out, err := argo.Fleet(ctx, wc, ctl, ns, "fleet", n, 10*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	if g != nil {
		onWrites, onConflicts, onEvents = g.Writes.Load(), g.Conflicts.Load(), g.Events.Load()
	}
	return out
}
