package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/scenarios/internal/operator"
)

// Stack is where the benchmarks run: a control plane (admin config) and a
// PostgreSQL server, both throwaway.
type Stack struct {
	Config   *rest.Config
	Postgres *pgserver.Server
	// ControlPlane is Config's control plane: CPU is charged to its
	// processes, PostgreSQL's and this one's by process ID.
	ControlPlane *controlplane.ControlPlane
	// Log, when set, hears of progress (a 1,000-Role run takes minutes).
	Log io.Writer
	// NewControlPlane and NewPostgres, when set, give each measured run
	// of RunLifecycle and RunNamespaceDeletion a control plane and a
	// PostgreSQL of its own, started for it and stopped after it; Config,
	// ControlPlane and Postgres are then not used by those runs. A run on
	// servers that earlier runs used costs more the later it comes: the
	// API server keeps earlier runs' watch events in memory for minutes
	// (its heap in use went from 132 MiB before the first of four runs to
	// 457 MiB before the fourth, and the fourth, guarantees on like the
	// first, used 1.66 times the first's API server CPU), and one shared
	// PostgreSQL used 15.5 s of CPU in a fourth run against 2.0 to 2.7 s
	// in the three before it.
	NewControlPlane func(ctx context.Context) (*controlplane.ControlPlane, error)
	NewPostgres     func(ctx context.Context) (*pgserver.Server, error)
	// Operator, when set with NewControlPlane, returns the reference
	// operator's command (package app) with args, for RunLifecycle's
	// side-by-side runs (Pair), which run it as a child process.
	Operator func(args ...string) (*exec.Cmd, error)
}

// forRun is the stack one measured run uses, and what stops it.
func (s Stack) forRun(ctx context.Context) (Stack, func(), error) {
	s, stopPostgres, err := s.postgresForRun(ctx)
	if err != nil {
		return s, nil, err
	}
	if s.NewControlPlane == nil {
		return s, stopPostgres, nil
	}
	cp, err := s.NewControlPlane(ctx)
	if err != nil {
		stopPostgres()
		return s, nil, fmt.Errorf("bench: a control plane for the run: %w", err)
	}
	s.logf("  on a control plane of its own")
	s.Config, s.ControlPlane = cp.Config, cp
	return s, func() {
		if err := cp.Stop(); err != nil {
			s.logf("  stopping the run's control plane: %v", err)
		}
		stopPostgres()
	}, nil
}

// postgresForRun is the PostgreSQL one measured run uses, and what stops
// it.
func (s Stack) postgresForRun(ctx context.Context) (Stack, func(), error) {
	if s.NewPostgres == nil {
		return s, func() {}, nil
	}
	pg, err := s.NewPostgres(ctx)
	if err != nil {
		return s, nil, fmt.Errorf("bench: a PostgreSQL for the run: %w", err)
	}
	s.logf("  on a PostgreSQL of its own")
	s.Postgres = pg
	return s, func() {
		if err := pg.Stop(); err != nil {
			s.logf("  stopping the run's PostgreSQL: %v", err)
		}
	}, nil
}

// waitLimit bounds every wait of a run.
const waitLimit = 10 * time.Minute

// ErrLeak reports roles left in PostgreSQL after their objects were gone: a
// broken guarantee, not a slow one.
var ErrLeak = errors.New("bench: roles left in PostgreSQL")

// Lifecycle is the result of RunLifecycle.
type Lifecycle struct {
	Roles int
	// On and Off are the wall times of the guarantees-on and naive builds,
	// each summed over its two runs.
	On, Off time.Duration
	// WritesOn and WritesOff are API writes per Role lifecycle, counted at
	// the operator's client: to the Role and to its cleanup record.
	WritesOn, WritesOff float64
	// EventsOn and EventsOff are the Events per Role lifecycle, each one
	// more API write (through the event recorder's own client).
	EventsOn, EventsOff float64
	// CPUOn and CPUOff are the CPU time the stack's processes (API server,
	// etcd, controller manager, PostgreSQL, this process) used, summed like
	// the wall times.
	CPUOn, CPUOff time.Duration
	// HoldOnly and CPUHoldOnly are the same for the hold alone (no
	// records, the guarantees' pool), in the same sequence: what a build
	// whose cleanup records cost the API server nothing would come to, by
	// the targets' own measure.
	HoldOnly, CPUHoldOnly time.Duration
	// StatementsOn and StatementsOff are the PostgreSQL round trips per
	// Role lifecycle (every statement the operator's sessions sent);
	// ReadsOn and ReadsOff the API reads through the operator's client
	// that reached the API server (live reads; cached ones are free).
	StatementsOn, StatementsOff float64
	ReadsOn, ReadsOff           float64
	// CPURequests is the CPU of the API requests the guarantees add (each
	// Role's record written and removed, its Server and Secret read live),
	// sent alone on each guarantees-on run's stack after the run, summed
	// like CPUOn. Against ExtraCPU it tells whether anything but these
	// requests costs the guarantees CPU.
	CPURequests time.Duration
	// SideBySide are runs of the guarantees-on build and the naive build
	// made at once (Pair), after the others. SideBySideRecords and
	// SideBySideHold are the same with one guarantee alone in place of
	// the guarantees-on build (its Pair.On): cleanup records without the
	// hold, and the hold without records, both with the guarantees' pool.
	// Against the naive build at the same time, they tell what each
	// guarantee costs. None without Stack.NewControlPlane and
	// Stack.Operator.
	SideBySide, SideBySideRecords, SideBySideHold []Pair
}

// ExtraCPU is CPUOn - CPUOff: what the guarantees cost the stack.
func (l Lifecycle) ExtraCPU() time.Duration { return l.CPUOn - l.CPUOff }

// CPUFloor is the CPU ratio to the naive build that the guarantees'
// requests make by themselves: the naive build's CPU plus CPURequests,
// against the naive build's (both summed over two runs). It is the floor
// as measured alone: amid a run the requests share etcd's commits and
// connections and may cost less; ExtraCPU above CPURequests says that
// the sharing did not make up the difference.
func (l Lifecycle) CPUFloor() float64 {
	return ratio((l.CPUOff + l.CPURequests).Seconds(), l.CPUOff.Seconds())
}

// Ratio is On / Off.
func (l Lifecycle) Ratio() float64 { return l.On.Seconds() / l.Off.Seconds() }

// CPURatio is CPUOn / CPUOff.
func (l Lifecycle) CPURatio() float64 { return l.CPUOn.Seconds() / l.CPUOff.Seconds() }

// HoldOnlyRatio is HoldOnly / Off: the hold alone's wall time against
// the naive build's.
func (l Lifecycle) HoldOnlyRatio() float64 { return ratio(l.HoldOnly.Seconds(), l.Off.Seconds()) }

// CPUHoldOnlyRatio is CPUHoldOnly / CPUOff.
func (l Lifecycle) CPUHoldOnlyRatio() float64 {
	return ratio(l.CPUHoldOnly.Seconds(), l.CPUOff.Seconds())
}

// ExtraWrites is WritesOn - WritesOff.
func (l Lifecycle) ExtraWrites() float64 { return l.WritesOn - l.WritesOff }

// AllWritesOn is every API write of a Role lifecycle with the guarantees
// on, Events included.
func (l Lifecycle) AllWritesOn() float64 { return l.WritesOn + l.EventsOn }

// The targets, printed beside the figures.
const (
	// TargetRatio bounds the wall time with the guarantees on against the
	// naive build's, and TargetCPURatio the stack's CPU time.
	TargetRatio       = 1.15
	TargetCPURatio    = 1.25
	TargetExtraWrites = 2.0
	// TargetAllWrites bounds a Role lifecycle's writes, Events included.
	TargetAllWrites = 6.0
)

// run is one measured lifecycle of one build, or (plus) the sum of several.
type run struct {
	wall       time.Duration
	writes     float64
	events     float64
	cpu        time.Duration
	statements float64
	reads      float64
	// requestsCPU is the CPU of the guarantees' own API requests for the
	// run's Roles, sent alone (guaranteeRequests); guarantees-on runs only.
	requestsCPU time.Duration
}

// build is one build of the reference operator a run measures.
type build struct {
	name  string
	naive bool
	skip  lifecycle.Guarantee
}

var (
	guaranteesOn = build{name: "guarantees on"}
	naiveBuild   = build{name: "naive build", naive: true}
	recordsOnly  = build{name: "cleanup records alone (no hold)", skip: lifecycle.SkipHold}
	holdOnly     = build{name: "the hold alone (no records)", skip: lifecycle.SkipLedger}
)

// fileName is b's name as a part of a file name: the operator's log's.
func (b build) fileName() string {
	return strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(b.name)
}

func buildOf(naive bool) build {
	if naive {
		return naiveBuild
	}
	return guaranteesOn
}

// lifecycleOrder runs each build twice, mirrored, so that none profits
// from its place in the sequence.
var lifecycleOrder = []build{guaranteesOn, holdOnly, naiveBuild, naiveBuild, holdOnly, guaranteesOn}

// RunLifecycle creates then deletes n Roles with each build in
// lifecycleOrder and returns the sums.
func RunLifecycle(ctx context.Context, s Stack, n int) (Lifecycle, error) {
	if n <= 0 {
		return Lifecycle{}, fmt.Errorf("bench: %d Roles: give at least one", n)
	}
	sums := map[build]run{}
	for i, b := range lifecycleOrder {
		s.logf("lifecycle %d/%d: %d Roles, %s", i+1, len(lifecycleOrder), n, b.name)
		r, err := lifecycleRun(ctx, s, n, b)
		if err != nil {
			return lifecycleOf(n, sums), fmt.Errorf("bench: lifecycle, %s: %w", b.name, err)
		}
		sums[b] = sums[b].plus(r)
	}
	l := lifecycleOf(n, sums)
	pairs, err := runSideBySide(ctx, s, n)
	l.SideBySide, l.SideBySideRecords, l.SideBySideHold = pairs[guaranteesOn], pairs[recordsOnly], pairs[holdOnly]
	return l, err
}

// lifecycleOf is the Lifecycle of each build's summed runs: times summed,
// per-lifecycle counts the mean over the build's runs in lifecycleOrder.
func lifecycleOf(n int, sums map[build]run) Lifecycle {
	on, off, hold := sums[guaranteesOn], sums[naiveBuild], sums[holdOnly]
	onRuns, offRuns := runsOf(guaranteesOn), runsOf(naiveBuild)
	return Lifecycle{
		Roles: n,
		On:    on.wall, Off: off.wall, CPUOn: on.cpu, CPUOff: off.cpu, CPURequests: on.requestsCPU,
		HoldOnly: hold.wall, CPUHoldOnly: hold.cpu,
		WritesOn: on.writes / onRuns, WritesOff: off.writes / offRuns,
		EventsOn: on.events / onRuns, EventsOff: off.events / offRuns,
		StatementsOn: on.statements / onRuns, StatementsOff: off.statements / offRuns,
		ReadsOn: on.reads / onRuns, ReadsOff: off.reads / offRuns,
	}
}

// runsOf is how many runs of b lifecycleOrder holds.
func runsOf(b build) float64 {
	n := 0
	for _, x := range lifecycleOrder {
		if x == b {
			n++
		}
	}
	return float64(n)
}

// plus is r and o added figure by figure.
func (r run) plus(o run) run {
	return run{wall: r.wall + o.wall, writes: r.writes + o.writes, events: r.events + o.events, cpu: r.cpu + o.cpu,
		statements: r.statements + o.statements, reads: r.reads + o.reads, requestsCPU: r.requestsCPU + o.requestsCPU}
}

func lifecycleRun(ctx context.Context, s Stack, n int, b build) (run, error) {
	s, stop, err := s.forRun(ctx)
	if err != nil {
		return run{}, err
	}
	defer stop()
	env, err := s.setup(ctx)
	if err != nil {
		return run{}, err
	}
	defer env.close()
	script := faultinject.NewScript()
	var stmts statements
	op, err := env.startOperator(ctx, b, script, stmts.hear)
	if err != nil {
		return run{}, err
	}
	defer func() { _ = op.Stop() }() // the run's figures are what it returns
	if err := serverReady(ctx, op.Cache, env.ns); err != nil {
		return run{}, err
	}
	before := len(script.Calls())
	stmts0 := stmts.snapshot()
	cpu0, err := s.cpu()
	if err != nil {
		return run{}, err
	}
	start := time.Now()
	if err := env.createRoles(ctx, n); err != nil {
		return run{}, err
	}
	if err := waitRoles(ctx, op.Cache, env.ns, "all Ready", func(l *v1alpha1.RoleList) bool { return readyCount(l) == n }); err != nil {
		return run{}, err
	}
	ready := time.Since(start)
	if err := env.deleteAllRoles(ctx, op.Cache); err != nil {
		return run{}, err
	}
	wall := time.Since(start)
	cpu1, err := s.cpu()
	if err != nil {
		return run{}, err
	}
	s.logf("  all Ready after %s, all gone %s later", ready.Round(time.Millisecond), (wall - ready).Round(time.Millisecond))
	cpu := s.logCPU(cpu1, cpu0)
	byStmt := stmts.since(stmts0)
	s.logf("  PostgreSQL round trips per Role lifecycle: %.2f (%s); API calls per Role lifecycle: %s",
		float64(total(byStmt))/float64(n), perRole(byStmt, n), perRole(callCounts(script.Calls()[before:]), n))
	if err := env.noRolesLeft(ctx); err != nil {
		return run{}, err
	}
	events, err := env.roleEvents(ctx)
	if err != nil {
		return run{}, err
	}
	r := run{
		wall: wall, writes: float64(lifecycleWrites(script.Calls()[before:])) / float64(n), events: float64(events) / float64(n), cpu: cpu,
		statements: float64(total(byStmt)) / float64(n), reads: float64(lifecycleReads(script.Calls()[before:])) / float64(n),
	}
	// The counts end with the run; the hold lets go after it.
	if err := env.unheld(ctx); err != nil {
		return run{}, err
	}
	if b != guaranteesOn {
		return r, nil
	}
	// On the same stack, the operator stopped.
	if err := op.Stop(); err != nil {
		return run{}, err
	}
	if r.requestsCPU, err = env.requestsCPU(ctx, n); err != nil {
		return run{}, fmt.Errorf("the guarantees' requests alone: %w", err)
	}
	return r, nil
}

// roleEvents counts the Events about Roles in the run's namespace, once
// their number has stopped changing for half a second (the recorder sends
// them in the background).
func (e *env) roleEvents(ctx context.Context) (int, error) {
	n, changed := -1, time.Now()
	err := controlplane.WaitFor(ctx, waitLimit, "Role Events to settle", func(ctx context.Context) (bool, error) {
		var l eventsv1.EventList
		if err := e.c.List(ctx, &l, client.InNamespace(e.ns)); err != nil {
			return false, err
		}
		c := 0
		for _, ev := range l.Items {
			if ev.Regarding.Kind == "Role" {
				c++
				if ev.Series != nil {
					c += int(ev.Series.Count) - 1
				}
			}
		}
		if c != n {
			n, changed = c, time.Now()
		}
		return time.Since(changed) >= 500*time.Millisecond, nil
	})
	return n, err
}

// lifecycleWrites counts the writes of Role lifecycles: to the Roles and
// to their cleanup records (the only ConfigMaps the operator writes). The
// hold's finalizers on the Server and its Secret are the parent's, two
// writes each per parent however many Roles it has, and left out.
func lifecycleWrites(calls []faultinject.Call) int {
	n := 0
	for _, c := range calls {
		if c.Verb.IsWrite() && (c.Kind == "Role" || c.Kind == "ConfigMap") {
			n++
		}
	}
	return n
}

// NamespaceDeletion is the result of RunNamespaceDeletion.
type NamespaceDeletion struct {
	Roles int
	// Gone is from the namespace's delete to its being gone, every role
	// dropped by the operator through the hold: the mean of two
	// deletions.
	Gone time.Duration
	// NaiveGone is the same for the naive build, in the same run: its
	// Server and Secret go at once, so its Roles let go without dropping
	// anything (NaiveLeaked, the most of one of its deletions, stay in
	// PostgreSQL; the run drops them after measuring).
	NaiveGone   time.Duration
	NaiveLeaked int
	// Content and NaiveContent are, for each build, the time from the
	// namespace's delete until its Roles and its Server are gone (the
	// mean of two deletions): what the operator does. The rest of Gone is
	// the namespace controller's: it looks at a namespace's content again
	// only seconds after a look that found objects with finalizers left.
	Content, NaiveContent time.Duration
	// CPU and NaiveCPU are the CPU time the stack's processes used from
	// the namespace's delete to its being gone, as Lifecycle's.
	CPU, NaiveCPU time.Duration
	// Requests and NaiveRequests are the API server's requests by verb
	// and resource over the same window (APILoad.ByResource, every
	// client), the mean of two deletions.
	Requests, NaiveRequests map[string]float64
	// Direct is dropping as many roles over one connection, nothing else.
	Direct time.Duration
}

// Ratio is Gone / NaiveGone.
func (nd NamespaceDeletion) Ratio() float64 { return nd.Gone.Seconds() / nd.NaiveGone.Seconds() }

// TargetNamespaceRatio bounds a namespace deletion's time against the
// naive build's in the same run.
const TargetNamespaceRatio = 1.5

// RunNamespaceDeletion creates n Roles in a namespace, waits until they are
// Ready, deletes the namespace and waits until it is gone, twice with each
// build in the order on, off, off, on (as RunLifecycle: with one deletion
// per build the ratio moved by half between idle runs); then drops n roles
// directly for the baseline.
func RunNamespaceDeletion(ctx context.Context, s Stack, n int) (NamespaceDeletion, error) {
	if n <= 0 {
		return NamespaceDeletion{}, fmt.Errorf("bench: %d Roles: give at least one", n)
	}
	res := NamespaceDeletion{Roles: n, Requests: map[string]float64{}, NaiveRequests: map[string]float64{}}
	for _, naive := range []bool{false, true, true, false} {
		r, err := namespaceRun(ctx, s, n, naive)
		if err != nil {
			return res, fmt.Errorf("bench: namespace deletion, %s: %w", buildOf(naive).name, err)
		}
		if naive {
			res.NaiveGone += r.gone / 2
			res.NaiveContent += r.content / 2
			res.NaiveCPU += r.cpu / 2
			res.NaiveLeaked = max(res.NaiveLeaked, r.leaked)
			addHalf(res.NaiveRequests, r.requests)
		} else {
			addHalf(res.Requests, r.requests)
			res.Gone += r.gone / 2
			res.Content += r.content / 2
			res.CPU += r.cpu / 2
		}
	}
	// The baseline needs PostgreSQL alone: no control plane, no Server.
	s, stop, err := s.postgresForRun(ctx)
	if err != nil {
		return res, err
	}
	defer stop()
	db, err := pgx.Connect(ctx, s.Postgres.DSN())
	if err != nil {
		return res, err
	}
	defer func() { _ = db.Close(context.Background()) }() // best effort: the figure is taken
	direct := pgtarget.RandomName("bench_direct_") + "_"
	for i := range n {
		if _, err := db.Exec(ctx, fmt.Sprintf("CREATE ROLE %s%d", direct, i)); err != nil {
			return res, err
		}
	}
	start := time.Now()
	for i := range n {
		if _, err := db.Exec(ctx, fmt.Sprintf("DROP ROLE %s%d", direct, i)); err != nil {
			return res, err
		}
	}
	res.Direct = time.Since(start)
	return res, nil
}

// namespaceRun is one build's namespace deletion: its times and CPU, and
// how many roles it left in PostgreSQL (an error with the guarantees on;
// counted, then dropped, for the naive build).
func namespaceRun(ctx context.Context, s Stack, n int, naive bool) (nsRun, error) {
	s, stop, err := s.forRun(ctx)
	if err != nil {
		return nsRun{}, err
	}
	defer stop()
	env, err := s.setup(ctx)
	if err != nil {
		return nsRun{}, err
	}
	defer env.close()
	op, err := env.startOperator(ctx, buildOf(naive), nil, nil)
	if err != nil {
		return nsRun{}, err
	}
	defer func() { _ = op.Stop() }() // the run's figures are what it returns
	if err := serverReady(ctx, op.Cache, env.ns); err != nil {
		return nsRun{}, err
	}
	s.logf("namespace deletion: %d Roles, %s", n, buildOf(naive).name)
	if err := env.createRoles(ctx, n); err != nil {
		return nsRun{}, err
	}
	if err := waitRoles(ctx, op.Cache, env.ns, "all Ready", func(l *v1alpha1.RoleList) bool { return readyCount(l) == n }); err != nil {
		return nsRun{}, err
	}
	last, err := lastDeleted(ctx, op.Cache, func(o client.Object) bool { return o.GetNamespace() == env.ns }, &v1alpha1.Role{}, &v1alpha1.Server{})
	if err != nil {
		return nsRun{}, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: env.ns}}
	nsGone, err := lastDeleted(ctx, op.Cache, func(o client.Object) bool { return o.GetName() == env.ns }, ns)
	if err != nil {
		return nsRun{}, err
	}
	// Read outside the CPU's window: scraping /metrics is the bench's work.
	load0, err := readAPILoad(ctx, s.Config)
	if err != nil {
		return nsRun{}, err
	}
	cpu0, err := s.cpu()
	if err != nil {
		return nsRun{}, err
	}
	start := time.Now()
	if err := env.c.Delete(ctx, ns); err != nil {
		return nsRun{}, err
	}
	if err := controlplane.WaitFor(ctx, waitLimit, "namespace "+env.ns+" to be gone", func(context.Context) (bool, error) { return !nsGone().IsZero(), nil }); err != nil {
		return nsRun{}, err
	}
	r := nsRun{gone: nsGone().Sub(start), content: last().Sub(start)}
	cpu1, err := s.cpu()
	if err != nil {
		return nsRun{}, err
	}
	load1, err := readAPILoad(ctx, s.Config)
	if err != nil {
		return nsRun{}, err
	}
	s.logf("  gone after %s, its Roles and Server after %s", r.gone.Round(time.Millisecond), r.content.Round(time.Millisecond))
	r.cpu = s.logCPU(cpu1, cpu0)
	load := load1.Sub(load0)
	r.requests = load.ByResource
	// Whether a slower machine adds requests (retries, conflicts, another
	// pass of the namespace controller) or only makes each one dearer.
	s.logRequests(load)
	if !naive {
		return r, env.noRolesLeft(ctx)
	}
	r.leaked, err = env.dropRolesLeft(ctx)
	return r, err
}

// nsRun is one build's namespace deletion.
type nsRun struct {
	// gone is the namespace's time to gone; content its Roles' and
	// Server's (the last of them), both from the namespace's delete; cpu
	// the stack's CPU until the namespace was gone.
	gone, content, cpu time.Duration
	// leaked counts the roles it left in PostgreSQL.
	leaked int
	// requests are the API server's over the same window, by verb and
	// resource.
	requests map[string]float64
}

// addHalf adds half of each of from's counts to sum's.
func addHalf(sum, from map[string]float64) {
	for k, v := range from {
		sum[k] += v / 2
	}
}

// lastDeleted tells when the cache last saw an object of one of kinds
// deleted that match accepts: an event handler notes it, so knowing costs
// the API server nothing, where polling for the objects would add
// requests to the CPU being measured, the more the longer the wait.
func lastDeleted(ctx context.Context, c cache.Cache, match func(client.Object) bool, kinds ...client.Object) (func() time.Time, error) {
	var mu sync.Mutex
	var last time.Time
	deleted := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(client.Object); ok && match(o) {
			mu.Lock()
			last = time.Now()
			mu.Unlock()
		}
	}
	for _, k := range kinds {
		inf, err := c.GetInformer(ctx, k)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: deleted}); err != nil {
			return nil, err
		}
	}
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return last
	}, nil
}

// dropRolesLeft drops the roles a naive run left behind, and says how many.
func (e *env) dropRolesLeft(ctx context.Context) (int, error) {
	rows, err := e.db.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname LIKE $1", e.prefix+"%")
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		if _, err := e.db.Exec(ctx, "DROP ROLE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}

func (s Stack) logf(format string, args ...any) {
	if s.Log != nil {
		fmt.Fprintf(s.Log, format+"\n", args...)
	}
}

// env is one run's namespaces and connections.
type env struct {
	s      Stack
	scheme *runtime.Scheme
	c      client.Client
	db     *pgx.Conn
	ns     string // the Server's and Roles'
	recNS  string // the cleanup records'
	prefix string // of every role name this run creates
}

func (s Stack) setup(ctx context.Context) (*env, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	c, err := client.New(s.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	if err := controlplane.InstallCRDs(ctx, c, crds...); err != nil {
		return nil, err
	}
	db, err := pgx.Connect(ctx, s.Postgres.DSN())
	if err != nil {
		return nil, err
	}
	e := &env{s: s, scheme: scheme, c: c, db: db, prefix: pgtarget.RandomName("bench_") + "_"}
	for _, p := range []*string{&e.ns, &e.recNS} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "finale-bench-"}}
		if err := c.Create(ctx, ns); err != nil {
			e.close()
			return nil, err
		}
		*p = ns.Name
	}
	objs := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "pg-admin"},
			Data:       map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(s.Postgres.Password)},
		},
		&v1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "pg"},
			Spec: v1alpha1.ServerSpec{
				Host: s.Postgres.Host, Port: int32(s.Postgres.Port), SSLMode: v1alpha1.SSLModeDisable,
				CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "pg-admin"},
			},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

// close deletes the run's namespaces without waiting for them to go (a
// run that stops its operator with the namespace still there has first
// seen the hold let its Server and Secret go: unheld).
func (e *env) close() {
	ctx := context.Background()
	for _, ns := range []string{e.ns, e.recNS} {
		if ns != "" {
			_ = e.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) // best effort
		}
	}
	_ = e.db.Close(ctx) // best effort
}

func (e *env) createRoles(ctx context.Context, n int) error {
	for i := range n {
		if err := e.c.Create(ctx, benchRole(e.ns, i, fmt.Sprintf("%s%d", e.prefix, i))); err != nil {
			return err
		}
	}
	return nil
}

// benchRole is the i-th Role of a namespace, of the Server pg, dropping
// its role on deletion.
func benchRole(ns string, i int, roleName string) *v1alpha1.Role {
	return &v1alpha1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r%d", i)},
		Spec: v1alpha1.RoleSpec{
			ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: roleName,
			DeletionPolicy: v1alpha1.DeletionPolicyDelete,
		},
	}
}

// deleteAllRoles deletes the run's Roles and waits until c shows none.
func (e *env) deleteAllRoles(ctx context.Context, c client.Reader) error {
	if err := e.c.DeleteAllOf(ctx, &v1alpha1.Role{}, client.InNamespace(e.ns)); err != nil {
		return err
	}
	return waitRoles(ctx, c, e.ns, "all gone", func(l *v1alpha1.RoleList) bool { return len(l.Items) == 0 })
}

// unheld waits until the hold has let the run's Server and its Secret go,
// as it does once their last dependent is gone, before the operator
// stops: a namespace deleted with them still held would stay terminating,
// retried by the namespace controller for as long as the control plane
// runs, at a cost to every later run on it.
func (e *env) unheld(ctx context.Context) error {
	return controlplane.WaitFor(ctx, waitLimit, "the hold to let the run's Server and Secret go", func(ctx context.Context) (bool, error) {
		srv, sec, err := e.readParent(ctx)
		if err != nil {
			return false, err
		}
		return !controllerutil.ContainsFinalizer(srv, hold.Finalizer) && !controllerutil.ContainsFinalizer(sec, hold.Finalizer), nil
	})
}

func (e *env) noRolesLeft(ctx context.Context) error {
	var left int
	if err := e.db.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname LIKE $1", e.prefix+"%").Scan(&left); err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("%w: %d named %s*", ErrLeak, left, e.prefix)
	}
	return nil
}

// startOperator runs the operator in this process, its client counted by
// script when set, and waits until its cache is filled.
func (e *env) startOperator(ctx context.Context, b build, script *faultinject.Script, stmts func(context.Context, string, error)) (*operator.Running, error) {
	r, err := operator.Start(ctx, operator.Options{
		Config: e.s.Config, Scheme: e.scheme, Script: script,
		Operator: controller.Options{RecordsNamespace: e.recNS, Naive: b.naive, Skip: b.skip, PoolName: "bench-" + e.recNS, Statements: stmts},
	})
	if err != nil {
		return nil, err
	}
	if err := r.WaitForCacheSync(ctx); err != nil {
		_ = r.Stop() // the sync error is the one to report
		return nil, err
	}
	return r, nil
}

func serverReady(ctx context.Context, c client.Reader, ns string) error {
	return controlplane.WaitFor(ctx, waitLimit, "the Server to be Ready", func(ctx context.Context) (bool, error) {
		var srv v1alpha1.Server
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg"}, &srv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return meta.IsStatusConditionTrue(srv.Status.Conditions, v1alpha1.ConditionReady), nil
	})
}

// waitRoles waits on the operator's cache: free for the API server, where
// polling Lists of N Roles would load the server being measured.
func waitRoles(ctx context.Context, c client.Reader, ns, what string, done func(*v1alpha1.RoleList) bool) error {
	return controlplane.WaitFor(ctx, waitLimit, what, func(ctx context.Context) (bool, error) {
		var l v1alpha1.RoleList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		return done(&l), nil
	})
}

func readyCount(l *v1alpha1.RoleList) int {
	n := 0
	for _, r := range l.Items {
		if meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady) {
			n++
		}
	}
	return n
}

// cpu is the CPU time the stack's processes (its control plane's,
// PostgreSQL's and this one's, each with its children) have used so far,
// by process ID: a process named like a stack component but belonging to
// another stack on the machine is not charged.
func (s Stack) cpu() (map[string]time.Duration, error) { return s.cpuWith("self", os.Getpid()) }

// cpuWith is cpu with the process pid, under name, in place of this one.
func (s Stack) cpuWith(name string, pid int) (map[string]time.Duration, error) {
	if s.ControlPlane == nil || s.Postgres == nil {
		return nil, errors.New("bench: Stack.ControlPlane and Stack.Postgres are needed to charge CPU to the stack's processes")
	}
	pids := s.ControlPlane.PIDs()
	pids["postgres"] = s.Postgres.PID()
	pids[name] = pid
	return procstat.CPUOfTrees(pids)
}

// cpuOf runs f and returns the CPU the stack's processes used meanwhile,
// by process.
func (s Stack) cpuOf(f func() error) (map[string]time.Duration, error) {
	before, err := s.cpu()
	if err != nil {
		return nil, err
	}
	if err := f(); err != nil {
		return nil, err
	}
	after, err := s.cpu()
	if err != nil {
		return nil, err
	}
	return procstat.Sub(after, before, 0), nil
}

// logCPU logs the CPU each of the stack's processes used between two
// readings, and returns their sum.
func (s Stack) logCPU(after, before map[string]time.Duration) time.Duration {
	byProcess := procstat.Sub(after, before, 0)
	s.logf("  CPU by process: %v", byProcess)
	return sumCPU(byProcess)
}

// sumCPU is the CPU of every process in byProcess.
func sumCPU(byProcess map[string]time.Duration) time.Duration {
	var sum time.Duration
	for _, v := range byProcess {
		sum += v
	}
	return sum
}
