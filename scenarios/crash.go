package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/faultinject"
)

// Kind is the managed kind a crash campaign drives through its lifecycle.
type Kind string

// The kinds of the reference operator.
const (
	KindRole     Kind = "Role"
	KindDatabase Kind = "Database"
)

// ErrKind is returned for a Kind other than KindRole and KindDatabase.
var ErrKind = errors.New("scenarios: kind must be Role or Database")

// Write is one API write the operator made, as the recording run saw it:
// the Nth call of its verb on its kind.
type Write struct {
	Verb faultinject.Verb
	Kind string
	Nth  int
}

func (w Write) String() string { return fmt.Sprintf("%s %s #%d", w.Verb, w.Kind, w.Nth) }

// External is one PostgreSQL statement the operator ran, as the recording
// run saw it: the Nth round trip of this statement text (whitespace
// collapsed, quoted identifiers and literals masked as "?" and '?').
type External struct {
	SQL string
	Nth int
}

func (e External) String() string {
	q := e.SQL
	if len(q) > 40 {
		q = q[:40] + "..."
	}
	return fmt.Sprintf("SQL %q #%d", q, e.Nth)
}

// crashPoint is one crash run's choice: after an API write or after an
// external call (exactly one is set).
type crashPoint struct {
	write    *Write
	external *External
}

func (p crashPoint) String() string {
	if p.write != nil {
		return p.write.String()
	}
	return p.external.String()
}

// statements numbers the operator's statements as a statement hook sees
// them and, when armed with a target, fires onCrash once right after the
// target's round trip. Safe for concurrent use (reconciles of both
// controllers run statements at once).
type statements struct {
	target  *External
	onCrash func()

	mu      sync.Mutex // guards seen, calls and crashed
	seen    map[string]int
	calls   []External
	crashed bool
}

func newStatements(target *External, onCrash func()) *statements {
	return &statements{target: target, onCrash: onCrash, seen: map[string]int{}}
}

func (s *statements) hook(_ context.Context, sql string, _ error) {
	q := normalizeSQL(sql)
	s.mu.Lock()
	s.seen[q]++
	e := External{SQL: q, Nth: s.seen[q]}
	s.calls = append(s.calls, e)
	fire := !s.crashed && s.target != nil && *s.target == e
	if fire {
		s.crashed = true
	}
	s.mu.Unlock()
	if fire {
		s.onCrash()
	}
}

// literals matches quoted identifiers and string literals: object names
// carry a per-run random prefix or uid, so the statement text alone, with
// them masked, is what identifies a statement across runs.
var literals = regexp.MustCompile(`"(?:[^"]|"")*"|'(?:[^']|'')*'`)

// normalizeSQL collapses whitespace and masks identifiers and literals.
func normalizeSQL(sql string) string {
	q := strings.Join(strings.Fields(sql), " ")
	return literals.ReplaceAllStringFunc(q, func(m string) string { return m[:1] + "?" + m[:1] })
}

func (s *statements) Crashed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

func (s *statements) Calls() []External {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]External(nil), s.calls...)
}

// RunRecord is one campaign run that broke an invariant, with what it takes
// to replay it.
type RunRecord struct {
	Run int
	// Seed of a randomized run (0 for crash runs).
	Seed int64
	// Schedule is the run's steps, in order.
	Schedule   []string
	Violations []Violation
}

// CampaignReport is what a campaign found.
type CampaignReport struct {
	Result
	// Writes are the operator's API writes the recording run enumerated
	// (crash campaigns only).
	Writes []Write
	// Externals are the operator's PostgreSQL statements the recording run
	// enumerated (crash campaigns only); ExternalRuns is how many of them
	// got a crash run (all unless CrashOptions.MaxExternal sampled them).
	Externals    []External
	ExternalRuns int
	// NotReached counts crash runs whose chosen write never came (the
	// operator's writes vary a little from run to run).
	NotReached int
	// Failed are the runs that broke an invariant.
	Failed []RunRecord
}

// Table prints the campaign's table, then every failing run's seed and
// schedule so it can be replayed.
func (c CampaignReport) Table(w io.Writer) error {
	if err := c.Result.Table(w); err != nil {
		return err
	}
	if len(c.Writes) > 0 {
		fmt.Fprintf(w, "  writes enumerated: %d; external calls enumerated: %d (%d crashed after); crash points not reached: %d\n",
			len(c.Writes), len(c.Externals), c.ExternalRuns, c.NotReached)
	}
	for _, f := range c.Failed {
		fmt.Fprintf(w, "  FAILED run %d seed %d\n", f.Run, f.Seed)
		for _, s := range f.Schedule {
			fmt.Fprintf(w, "    %s\n", s)
		}
		for _, v := range f.Violations {
			fmt.Fprintf(w, "    violation %s\n", v)
		}
	}
	return nil
}

// CrashAfterEveryWrite runs kind's lifecycle (create, update, delete, then
// another create and its namespace's deletion) once with a recording
// client and a recording statement hook to enumerate every API write and
// every PostgreSQL statement the operator makes, then once per write and
// once per statement crashing the operator right after it lands (its
// caches and connection pool dropped), restarting it clean, letting it
// heal, and checking no-leak, finished and no-wrong-delete.
func CrashAfterEveryWrite(ctx context.Context, kind Kind, env Env, out io.Writer) (CampaignReport, error) {
	return CrashCampaign(ctx, CrashOptions{Kind: kind}, env, out)
}

// CrashOptions configure CrashCampaign.
type CrashOptions struct {
	Kind Kind
	// MaxExternal, when positive, caps the external crash points at an
	// evenly spaced, deterministic sample of that many (the first and last
	// always included); zero crashes after every one. API writes are never
	// sampled.
	MaxExternal int
}

// CrashCampaign is CrashAfterEveryWrite with options.
func CrashCampaign(ctx context.Context, o CrashOptions, env Env, out io.Writer) (rep CampaignReport, err error) {
	kind := o.Kind
	rep = CampaignReport{Result: Result{Name: CrashRole}}
	if kind == KindDatabase {
		rep.Name = CrashDatabase
	}
	if kind != KindRole && kind != KindDatabase {
		return rep, fmt.Errorf("%w (got %q)", ErrKind, kind)
	}
	t0 := time.Now()
	defer func() { rep.Elapsed = time.Since(t0) }()
	out = serialized(out)
	worlds := make([]*world, crashWorkers)
	defer func() {
		for _, w := range worlds {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range worlds {
		if worlds[i], err = newWorld(ctx, env, false); err != nil {
			return rep, err
		}
	}
	u, err := SeedUntagged(ctx, worlds[0].db, worlds[0].prefix, 2)
	if err != nil {
		return rep, err
	}

	rec := faultinject.NewScript()
	w := worlds[0]
	ns, err := w.namespace(ctx, "crash-")
	if err != nil {
		return rep, err
	}
	w.only = []string{ns}
	stmts := newStatements(nil, nil)
	w.setStatements(stmts.hook)
	if err := w.start(ctx, rec); err != nil {
		return rep, err
	}
	if err := w.lifecycleIn(ctx, kind, ns); err != nil {
		return rep, fmt.Errorf("recording run: %w", err)
	}
	w.stop()
	rep.Writes = writesOf(rec.Calls())
	rep.Externals = stmts.Calls()
	say(out, "recording run: the %s lifecycle made %d API writes and %d external calls", kind, len(rep.Writes), len(rep.Externals))
	if len(rep.Writes) == 0 || len(rep.Externals) == 0 {
		return rep, fmt.Errorf("recording run saw %d writes and %d external calls; the campaign would prove nothing", len(rep.Writes), len(rep.Externals))
	}
	var points []crashPoint
	for i := range rep.Writes {
		points = append(points, crashPoint{write: &rep.Writes[i]})
	}
	for _, i := range sample(len(rep.Externals), o.MaxExternal) {
		points = append(points, crashPoint{external: &rep.Externals[i]})
	}
	rep.ExternalRuns = len(points) - len(rep.Writes)

	// Crash runs go crashWorkers at a time, each world with its own
	// operator restricted to its own namespaces, records and proxy.
	type outcome struct {
		crashed bool
		res     Result
		err     error
	}
	outcomes := make([]outcome, len(points))
	err = onWorlds(ctx, worlds, len(points), func(w *world, i int) {
		o := &outcomes[i]
		o.crashed, o.err = w.crashRun(ctx, kind, points[i], &o.res)
		say(out, "run %2d: crash after %-28s crashed=%-5v violations=%d", i, points[i], o.crashed, len(o.res.Violations))
	})
	if err != nil {
		return rep, err
	}
	for i, o := range outcomes {
		if o.err != nil {
			return rep, fmt.Errorf("crash after %s: %w", points[i], o.err)
		}
		rep.Runs++
		if o.crashed {
			rep.fault(FaultCrash)
			rep.fault(FaultRestart)
		} else {
			rep.NotReached++
		}
		rep.add(o.res.Violations...)
		if len(o.res.Violations) > 0 {
			rep.Failed = append(rep.Failed, RunRecord{Run: i, Schedule: []string{"crash after " + points[i].String()}, Violations: o.res.Violations})
		}
	}
	vs, err := CheckNoWrongDelete(ctx, w.db, u)
	if err != nil {
		return rep, err
	}
	rep.add(vs...)
	return rep, u.Drop(ctx, w.db)
}

// crashWorkers is how many crash runs go at once.
const crashWorkers = 2

// sample picks at most max of n indexes, evenly spaced, first and last
// included; max <= 0 or max >= n is all of them.
func sample(n, max int) []int {
	var out []int
	if max <= 0 || max >= n {
		for i := range n {
			out = append(out, i)
		}
		return out
	}
	if max == 1 {
		return []int{0}
	}
	for k := range max {
		i := k * (n - 1) / (max - 1)
		if len(out) == 0 || out[len(out)-1] != i {
			out = append(out, i)
		}
	}
	return out
}

// crashRun runs the lifecycle once in a fresh namespace, crashing the
// operator right after p, and checks the invariants into r. An error is a
// harness failure; a step that does not finish in time is a violation.
func (w *world) crashRun(ctx context.Context, kind Kind, p crashPoint, r *Result) (bool, error) {
	ns, err := w.namespace(ctx, "crash-")
	if err != nil {
		return false, err
	}
	w.only = []string{ns}
	var fired func() bool
	var script *faultinject.Script
	if p.write != nil {
		wr := *p.write
		script = faultinject.NewScript(faultinject.Fault{Verb: wr.Verb, Kind: wr.Kind, Nth: wr.Nth, Crash: true})
		fired = script.Crashed
	} else {
		// The statement has landed when the hook hears of it; cancelling
		// the operator's manager there is the crash, exactly as a
		// Script's OnCrash does after an API write.
		stmts := newStatements(p.external, w.crash)
		w.setStatements(stmts.hook)
		fired = stmts.Crashed
	}
	if err := w.start(ctx, script); err != nil {
		return false, err
	}
	crashed, err := w.lifecycleWithCrash(ctx, kind, ns, fired)
	if ctx.Err() != nil {
		return crashed, ctx.Err()
	}
	if err != nil {
		// A step that did not finish within the bound after the restart
		// is the "finished" invariant broken, not a harness failure:
		// record it, free the namespace, go on.
		r.add(Violation{Finished, fmt.Sprintf("crash after %s: %v", p, err)})
		if err := w.release(ctx, ns); err != nil {
			return crashed, err
		}
	}
	return crashed, w.checkEnd(ctx, r, Untagged{})
}

// writesOf numbers the writes among calls by verb and kind.
func writesOf(calls []faultinject.Call) []Write {
	seen := map[[2]string]int{}
	var out []Write
	for _, c := range calls {
		if !c.Verb.IsWrite() {
			continue
		}
		k := [2]string{string(c.Verb), c.Kind}
		seen[k]++
		out = append(out, Write{Verb: c.Verb, Kind: c.Kind, Nth: seen[k]})
	}
	return out
}

// lifecycleWithCrash runs the lifecycle while a watcher restarts the
// operator clean as soon as the script's crash fires. It reports whether
// the crash fired.
func (w *world) lifecycleWithCrash(ctx context.Context, kind Kind, ns string, crashedFn func() bool) (bool, error) {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var restartErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := controlplane.WaitFor(rctx, time.Hour, "the scripted crash", func(context.Context) (bool, error) {
			return crashedFn(), nil
		})
		if err != nil {
			return
		}
		w.stop()
		restartErr = w.start(ctx, nil)
	}()
	err := w.lifecycleIn(ctx, kind, ns)
	cancel()
	wg.Wait()
	crashed := crashedFn()
	w.stop()
	return crashed, errors.Join(err, restartErr)
}

// lifecycle drives one object of kind through create, update and delete,
// then a second one through create and its namespace's deletion. It waits
// for each deletion with the "finished" bound and for Ready with
// readyTimeout (a create is not a deletion, and under load it waits out
// create-in-doubt windows); a step not reached in time is an error of the
// run (reported by the caller).
func (w *world) lifecycleIn(ctx context.Context, kind Kind, ns string) error {
	if err := w.server(ctx, ns); err != nil {
		return err
	}
	mk := func(name string) client.Object {
		if kind == KindRole {
			return w.role(ns, name)
		}
		d := w.database(ns, name)
		// Created Retain and switched to Delete by the update step: the
		// update is then a real spec change the operator must observe.
		d.Spec.DeletionPolicy = v1alpha1.DeletionPolicyRetain
		return d
	}
	first := mk("a")
	if err := w.create(ctx, first); err != nil {
		return err
	}
	if err := w.waitReady(ctx, readyTimeout, first); err != nil {
		return err
	}
	switch o := first.(type) {
	case *v1alpha1.Role:
		o.Spec.ConnectionLimit = ptr.To[int32](5)
	case *v1alpha1.Database:
		o.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
	}
	if err := w.c.Update(ctx, first); err != nil {
		return fmt.Errorf("update %s: %w", first.GetName(), err)
	}
	if err := w.waitReady(ctx, readyTimeout, first); err != nil {
		return err
	}
	if err := w.c.Delete(ctx, first); err != nil {
		return err
	}
	if err := controlplane.WaitGone(ctx, w.c, first, w.env.bound()); err != nil {
		return err
	}
	second := mk("b")
	if d, ok := second.(*v1alpha1.Database); ok {
		d.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
	}
	if err := w.create(ctx, second); err != nil {
		return err
	}
	if err := w.waitReady(ctx, readyTimeout, second); err != nil {
		return err
	}
	if err := w.deleteNamespace(ctx, ns); err != nil {
		return err
	}
	return controlplane.WaitGone(ctx, w.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, w.env.bound())
}
