package scenarios

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Scenario names.
const (
	PoisonedClient    = "poisoned-client"
	NamespaceDeletion = "namespace-deletion"
	LaggingOwner      = "lagging-owner"
	// TemporalPoisonedClient is G1 on the seed's own stack (a real
	// Temporal server and SDK).
	TemporalPoisonedClient = "temporal-poisoned-client"
	CrashRole              = "crash-role"
	CrashDatabase          = "crash-database"
	NaiveSuffix            = "-naive"
	PoisonedClientNaive    = PoisonedClient + NaiveSuffix
	NamespaceDeletionNaive = NamespaceDeletion + NaiveSuffix
	LaggingOwnerNaive      = LaggingOwner + NaiveSuffix
)

// Fault types counted in results.
const (
	FaultProxyFreeze   = "proxy-freeze"
	FaultProxyReset    = "proxy-reset"
	FaultProxyRefuse   = "proxy-refuse"
	FaultProxyLatency  = "proxy-latency"
	FaultProxyStall    = "proxy-stall"
	FaultCrash         = "crash-after-write"
	FaultRestart       = "operator-restart"
	FaultOperatorDown  = "operator-down"
	FaultClockJump     = "clock-jump"
	FaultPausedWorkers = "paused-workers"
	FaultSecretDelete  = "secret-delete"
	FaultServerDelete  = "server-delete"
	FaultNSDelete      = "namespace-delete"
	FaultStaleEvents   = "stale-events"
	// FaultAPILag, FaultAPIPartition and FaultAPIFailover are a real second
	// kube-apiserver's faults (CampaignOptions.APIServers): its watch cache
	// lags, it is cut off from etcd, or the operator's traffic fails over
	// between it and the first.
	FaultAPILag       = "stale-apiserver-lag"
	FaultAPIPartition = "apiserver-partition"
	FaultAPIFailover  = "apiserver-failover"
	// FaultStartFailed: the operator could not start, under the faults in
	// force (its setup's reads went to an apiserver cut off from etcd, say)
	// or on a connection they broke, and was started again later, as the
	// kubelet restarts a crash-looping pod.
	FaultStartFailed = "operator-start-failed"
)

// ErrUnknown is returned by Run for a name Names does not list.
var ErrUnknown = fmt.Errorf("scenarios: unknown scenario; valid names: %s", strings.Join(Names(), ", "))

type scenarioFunc func(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error)

var registry = map[string]scenarioFunc{
	PoisonedClient:    runPoisoned,
	NamespaceDeletion: runNamespaceDeletion,
	LaggingOwner:      runLaggingOwner,
	// Additive: the G1 seed on its own stack.
	TemporalPoisonedClient: runTemporalPoisoned,
}

// Names lists every scenario Run accepts, sorted: each seed scenario, its
// naive counterpart (the guarantee switched off: its invariants must fail),
// and the crash-after-every-write campaigns.
func Names() []string {
	var out []string
	for n := range registry {
		out = append(out, n, n+NaiveSuffix)
	}
	out = append(out, CrashRole, CrashDatabase, Failover, FailoverNaive)
	sort.Strings(out)
	return out
}

// Run runs one named scenario on env and narrates it to out (nil is
// silent). An error means the scenario could not be run (harness, bad
// name); broken invariants are in Result.Violations, and Result.OK says
// whether they are what the variant expects.
func Run(ctx context.Context, name string, env Env, out io.Writer) (Result, error) {
	if err := env.check(); err != nil {
		return Result{Name: name}, err
	}
	switch name {
	case CrashRole:
		r, err := CrashAfterEveryWrite(ctx, KindRole, env, out)
		return r.Result, err
	case CrashDatabase:
		r, err := CrashAfterEveryWrite(ctx, KindDatabase, env, out)
		return r.Result, err
	case Failover, FailoverNaive:
		return runFailover(ctx, env, out, name == FailoverNaive)
	}
	base, naive := strings.CutSuffix(name, NaiveSuffix)
	f, ok := registry[base]
	if !ok {
		return Result{Name: name}, fmt.Errorf("%w (got %q)", ErrUnknown, name)
	}
	t0 := time.Now()
	r, err := f(ctx, env, out, naive)
	r.Name, r.ExpectViolations, r.Elapsed = name, naive, time.Since(t0)
	if r.Runs == 0 {
		r.Runs = 1
	}
	return r, err
}

// Result is what one scenario (or campaign) found.
type Result struct {
	Name string
	// ExpectViolations is set for naive variants: with the guarantee
	// switched off, the invariant must fail, or the scenario proves nothing.
	ExpectViolations bool
	Runs             int
	// Faults counts the faults injected, by type (the Fault* constants).
	Faults     map[string]int
	Violations []Violation
	Elapsed    time.Duration
	// Notes are per-step findings worth printing (one line each).
	Notes []string
}

// OK reports whether the invariants came out as the variant expects: none
// broken for the guarded build, at least one for the naive build.
func (r Result) OK() bool { return (len(r.Violations) > 0) == r.ExpectViolations }

// RunsPerMinute is the campaign's cost.
func (r Result) RunsPerMinute() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Runs) / r.Elapsed.Minutes()
}

func (r *Result) fault(kind string) {
	if r.Faults == nil {
		r.Faults = map[string]int{}
	}
	r.Faults[kind]++
}

func (r *Result) add(vs ...Violation) { r.Violations = append(r.Violations, vs...) }

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Table prints runs, faults injected by type, invariant violations and runs
// per minute.
func (r Result) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	verdict := "held"
	switch {
	case r.ExpectViolations && r.OK():
		verdict = "failed, as the naive build must"
	case r.ExpectViolations:
		verdict = "NOT FAILED: the naive scenario proves nothing"
	case !r.OK():
		verdict = "VIOLATED"
	}
	fmt.Fprintf(tw, "scenario\t%s\n", r.Name)
	fmt.Fprintf(tw, "runs\t%d\n", r.Runs)
	fmt.Fprintf(tw, "time\t%s\n", r.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(tw, "runs per minute\t%.1f\n", r.RunsPerMinute())
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(tw, "faults: %s\t%d\n", k, r.Faults[k])
	}
	byInv := map[Invariant]int{}
	for _, v := range r.Violations {
		byInv[v.Invariant]++
	}
	invs := []Invariant{NoLeak, Finished, NoLostResult, NoWrongDelete}
	for inv := range byInv {
		if !slices.Contains(invs, inv) {
			invs = append(invs, inv) // a scenario's own, sorted below
		}
	}
	slices.Sort(invs[4:])
	for _, inv := range invs {
		fmt.Fprintf(tw, "violations: %s\t%d\n", inv, byInv[inv])
	}
	fmt.Fprintf(tw, "invariants\t%s\n", verdict)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		if _, err := fmt.Fprintln(w, "  "+n); err != nil {
			return err
		}
	}
	for _, v := range r.Violations {
		if _, err := fmt.Fprintln(w, "  violation "+v.String()); err != nil {
			return err
		}
	}
	return nil
}
