package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
)

// Options tune Run.
type Options struct {
	// Quick is the CI mode: at most 2 dependents, one run per experiment,
	// two kills per crash run.
	Quick bool
	// Seed of the first run of each experiment; run i uses Seed+i, so a
	// broken run replays alone with its printed seed and Runs 1.
	Seed int64
	// Only runs these experiments (Experiments names them); empty is all.
	Only []string
	// Runs overrides the runs per experiment, and every one of them runs;
	// zero is the mode's, an experiment stopping at its first broken run.
	Runs int
	// Progress receives one line per step of note (the control plane's
	// start, each run's verdict); nil is silent.
	Progress io.Writer
	// WorkDir holds kubeconfigs and logs; empty is a temporary directory,
	// removed at the end unless a run broke (the report names it).
	WorkDir string
	// Command is how reproductions name the command (for instance
	// "finale check -f operator.yaml"); empty is that with the spec's file.
	Command string
	// KillWindow, when positive, is the window the crash experiments'
	// kills fall in, instead of the creates' and the cleanup's times
	// measured by the check's first runs; a reproduction sets it to the
	// window of the run it reproduces.
	KillWindow time.Duration
	// Lanes is how many stacks (control plane, service, fault proxies)
	// run experiments side by side; zero is 2 when the description is
	// safe to (nothing in this process, every probe on a service check
	// starts per stack) and the machine has 2 CPUs, else 1. A positive
	// value asserts that each run's probe lists only its own resources.
	Lanes int
}

// ErrUnknownExperiment is returned for a name in Options.Only that
// Experiments does not list.
var ErrUnknownExperiment = errors.New("check: unknown experiment")

// Run runs the experiments against the operator the spec describes, on a
// control plane of its own, and reports each one's verdict. An error means
// the check could not run (a bad description, a control plane that did
// not start, an operator that never made its resources in the first
// run...); broken invariants are in the Report.
func Run(ctx context.Context, spec *Spec, opts Options) (rep Report, err error) {
	t0 := time.Now()
	rep = Report{Operator: spec.Name, File: spec.file, Seed: opts.Seed, Quick: opts.Quick, Started: t0}
	defer func() { rep.Elapsed = Duration(time.Since(t0)) }()
	if err := spec.Validate(); err != nil {
		return rep, err
	}
	if err := spec.checkPaths(); err != nil {
		return rep, err
	}
	exps, err := selected(opts.Only)
	if err != nil {
		return rep, err
	}
	tmp := opts.WorkDir
	if tmp == "" {
		if tmp, err = os.MkdirTemp("", "finale-check-"); err != nil {
			return rep, err
		}
		defer func() {
			if rep.OK() && err == nil {
				_ = os.RemoveAll(tmp) // only logs of runs that held
			} else {
				rep.Notes = append(rep.Notes, "logs and kubeconfigs are kept in "+tmp)
			}
		}()
	}
	n, why, err := lanes(spec, opts.Lanes, runtime.NumCPU())
	if err != nil {
		return rep, err
	}
	stacks, err := newStacks(ctx, spec, tmp, n, opts.Progress)
	defer func() {
		for _, st := range stacks {
			st.close()
		}
	}()
	if err != nil {
		return rep, err
	}
	st := stacks[0]
	if st.scopes, err = spec.checkScopes(mapperScope(st.c.RESTMapper())); err != nil {
		return rep, err
	}
	for _, o := range stacks[1:] {
		o.scopes = st.scopes // the same CRDs on every lane
	}
	if note := st.scopes.note(); note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	rep.Setup = Duration(time.Since(t0))
	rep.Notes = append(rep.Notes, spec.Notes()...)
	rep.Notes = append(rep.Notes, fmt.Sprintf(noteLanes, n, why))
	results, err := runLanes(ctx, stacks, exps, opts)
	for _, res := range results {
		if res.Name != "" {
			rep.Experiments = append(rep.Experiments, res)
		}
	}
	if err != nil {
		return rep, err
	}
	for k, e := range exps {
		if results[k].Verdict == Skipped {
			continue
		}
		if note := e.note(st); note != "" && !slices.Contains(rep.Notes, note) {
			rep.Notes = append(rep.Notes, note)
		}
	}
	return rep, nil
}

// reasonSettled is why an experiment ran fewer runs than its mode's.
const reasonSettled = "run %d broke, which settles the verdict; %d more run(s) not run (--runs runs them all)"

func earlySuffix(r RunReport) string {
	if r.EndedEarly == "" {
		return ""
	}
	return "; ended early, " + r.EndedEarly
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// reasonNeverReady is why the experiments after a first, undisturbed run
// that never got ready are not run.
const reasonNeverReady = "not run: the operator never made its resources in the first, undisturbed run (a ready violation); fix that first"

// noteNoProbe says what a description without a probe leaves unchecked.
const noteNoProbe = "no-leak and no-duplicate (what the operator makes in an external service) were not checked, and escaped is skipped: " +
	"the description gives no probe (an operator that makes no external resource)"

// noteResults says what a description without results leaves unchecked.
const noteResults = "no-lost-result (owners whose result-capture children must not lose a result) was not checked: " +
	"the description gives no results (results.children, results.probe, results.complete)"

// selected returns the experiments named (all when none is).
func selected(only []string) ([]*Experiment, error) {
	all := Experiments()
	if len(only) == 0 {
		return all, nil
	}
	var out []*Experiment
	for _, e := range all {
		if slices.Contains(only, e.Name) {
			out = append(out, e)
		}
	}
	for _, n := range only {
		if !slices.ContainsFunc(all, func(e *Experiment) bool { return e.Name == n }) {
			return nil, fmt.Errorf("%w %q; valid: %s", ErrUnknownExperiment, n, strings.Join(Names(), ", "))
		}
	}
	return out, nil
}

// run is one run of one experiment: its namespaces, its operator, its
// objects, what the probe saw, its timeline.
type run struct {
	st   *stack
	spec *Spec
	exp  *Experiment
	opts Options
	t0   time.Time
	res  RunReport
	v    Values
	// ns is the owner namespace, opNS the operator's.
	ns, opNS string
	logPath  string
	op       *operator
	// cacheLagging: the operator's cache goes through the lagging
	// apiserver (the stale-apiserver experiment); allLagging: everything
	// it does.
	cacheLagging, allLagging bool
	// stalled: the operator (re)starts in its stalled mode.
	stalled bool
	// goneIn is how long the dependents took to go after their deletion
	// (namespaceAfterDependents).
	goneIn time.Duration

	secret, parent *unstructured.Unstructured
	dependents     []*unstructured.Unstructured
	probe          *prober
	results        *resultTracker
	// cluster are the world's objects the run created that are
	// cluster-scoped: no namespace deletion reaches them.
	cluster []*unstructured.Unstructured
	// opCluster are operator.manifests' cluster-scoped objects, removed
	// at the run's end.
	opCluster []*unstructured.Unstructured

	tmu sync.Mutex // guards res.Timeline, which the prober appends to
}

func (st *stack) run(ctx context.Context, e *Experiment, seed int64, opts Options) (res RunReport, err error) {
	r := &run{
		st: st, spec: st.spec, exp: e, opts: opts, t0: time.Now(),
		res: RunReport{Seed: seed},
	}
	r.res.Reproduce = r.reproduce()
	defer func() {
		r.res.Elapsed = Duration(time.Since(r.t0))
		r.tmu.Lock()
		res = r.res
		r.tmu.Unlock()
	}()
	defer r.cleanup(ctx)
	if err := e.run(ctx, r); err != nil {
		if ctx.Err() != nil {
			return r.res, ctx.Err()
		}
		return r.res, err
	}
	if len(r.res.Violations) > 0 {
		r.res.Verdict = Broke
		if r.op != nil {
			r.res.OperatorLog = tailFile(r.logPath, 40)
		}
		deps := make([]Object, 0, len(r.dependents))
		for _, d := range r.dependents {
			deps = append(deps, Object{Kind: d.GetKind(), Name: d.GetName()})
		}
		r.res.Cause = notTheExperiments(r.res, deps)
	} else {
		r.res.Verdict = Held
	}
	return r.res, nil
}

func (r *run) reproduce() string {
	c := r.opts.Command
	if c == "" {
		c = "finale check -f " + cmp.Or(r.spec.file, "operator.yaml")
	}
	s := fmt.Sprintf("%s --seed %d --only %s --runs 1", c, r.res.Seed, r.exp.Name)
	if r.opts.Quick {
		s += " --quick"
	}
	return s
}

// event adds a step to the timeline (the prober's goroutine adds too).
func (r *run) event(format string, args ...any) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.res.Timeline = append(r.res.Timeline, Event{At: Duration(time.Since(r.t0)), What: fmt.Sprintf(format, args...)})
}

func (r *run) fault(format string, args ...any) {
	f := fmt.Sprintf(format, args...)
	r.res.Faults = append(r.res.Faults, f)
	r.event("fault: %s", f)
}

// violation returns the run's first violation of inv.
func (r RunReport) violation(inv Invariant) (Violation, bool) {
	for _, v := range r.Violations {
		if v.Invariant == inv {
			return v, true
		}
	}
	return Violation{}, false
}

func (r *run) violate(inv Invariant, format string, args ...any) {
	v := Violation{Invariant: inv, Detail: fmt.Sprintf(format, args...)}
	r.res.Violations = append(r.res.Violations, v)
	r.event("VIOLATION %s", v)
}

func (r *run) note(format string, args ...any) {
	r.res.Notes = append(r.res.Notes, fmt.Sprintf(format, args...))
}

// dependentCount is the run's N.
func (r *run) dependentCount() int {
	if r.opts.Quick {
		return min(r.spec.Dependents.Count, quickDependents)
	}
	return r.spec.Dependents.Count
}

// begin creates the run's namespaces and the operator's manifests, reads
// the probe's baseline and starts the operator.
func (r *run) begin(ctx context.Context) error {
	var err error
	if r.ns, err = r.namespace(ctx, r.spec.namespacePrefix()); err != nil {
		return err
	}
	if r.opNS, err = r.namespace(ctx, "check-op-"); err != nil {
		return err
	}
	r.logPath = filepath.Join(r.st.tmp, fmt.Sprintf("%s-seed%d-operator.log", r.exp.Name, r.res.Seed))
	kc, cache := r.st.env.ControlPlane.Kubeconfig, r.st.env.ControlPlane.Kubeconfig
	if r.cacheLagging || r.allLagging {
		_, lk, err := r.st.laggingAPIServer(ctx)
		if err != nil {
			return err
		}
		cache = lk
		if r.allLagging {
			kc = lk
		}
	}
	r.v = r.st.values(r.ns, r.opNS, r.ns[len(r.ns)-5:], r.res.Seed, kc, cache)
	r.event("namespaces %s (objects) and %s (the operator's) created", r.ns, r.opNS)
	if r.spec.Operator.Manifests != "" {
		objs, err := r.manifests("operator.manifests", r.spec.Operator.Manifests, r.v)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if !r.st.scopes.clusterScoped(o) {
				o.SetNamespace(r.opNS)
			}
			if err := r.st.c.Create(ctx, o); err != nil {
				return fmt.Errorf("operator.manifests: create %s %s: %w", o.GetKind(), o.GetName(), err)
			}
			if o.GetNamespace() == "" {
				r.opCluster = append(r.opCluster, o)
			}
		}
	}
	r.probe = newProber(r)
	if r.spec.Results != nil {
		r.results = newResultTracker(r)
	}
	if err := r.probe.baseline(ctx); err != nil {
		return err
	}
	return r.start(ctx)
}

func (r *run) namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := r.st.c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace %s...: %w", prefix, err)
	}
	return ns.Name, nil
}

func (r *run) manifests(field, text string, v Values) ([]*unstructured.Unstructured, error) {
	return r.spec.objects(field, text, v)
}

// start starts the operator (again).
func (r *run) start(ctx context.Context) error {
	if r.spec.Operator.Start != nil {
		cfg := r.st.adminConfig()
		cacheCfg := r.st.adminConfig()
		if r.cacheLagging || r.allLagging {
			a, _, err := r.st.laggingAPIServer(ctx)
			if err != nil {
				return err
			}
			cacheCfg.Host = a.Config.Host
			if r.allLagging {
				cfg.Host = a.Config.Host
			}
		}
		r.op = startInProcess(r.spec.Operator.Start, OperatorEnv{Config: cfg, CacheConfig: cacheCfg, Values: r.v, Stalled: r.stalled}, r.logPath)
		r.event("operator started in-process%s", stalledSuffix(r.stalled))
		return nil
	}
	cmdline, envs := r.spec.Operator.Command, r.spec.Operator.Env
	if st := r.spec.Operator.Stalled; r.stalled && st != nil {
		cmdline = append(slices.Clone(cmdline), st.Args...)
		envs = maps.Clone(envs)
		if envs == nil {
			envs = map[string]string{}
		}
		maps.Copy(envs, st.Env)
	}
	argv, err := expandAll("operator.command", cmdline, r.v)
	if err != nil {
		return err
	}
	argv[0] = r.spec.program(argv[0])
	env, err := expandEnv("operator.env", envs, r.v)
	if err != nil {
		return err
	}
	p, err := startProc("operator", argv, env, r.spec.path(r.spec.Operator.Dir), r.logPath)
	if err != nil {
		return err
	}
	r.op = &operator{p: p}
	r.event("operator started (pid %d)%s", p.cmd.Process.Pid, stalledSuffix(r.stalled))
	return nil
}

func stalledSuffix(stalled bool) string {
	if stalled {
		return ", stalled (operator.stalled)"
	}
	return ""
}

// kill SIGKILLs the operator.
func (r *run) kill() {
	if r.op == nil || r.op.exited() {
		r.event("operator already exited (%v) when the kill came", r.opExit())
		return
	}
	pid := r.op.pid()
	r.op.kill()
	r.res.Kills++
	r.fault("SIGKILL the operator (pid %d)", pid)
}

func (r *run) opExit() error {
	if r.op == nil {
		return nil
	}
	return r.op.exitErr()
}

// watchExit notes an operator that exited by itself (it may be a
// finding: an operator that crashes on a fault).
func (r *run) checkAlive() {
	if r.op != nil && r.op.exited() && r.op.exitErr() != nil {
		r.note("the operator exited by itself: %v", r.op.exitErr())
	}
}

// create creates the Secret, the parent and the dependents.
func (r *run) create(ctx context.Context) error {
	created := "created"
	var parents []*unstructured.Unstructured
	if r.spec.hasSecret() {
		sec, err := r.manifests("parent.secret", r.spec.Parent.Secret, r.v)
		if err != nil {
			return err
		}
		r.secret = sec[0]
		parents = append(parents, r.secret)
	}
	if r.spec.hasParent() {
		par, err := r.manifests("parent.object", r.spec.Parent.Object, r.v)
		if err != nil {
			return err
		}
		r.parent = par[0]
		parents = append(parents, r.parent)
	}
	for _, o := range parents {
		r.place(o)
		if err := r.st.c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		r.created(o)
		created += fmt.Sprintf(" %s %s,", o.GetKind(), o.GetName())
	}
	if len(parents) > 0 {
		created = strings.TrimSuffix(created, ",") + " and"
	}
	n := r.dependentCount()
	for i := range n {
		v := r.v
		v.Index = i
		objs, err := r.manifests("dependents.template", r.spec.Dependents.Template, v)
		if err != nil {
			return err
		}
		o := objs[0]
		r.place(o)
		if err := r.st.c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		r.created(o)
		r.dependents = append(r.dependents, o)
	}
	if r.spec.hasProbe() {
		r.res.Expected = r.spec.Parent.External + n*r.spec.perDependent()
	}
	r.event("%s %d %s", created, n, r.dependents[0].GetKind())
	return nil
}

// waitReady waits until the probe lists every expected resource and every
// dependent is ready; a violation otherwise. It returns how long it took.
func (r *run) waitReady(ctx context.Context) (time.Duration, bool) {
	t0 := time.Now()
	rd, _ := r.spec.readyCheck() // Validate compiled it
	var last string
	watch := r.watchStuck(r.spec.stuckWindow(), r.ns)
	ready := func(ctx context.Context) bool {
		n, err := r.probe.count(ctx)
		if err != nil {
			if ctx.Err() == nil { // not the wait's own deadline
				last = err.Error()
			}
			return false
		}
		if n < r.res.Expected {
			last = fmt.Sprintf("the probe lists %d of %d external resources", n, r.res.Expected)
			return false
		}
		if why := r.resultsReady(ctx); why != "" {
			last = why
			return false
		}
		if rd != nil {
			for _, d := range r.dependents {
				ok, why := r.dependentReady(ctx, d, rd)
				if !ok {
					last = why
					return false
				}
			}
		}
		return true
	}
	err := r.waitProbe(ctx, r.spec.readyTimeout(), "the creates", func(ctx context.Context) (bool, error) {
		if ready(ctx) {
			return true, nil
		}
		return false, watch.stuck(ctx)
	})
	if ctx.Err() != nil {
		return 0, false
	}
	if err != nil {
		r.checkAlive()
		if errors.Is(err, errStuck) {
			r.endedEarly("the creates", watch)
			r.violate(Ready, "not ready: %s (%s after the creates, of the %s bound): %s; %s", watch.still(), time.Since(t0).Round(time.Second), r.spec.readyTimeout(), last, r.conditions(ctx))
			return 0, false
		}
		r.violate(Ready, "not ready within %s: %s; %s", r.spec.readyTimeout(), last, r.conditions(ctx))
		return 0, false
	}
	d := time.Since(t0)
	r.event("ready: %s (%s)", r.readyWhat(rd), d.Round(10*time.Millisecond))
	r.settle(ctx)
	return d, true
}

// settle samples the probe until what it lists of the run has not changed
// for two sampling intervals, so that a late create (a duplicate made
// after the count was reached) is seen before anything is deleted.
func (r *run) settle(ctx context.Context) {
	every := r.spec.probeEvery()
	var last []string
	stable := time.Now()
	_ = r.waitProbe(ctx, r.spec.readyTimeout(), "the external resources to settle", func(ctx context.Context) (bool, error) {
		ids, err := r.probe.current(ctx)
		if err != nil {
			return false, nil
		}
		if !slices.Equal(ids, last) {
			last, stable = ids, time.Now()
		}
		return time.Since(stable) >= 2*every, nil
	})
}

// conditions summarizes each dependent's status conditions: what the
// operator says about the ones that are not ready.
func (r *run) conditions(ctx context.Context) string {
	var parts []string
	for _, d := range r.dependents {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(d.GroupVersionKind())
		if err := r.st.c.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
			parts = append(parts, fmt.Sprintf("%s %s: %v", d.GetKind(), d.GetName(), err))
			continue
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		var cs []string
		for _, c := range conds {
			m, _ := c.(map[string]any)
			cs = append(cs, fmt.Sprintf("%v=%v (%v: %v)", m["type"], m["status"], m["reason"], m["message"]))
		}
		if len(cs) == 0 {
			cs = append(cs, "no conditions")
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", d.GetKind(), d.GetName(), strings.Join(cs, ", ")))
	}
	return strings.Join(parts, "; ")
}

// readyWhat says what made the run ready.
func (r *run) readyWhat(rd *readyCheck) string {
	var parts []string
	if r.spec.hasProbe() {
		parts = append(parts, fmt.Sprintf("the probe lists the %d external resources", r.res.Expected))
	}
	if c := r.childrenSuffix(); c != "" {
		parts = append(parts, strings.TrimPrefix(c, ", "))
	}
	if rd != nil {
		parts = append(parts, "every dependent "+rd.String())
	}
	return strings.Join(parts, ", ")
}

// dependentReady reads o and decides it by rd.
func (r *run) dependentReady(ctx context.Context, o *unstructured.Unstructured, rd *readyCheck) (bool, string) {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	if err := r.st.c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
		return false, err.Error()
	}
	if ok, why := rd.ready(got.Object); !ok {
		return false, fmt.Sprintf("%s %s: %s", o.GetKind(), o.GetName(), why)
	}
	return true, ""
}

// deleteObject asks for one object's deletion.
func (r *run) deleteObject(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	r.probe.deletionAsked()
	if err := r.st.c.Delete(ctx, o, opts...); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
	}
	return nil
}

// deleteNamespaces asks for the namespaces' deletion.
func (r *run) deleteNamespaces(ctx context.Context, names []string, opts ...client.DeleteOption) error {
	r.probe.deletionAsked()
	for _, n := range names {
		if err := r.st.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, opts...); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete namespace %s: %w", n, err)
		}
	}
	r.event("namespace(s) %s deletion asked", strings.Join(names, ", "))
	if slices.Contains(names, r.ns) {
		return r.deleteCluster(ctx, opts...)
	}
	return nil
}

// waitDeletingOrGone waits, briefly, until o has its deletion timestamp.
func (r *run) waitDeletingOrGone(ctx context.Context, o *unstructured.Unstructured) {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	_ = controlplane.WaitFor(ctx, 10*time.Second, o.GetName()+" deleting", func(ctx context.Context) (bool, error) {
		err := r.st.c.Get(ctx, client.ObjectKeyFromObject(o), got)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && got.GetDeletionTimestamp() != nil, nil
	})
}

// finish waits until the namespaces are gone and the probe lists nothing
// new, within timeouts.finish from since, and records the invariants:
// finished, no-leak, no-duplicate.
func (r *run) finish(ctx context.Context, since time.Time, namespaces ...string) {
	finished := r.waitNamespacesGone(ctx, since, namespaces...)
	r.leaks(ctx, since, r.spec.finish(), afterDeletion, finished)
	r.duplicates()
}

// What a leak's bound is counted from, in its violation.
const (
	afterDeletion = "the deletion"
	afterReturn   = "the operator's return (timeouts.sweep)"
)

// waitNamespacesGone waits until the namespaces are gone, within
// timeouts.finish from since, and records the finished invariant.
func (r *run) waitNamespacesGone(ctx context.Context, since time.Time, namespaces ...string) bool {
	what := "namespace(s) " + strings.Join(namespaces, ", ")
	var cluster []*unstructured.Unstructured
	if slices.Contains(namespaces, r.ns) && len(r.cluster) > 0 {
		cluster = r.cluster // deleted with the owner namespace
		what += " and the run's cluster-scoped objects"
	}
	finished := r.waitEnd(ctx, since, what, func(ctx context.Context) (bool, error) {
		for _, n := range namespaces {
			err := r.st.c.Get(ctx, client.ObjectKey{Name: n}, &corev1.Namespace{})
			if err == nil || !apierrors.IsNotFound(err) {
				return false, nil // there, or a transient error: look again
			}
		}
		return r.objectsGone(cluster)(ctx)
	}, namespaces, nil)
	if finished {
		r.res.Finish = Duration(time.Since(since))
		r.event("%s gone (%s after the deletion)", what, r.res.Finish)
	}
	return finished
}

// waitEnd waits until done, within timeouts.finish from since; otherwise
// it lists what is left in the namespaces and records a finished
// violation naming the objects it is about: those of about still there
// (the dependents, when what names their kind), or, with about nil,
// everything that keeps the namespaces. It reports whether done came.
func (r *run) waitEnd(ctx context.Context, since time.Time, what string, done func(context.Context) (bool, error), namespaces []string, about []*unstructured.Unstructured) bool {
	bound := r.spec.finish()
	watch := r.watchStuck(r.spec.stuckWindow(), namespaces...)
	err := controlplane.WaitFor(ctx, max(time.Until(since.Add(bound)), time.Millisecond), what+" to go", func(ctx context.Context) (bool, error) {
		if ok, err := done(ctx); ok || err != nil {
			return ok, err
		}
		return false, watch.stuck(ctx)
	})
	if ctx.Err() != nil || err == nil {
		return err == nil
	}
	left, conds, lerr := r.st.leftovers(ctx, namespaces...)
	if lerr != nil {
		r.note("listing what was left failed: %v", lerr)
	}
	left = append(left, r.clusterLeft(ctx)...)
	for _, l := range left {
		r.res.LeftBehind = append(r.res.LeftBehind, Object{Kind: l.Kind, Namespace: l.Namespace, Name: l.Name, Deleting: Duration(l.Deleting), Finalizers: l.Finalizers})
	}
	r.res.Conditions = conds
	r.checkAlive()
	objs := objectsOf(r.res.LeftBehind, about)
	detail := fmt.Sprintf("%s not gone %s after the deletion: %s", what, bound, summarize(objs, about != nil))
	if errors.Is(err, errStuck) {
		r.endedEarly(what+" to go", watch)
		detail = fmt.Sprintf("%s not gone: %s (%s after the deletion, of the %s bound): %s", what, watch.still(), time.Since(since).Round(time.Second), bound, summarize(objs, about != nil))
	}
	v := Violation{Invariant: Finished, Detail: detail, Objects: objs}
	r.res.Violations = append(r.res.Violations, v)
	r.event("VIOLATION %s", v)
	return false
}

// objectsOf are the objects of left that are one of about (kind,
// namespace and name); all of left when about is nil.
func objectsOf(left []Object, about []*unstructured.Unstructured) []Object {
	if about == nil {
		return left
	}
	var out []Object
	for _, o := range left {
		if slices.ContainsFunc(about, func(a *unstructured.Unstructured) bool {
			return a.GetKind() == o.Kind && a.GetNamespace() == o.Namespace && a.GetName() == o.Name
		}) {
			out = append(out, o)
		}
	}
	return out
}

// leaks records the no-leak invariant: the probe must list nothing of the
// run's within bound from since (timeouts.finish: a sweeper may finish
// after the namespaces went; timeouts.sweep for escaped); a run whose
// deletion did not finish gets one look. after names since in the
// violation.
func (r *run) leaks(ctx context.Context, since time.Time, bound time.Duration, after string, finished bool) {
	if !r.spec.hasProbe() {
		return // nothing to look through (noteNoProbe)
	}
	wait := max(time.Until(since.Add(bound)), 0)
	if !finished {
		wait = 0
	}
	var leaked []string
	// A sweeper is silent until its settle window passed: no early end
	// before timeouts.sweep.
	watch := r.watchStuck(max(r.spec.stuckWindow(), r.spec.Timeouts.Sweep.Duration))
	perr := r.waitProbe(ctx, max(wait, time.Millisecond), "nothing left in the external service", func(ctx context.Context) (bool, error) {
		ids, err := r.probe.current(ctx)
		if err != nil {
			return false, nil
		}
		leaked = ids
		if len(ids) == 0 {
			return true, nil
		}
		return false, watch.stuck(ctx)
	})
	if perr == nil || ctx.Err() != nil {
		return
	}
	stuck := errors.Is(perr, errStuck)
	if leaked == nil {
		ids, err := r.probe.current(ctx)
		if err != nil {
			r.note("the probe failed at the end: %v", err)
			return
		}
		leaked = ids
	}
	if len(leaked) > 0 {
		r.res.Leaked = leaked
		if stuck {
			r.endedEarly("nothing left in the external service", watch)
			r.violate(NoLeak, "%d external resource(s) left: %s (%s after %s, of the %s bound): %s", len(leaked), watch.still(), time.Since(since).Round(time.Second), after, bound, strings.Join(firstN(leaked, 5), "; "))
			return
		}
		r.violate(NoLeak, "%d external resource(s) left %s after %s: %s", len(leaked), bound, after, strings.Join(firstN(leaked, 5), "; "))
	}
}

// objectsGone reports whether every object is gone.
func (r *run) objectsGone(objs []*unstructured.Unstructured) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			err := r.st.c.Get(ctx, client.ObjectKeyFromObject(o), got)
			if err == nil || !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}
}

// duplicates compares what the probe saw with what the objects make.
func (r *run) duplicates() {
	seen := r.probe.seenAll()
	r.res.Seen = len(seen)
	if r.res.Expected > 0 && len(seen) > r.res.Expected {
		r.res.Duplicates = len(seen) - r.res.Expected
		r.violate(NoDuplicate, "the probe listed %d distinct external resources during the run, the objects make %d: %s",
			len(seen), r.res.Expected, strings.Join(firstN(seen, 8), "; "))
	}
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("... %d more", len(s)-n))
}

// summarize names the objects a finished violation is about, in one
// line: kind, name, finalizers and how long each has been deleting. named: the violation names their kind (every Widget), so an
// empty list means they went after the bound.
func summarize(objs []Object, named bool) string {
	var parts []string
	for _, o := range objs {
		s := o.Kind + " " + o.Name
		if len(o.Finalizers) > 0 {
			s += " " + fmt.Sprint(o.Finalizers)
		}
		if o.Deleting > 0 {
			s += " deleting for " + Duration(time.Duration(o.Deleting).Round(time.Second)).String()
		} else {
			s += " not deleting"
		}
		parts = append(parts, s)
	}
	switch {
	case len(parts) > 0:
		return strings.Join(firstN(parts, 6), "; ")
	case named:
		return "none of them left when listed (they went just after the bound)"
	}
	return "nothing listable left in them (the namespace controller had not finished)"
}

// cleanup ends the run whatever happened: faults healed, the operator
// stopped, anything left released and the namespaces deleted, so that the
// next run starts clean.
func (r *run) cleanup(ctx context.Context) {
	if r.probe != nil {
		r.probe.stop()
	}
	r.st.heal()
	r.st.resetAll()
	if r.op != nil && !r.op.exited() {
		r.op.stop(r.spec.grace())
	}
	ctx = context.WithoutCancel(ctx)
	if err := r.releaseCluster(ctx); err != nil {
		r.note("releasing the cluster-scoped objects: %v", err)
	}
	var nss []string
	for _, n := range []string{r.ns, r.opNS} {
		if n != "" {
			nss = append(nss, n)
		}
	}
	if len(nss) == 0 {
		return
	}
	_ = r.deleteNamespacesQuiet(ctx, nss)
	if err := r.st.release(ctx, nss...); err != nil {
		r.note("releasing what was left: %v", err)
	}
}

func (r *run) deleteNamespacesQuiet(ctx context.Context, names []string) error {
	var errs []error
	for _, n := range names {
		if err := r.st.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stripFinalizers removes every finalizer of each object, as an admin does
// by hand (kubectl patch ... finalizers: null), and returns "Kind name
// [finalizers]" for each object that had any. Each object is read first
// so that what was removed is reported; an object already gone is
// skipped.
func (r *run) stripFinalizers(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	var removed []string
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := r.st.c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("read %s %s before removing its finalizers: %w", o.GetKind(), o.GetName(), err)
		}
		fins := got.GetFinalizers()
		if len(fins) == 0 {
			continue
		}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := r.st.c.Patch(ctx, got, patch); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("remove the finalizers of %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		removed = append(removed, fmt.Sprintf("%s %s %v", o.GetKind(), o.GetName(), fins))
	}
	return removed, nil
}
