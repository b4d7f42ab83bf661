package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
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
		fmt.Fprintf(w, "  writes enumerated: %d; crash points not reached: %d\n", len(c.Writes), c.NotReached)
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
// client to enumerate every API write the operator makes, then once per
// write crashing the operator right after it lands (its caches and
// connection pool dropped), restarting it clean, letting it heal, and
// checking no-leak, finished and no-wrong-delete.
func CrashAfterEveryWrite(ctx context.Context, kind Kind, env Env, out io.Writer) (rep CampaignReport, err error) {
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
	if err := w.start(ctx, rec); err != nil {
		return rep, err
	}
	if err := w.lifecycleIn(ctx, kind, ns); err != nil {
		return rep, fmt.Errorf("recording run: %w", err)
	}
	w.stop()
	rep.Writes = writesOf(rec.Calls())
	say(out, "recording run: the %s lifecycle made %d API writes", kind, len(rep.Writes))
	if len(rep.Writes) == 0 {
		return rep, fmt.Errorf("recording run saw no writes; the campaign would prove nothing")
	}

	// Crash runs go crashWorkers at a time, each world with its own
	// operator restricted to its own namespaces, records and proxy.
	type outcome struct {
		crashed bool
		res     Result
		err     error
	}
	outcomes := make([]outcome, len(rep.Writes))
	next := make(chan int)
	var wg sync.WaitGroup
	for _, w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := &outcomes[i]
				o.crashed, o.err = w.crashRun(ctx, kind, rep.Writes[i], &o.res)
				say(out, "run %2d: crash after %-28s crashed=%-5v violations=%d", i, rep.Writes[i], o.crashed, len(o.res.Violations))
			}
		}()
	}
	for i := range rep.Writes {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	for i, o := range outcomes {
		if o.err != nil {
			return rep, fmt.Errorf("crash after %s: %w", rep.Writes[i], o.err)
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
			rep.Failed = append(rep.Failed, RunRecord{Run: i, Schedule: []string{"crash after " + rep.Writes[i].String()}, Violations: o.res.Violations})
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

// crashRun runs the lifecycle once in a fresh namespace, crashing the
// operator right after wr, and checks the invariants into r. An error is a
// harness failure; a step that does not finish in time is a violation.
func (w *world) crashRun(ctx context.Context, kind Kind, wr Write, r *Result) (bool, error) {
	ns, err := w.namespace(ctx, "crash-")
	if err != nil {
		return false, err
	}
	w.only = []string{ns}
	script := faultinject.NewScript(faultinject.Fault{Verb: wr.Verb, Kind: wr.Kind, Nth: wr.Nth, Crash: true})
	if err := w.start(ctx, script); err != nil {
		return false, err
	}
	crashed, err := w.lifecycleWithCrash(ctx, kind, ns, script)
	if ctx.Err() != nil {
		return crashed, ctx.Err()
	}
	if err != nil {
		// A step that did not finish within the bound after the restart
		// is the "finished" invariant broken, not a harness failure:
		// record it, free the namespace, go on.
		r.add(Violation{Finished, fmt.Sprintf("crash after %s: %v", wr, err)})
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
func (w *world) lifecycleWithCrash(ctx context.Context, kind Kind, ns string, script *faultinject.Script) (bool, error) {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var restartErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := controlplane.WaitFor(rctx, time.Hour, "the scripted crash", func(context.Context) (bool, error) {
			return script.Crashed(), nil
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
	crashed := script.Crashed()
	w.stop()
	return crashed, errors.Join(err, restartErr)
}

// lifecycle drives one object of kind through create, update and delete,
// then a second one through create and its namespace's deletion. It waits
// on each step with the "finished" bound; a step not reached in time is an
// error of the run (reported by the caller).
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
	if err := w.waitReady(ctx, w.env.bound(), first); err != nil {
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
	if err := w.waitReady(ctx, w.env.bound(), first); err != nil {
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
	if err := w.waitReady(ctx, w.env.bound(), second); err != nil {
		return err
	}
	if err := w.deleteNamespace(ctx, ns); err != nil {
		return err
	}
	return controlplane.WaitGone(ctx, w.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, w.env.bound())
}
