package bench_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/scenarios/bench"
)

// The in-process operators' logs would drown the tables; controller-runtime
// complains (with a stack) when no logger is set.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m)
}

func stack(t testing.TB) bench.Stack {
	cp := testenv.ControlPlane(t)
	s := bench.Stack{Config: cp.Config, ControlPlane: cp, Postgres: testenv.Postgres(t)}
	if testing.Verbose() {
		s.Log = tlog{t}
	}
	return s
}

// TestLifecycleWrites keeps the API-writes targets under test: the
// guarantees may cost at most two writes more per Role lifecycle than the
// naive build (the record's create and delete), a lifecycle may cost at
// most six writes with its Events, and neither build may leave a role
// behind. retrySlack allows for an occasional retried write, which
// belongs to no lifecycle in particular.
func TestLifecycleWrites(t *testing.T) {
	l, err := bench.RunLifecycle(t.Context(), stack(t), 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", l)
	const retrySlack = 0.1
	if l.ExtraWrites() > bench.TargetExtraWrites+retrySlack {
		t.Fatalf("guarantees cost %.2f writes per Role lifecycle more than the naive build (%.2f vs %.2f); the target is at most %.0f",
			l.ExtraWrites(), l.WritesOn, l.WritesOff, bench.TargetExtraWrites)
	}
	if l.AllWritesOn() > bench.TargetAllWrites+retrySlack {
		t.Fatalf("a Role lifecycle costs %.2f API writes with its Events (%.2f Events); the target is at most %.0f", l.AllWritesOn(), l.EventsOn, bench.TargetAllWrites)
	}
	if l.EventsOn < 1 {
		t.Fatalf("%.2f Events per Role lifecycle: at least the Created Event is expected, so the counting is broken", l.EventsOn)
	}
	if l.CPURequests <= 0 {
		t.Fatalf("the guarantees' requests sent alone cost %v of CPU: they were not sent or not measured", l.CPURequests)
	}
	if l.WritesOff < 3 {
		t.Fatalf("naive build: %.2f writes per Role lifecycle; at least 3 (finalizer on, status, finalizer off) means the counting is broken", l.WritesOff)
	}
}

func TestNamespaceDeletionDropsEveryRole(t *testing.T) {
	nd, err := bench.RunNamespaceDeletion(t.Context(), stack(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	if nd.Gone <= 0 || nd.NaiveGone <= 0 || nd.Direct <= 0 || nd.CPU <= 0 || nd.NaiveCPU <= 0 {
		t.Fatalf("unmeasured: %+v", nd)
	}
	// The namespace goes after what was in it, each build's Server and
	// Roles included.
	if nd.Content <= 0 || nd.Content > nd.Gone || nd.NaiveContent <= 0 || nd.NaiveContent > nd.NaiveGone {
		t.Fatalf("content gone after %s (naive %s), namespace after %s (naive %s): want 0 < content ≤ namespace", nd.Content, nd.NaiveContent, nd.Gone, nd.NaiveGone)
	}
	// The bench waits for the namespace without asking the API server it
	// measures: what reads the namespace in the window is the namespace
	// controller (a look or two a pass) and the hold. Polling every 50 ms
	// was 100 or more GETs for these namespaces' 5 to 15 s.
	const fewGets = 20
	for build, got := range map[string]float64{"guarantees on": nd.Requests[getNamespaces], "naive build": nd.NaiveRequests[getNamespaces]} {
		if got > fewGets {
			t.Errorf("%s: %.1f %s while its namespace went (mean of two); want at most %d", build, got, getNamespaces, fewGets)
		}
	}
}

const getNamespaces = "GET namespaces"

// TestRunsLeaveNoNamespaceBehind: every run's namespaces go once the run
// is over. One left terminating (its Server and Secret still carrying the
// hold's finalizer, the operator stopped) would be retried by the
// namespace controller for as long as the control plane runs, costing
// every later run on it.
func TestRunsLeaveNoNamespaceBehind(t *testing.T) {
	s := stack(t)
	if _, err := bench.RunLifecycle(t.Context(), s, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := bench.RunOutage(t.Context(), s, 2, time.Second); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(s.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var all corev1.NamespaceList
	if err := c.List(t.Context(), &all); err != nil {
		t.Fatal(err)
	}
	for _, ns := range all.Items {
		if !strings.HasPrefix(ns.Name, "finale-bench-") {
			continue
		}
		// A pass or two of the namespace controller suffice for what a
		// run leaves (a Server, a Secret); a minute is many more.
		if err := controlplane.WaitGone(t.Context(), c, &ns, time.Minute); err != nil {
			t.Errorf("namespace %s of a finished run: %v; %s", ns.Name, err, conditions(t, c, ns.Name))
		}
	}
}

// conditions says why the namespace name is still there, as its status
// tells.
func conditions(t *testing.T, c client.Reader, name string) string {
	var ns corev1.Namespace
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &ns); err != nil {
		return err.Error()
	}
	var out []string
	for _, cond := range ns.Status.Conditions {
		if cond.Status == corev1.ConditionTrue {
			out = append(out, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	return strings.Join(out, "; ")
}

func TestBadInput(t *testing.T) {
	if _, err := bench.RunLifecycle(t.Context(), bench.Stack{}, 0); err == nil {
		t.Fatal("RunLifecycle with 0 Roles succeeded")
	}
	if _, err := bench.RunNamespaceDeletion(t.Context(), bench.Stack{}, -1); err == nil {
		t.Fatal("RunNamespaceDeletion with -1 Roles succeeded")
	}
	if _, err := bench.RunRequests(t.Context(), bench.Stack{}, 0); err == nil {
		t.Fatal("RunRequests with 0 requests succeeded")
	}
}

func TestRunRequests(t *testing.T) {
	r, err := bench.RunRequests(t.Context(), stack(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 8 || r.Record <= 0 || r.Empty <= 0 || r.Reads <= 0 {
		t.Fatalf("unmeasured: %+v", r)
	}
}

// roles is how many Roles one benchmark run uses; FINALE_BENCH_ROLES
// overrides the default.
func roles() int { return count("FINALE_BENCH_ROLES", 200) }

// count is the positive number in the environment variable name, else
// def.
func count(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkRoleLifecycle reports the guarantees' cost against the naive
// build. Run it with -benchtime=1x. Its runs share one control plane,
// on which every run costs more than on a control plane of its own, the
// naive build's most, so its ratios read lower than those of `make
// bench`, whose runs each get their own and which docs/benchmarks.md
// reports.
func BenchmarkRoleLifecycle(b *testing.B) {
	for b.Loop() {
		l, err := bench.RunLifecycle(b.Context(), stack(b), roles())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(l.On.Seconds(), "s-on")
		b.ReportMetric(l.Off.Seconds(), "s-off")
		b.ReportMetric(l.Ratio(), "ratio-on/off")
		b.ReportMetric(l.WritesOn, "writes/role-on")
		b.ReportMetric(l.WritesOff, "writes/role-off")
		b.ReportMetric(l.CPURatio(), "cpu-ratio-on/off")
		b.ReportMetric(l.HoldOnlyRatio(), "ratio-hold/off")
		b.ReportMetric(l.CPUHoldOnlyRatio(), "cpu-ratio-hold/off")
		b.ReportMetric(float64(l.Roles), "roles")
	}
}

// BenchmarkNamespaceDeletion reports a namespace's time to gone against
// dropping its roles directly. Run it with -benchtime=1x.
func BenchmarkNamespaceDeletion(b *testing.B) {
	for b.Loop() {
		nd, err := bench.RunNamespaceDeletion(b.Context(), stack(b), roles())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(nd.Gone.Seconds(), "s-namespace-gone")
		b.ReportMetric(nd.Direct.Seconds(), "s-direct-drop")
		b.ReportMetric(float64(nd.Roles), "roles")
	}
}

// BenchmarkGuaranteeRequests reports the stack's CPU for a cleanup
// record's write and removal against an empty ConfigMap's create and
// delete, and against the two live reads before a create: 1,000 of each
// by default (FINALE_BENCH_REQUESTS). Run it with -benchtime=1x.
func BenchmarkGuaranteeRequests(b *testing.B) {
	n := count("FINALE_BENCH_REQUESTS", 1000)
	for b.Loop() {
		r, err := bench.RunRequests(b.Context(), stack(b), n)
		if err != nil {
			b.Fatal(err)
		}
		each := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(2*r.N) }
		b.ReportMetric(each(r.Record), "cpu-ms/record")
		b.ReportMetric(each(r.Empty), "cpu-ms/empty-configmap")
		b.ReportMetric(each(r.Reads), "cpu-ms/reads")
		b.ReportMetric(r.Record.Seconds()/r.Empty.Seconds(), "ratio-record/empty")
		b.ReportMetric(r.Record.Seconds()/r.Reads.Seconds(), "ratio-record/reads")
	}
}

// tlog sends a Stack's progress to the test log.
type tlog struct{ t testing.TB }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// outage is the window of BenchmarkServerOutage; FINALE_BENCH_OUTAGE
// overrides the default five minutes.
func outage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FINALE_BENCH_OUTAGE")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Minute
}

// BenchmarkServerOutage: 100 Roles on a Server that is down for a window
// (five minutes by default): connection attempts and API writes with the
// default per-object backoff against the fixed 2-second retry of before.
// In scenarios/:
//
//	go test -run '^$' -bench ServerOutage -benchtime=1x -timeout 30m ./bench/
func BenchmarkServerOutage(b *testing.B) {
	for b.Loop() {
		o, err := bench.RunOutage(b.Context(), stack(b), 100, outage())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(o.Attempts), "attempts")
		b.ReportMetric(float64(o.AttemptsBaseline), "attempts-fixed-2s")
		b.ReportMetric(float64(o.AttemptsBaseline)/float64(max(o.Attempts, 1)), "attempts-ratio")
		b.ReportMetric(float64(o.Reconciles), "reconciles")
		b.ReportMetric(float64(o.ReconcilesBaseline), "reconciles-fixed-2s")
		b.ReportMetric(float64(o.ReconcilesBaseline)/float64(max(o.Reconciles, 1)), "reconciles-ratio")
		b.ReportMetric(float64(o.Writes), "api-writes")
		b.ReportMetric(float64(o.WritesBaseline), "api-writes-fixed-2s")
	}
}
