package check

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Lines of the results probe's output.
const (
	lineChild     = "child"
	linePersisted = "persisted"
	lineProduced  = "produced"
)

// defaultStall is how long results-stalled keeps the operator stalled
// when timeouts.hold is not set (downFor adds its margin).
const defaultStall = 5 * time.Second

// parseResults reads a results probe's output: one "child ID",
// "produced ID" or "persisted ID" per line; blank lines are skipped.
func parseResults(out []byte) (ResultSet, error) {
	var rs ResultSet
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		what, id, ok := strings.Cut(l, " ")
		id = strings.TrimSpace(id)
		if !ok || id == "" {
			return rs, fmt.Errorf("line %d %q: want %q, %q or %q and an ID", n, l, lineChild, lineProduced, linePersisted)
		}
		switch what {
		case lineChild:
			rs.Children = append(rs.Children, id)
		case lineProduced:
			rs.Produced = append(rs.Produced, id)
		case linePersisted:
			rs.Persisted = append(rs.Persisted, id)
		default:
			return rs, fmt.Errorf("line %d %q: %q is not %q, %q or %q", n, l, what, lineChild, lineProduced, linePersisted)
		}
	}
	return rs, sc.Err()
}

// lostResults is the no-lost-result decision: the results a child produced
// (at any time in the run) whose child is gone now and whose owner has not
// persisted them. A child that still exists has lost nothing yet: its
// owner may still read it. Sorted, without repeats.
func lostResults(produced, persisted, children []string) []string {
	keep := map[string]bool{}
	for _, id := range persisted {
		keep[id] = true
	}
	for _, id := range children {
		keep[id] = true
	}
	var out []string
	for _, id := range produced {
		if !keep[id] && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// resultTracker samples the results probe for one run: it keeps every
// result ever produced (a child and the place its result waited in may
// both be gone by the end) and puts changes on the timeline.
type resultTracker struct {
	r *run

	mu       sync.Mutex // guards produced and last
	produced map[string]bool
	last     ResultSet
}

func newResultTracker(r *run) *resultTracker {
	return &resultTracker{r: r, produced: map[string]bool{}}
}

// list calls the results probe once.
func (t *resultTracker) list(ctx context.Context) (ResultSet, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	p := t.r.spec.Results.Probe
	if p.Func != nil {
		return p.Func(ctx, t.r.v)
	}
	out, err := t.r.runCommand(ctx, "results.probe", p.Command, p.Env, p.Dir)
	if err != nil {
		return ResultSet{}, err
	}
	return parseResults(out)
}

// sample lists, records what was produced and notes changes.
func (t *resultTracker) sample(ctx context.Context) (ResultSet, error) {
	rs, err := t.list(ctx)
	if err != nil {
		return rs, err
	}
	for _, l := range []*[]string{&rs.Children, &rs.Produced, &rs.Persisted} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range rs.Produced {
		t.produced[id] = true
	}
	t.diff("child", t.last.Children, rs.Children, "appeared", "gone")
	t.diff("result of", t.last.Produced, rs.Produced, "produced", "no longer listed")
	t.diff("result of", t.last.Persisted, rs.Persisted, "persisted by its owner", "no longer persisted")
	t.last = rs
	return rs, nil
}

func (t *resultTracker) diff(what string, before, now []string, added, removed string) {
	for _, id := range now {
		if !slices.Contains(before, id) {
			t.r.event("%s %s %s", what, id, added)
		}
	}
	for _, id := range before {
		if !slices.Contains(now, id) {
			t.r.event("%s %s %s", what, id, removed)
		}
	}
}

// lost applies the decision to a fresh listing and everything produced.
func (t *resultTracker) lost(rs ResultSet) []string {
	t.mu.Lock()
	produced := make([]string, 0, len(t.produced))
	for id := range t.produced {
		produced = append(produced, id)
	}
	t.mu.Unlock()
	return lostResults(produced, rs.Persisted, rs.Children)
}

func (t *resultTracker) producedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.produced)
}

// runCommand runs a description's command (a probe or a hook) and returns
// its standard output.
func (r *run) runCommand(ctx context.Context, field string, command []string, envs map[string]string, dir string) ([]byte, error) {
	argv, err := expandAll(field+".command", command, r.v)
	if err != nil {
		return nil, err
	}
	env, err := expandEnv(field+".env", envs, r.v)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, r.spec.program(argv[0]), argv[1:]...)
	cmd.Env, cmd.Dir = env, r.spec.path(dir)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", field, strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// hook runs one of the description's hooks.
func (r *run) hook(ctx context.Context, field string, h Hook) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if h.Func != nil {
		if err := h.Func(ctx, r.v); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		return nil
	}
	_, err := r.runCommand(ctx, field, h.Command, h.Env, h.Dir)
	return err
}

// resultsReady is waitReady's part for the children: results.run played,
// then the probe listing every child ("" when ready, else why not).
func (r *run) resultsReady(ctx context.Context) string {
	if r.results == nil {
		return ""
	}
	if h := r.spec.Results.Run; h.set() {
		if err := r.hook(ctx, "results.run", h); err != nil {
			return err.Error()
		}
	}
	rs, err := r.results.sample(ctx)
	if err != nil {
		return err.Error()
	}
	if want := len(r.dependents) * r.spec.childrenPer(); len(rs.Children) < want {
		return fmt.Sprintf("the results probe lists %d of %d children", len(rs.Children), want)
	}
	return ""
}

func (r *run) childrenSuffix() string {
	if r.results == nil {
		return ""
	}
	return fmt.Sprintf(", the %d children", len(r.dependents)*r.spec.childrenPer())
}

// childGVK is the children's kind.
func (s *Spec) childGVK() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(s.Results.Children.APIVersion, s.Results.Children.Kind)
}

// children lists the objects of the children's kind in the owner
// namespace.
func (r *run) children(ctx context.Context) ([]unstructured.Unstructured, error) {
	gvk := r.spec.childGVK()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.st.c.List(ctx, l, client.InNamespace(r.ns)); err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", gvk.Kind, r.ns, err)
	}
	return l.Items, nil
}

// restartOperator stops the operator (SIGKILL; not counted as a crash
// kill) and starts it again, stalled or not.
func (r *run) restartOperator(ctx context.Context, stalled bool) error {
	if r.op != nil && !r.op.exited() {
		r.op.kill()
	}
	r.stalled = stalled
	return r.start(ctx)
}

// resultsStalled is the results-stalled experiment: the children run; the
// operator's recording of results stalls (operator.stalled; without it,
// the operator is down); every child finishes and produces its result
// (results.complete) and is deleted; the stall lasts until they are gone
// or past timeouts.hold; the operator comes back whole; then every result
// produced must be persisted by its owner, or its child still exist
// (no-lost-result), within timeouts.finish. Then the dependents and the
// namespace are deleted as in dependents-first.
func resultsStalled(ctx context.Context, r *run) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	if _, ok := r.res.violation(Ready); ok {
		return r.dependentsThenNamespace(ctx)
	}
	kind := r.spec.Results.Children.Kind
	if r.spec.Operator.Stalled != nil {
		if err := r.restartOperator(ctx, true); err != nil {
			return err
		}
		r.fault("the operator restarted with its recording of results stalled (operator.stalled)")
	} else {
		r.op.kill()
		r.fault("the operator down (no operator.stalled to stall only its recording of results)")
	}
	t0 := time.Now()
	if err := r.hook(ctx, "results.complete", r.spec.Results.Complete); err != nil {
		return err
	}
	r.event("results.complete returned: every child finished")
	if _, err := r.results.sample(ctx); err != nil {
		r.note("the results probe failed after results.complete: %v", err)
	}
	kids, err := r.children(ctx)
	if err != nil {
		return err
	}
	for i := range kids {
		if err := r.deleteObject(ctx, &kids[i]); err != nil {
			return err
		}
	}
	r.fault("deleted the %d %s(s) while stalled (an eviction, a drain, a garbage collection)", len(kids), kind)
	hold := r.spec.Timeouts.Hold.Duration
	if hold == 0 {
		hold = defaultStall
	}
	stall := downFor(hold)
	gone := r.waitProbe(ctx, max(time.Until(t0.Add(stall)), time.Millisecond), "the children to go while stalled", func(ctx context.Context) (bool, error) {
		_, _ = r.results.sample(ctx) // the timeline; a failed sample is looked at again
		left, err := r.children(ctx)
		return err == nil && len(left) == 0, nil
	}) == nil
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if gone {
		r.event("every %s gone while the operator was stalled", kind)
	} else {
		r.event("%ss still there %s into the stall (timeouts.hold %s): the stall ends", kind, stall, hold)
	}
	if err := r.restartOperator(ctx, false); err != nil {
		return err
	}
	r.event("the operator is back whole")
	r.checkResults(ctx, time.Now())
	return r.dependentsThenNamespace(ctx)
}

// checkResults waits, within timeouts.finish from since, until every
// child results-stalled deleted is gone and no result is lost; it records
// no-lost-result (and finished, for children not gone) otherwise.
func (r *run) checkResults(ctx context.Context, since time.Time) {
	var lost, left []string
	var perr error
	sampled := false
	err := r.waitProbe(ctx, max(time.Until(since.Add(r.spec.finish())), time.Millisecond), "no result lost", func(ctx context.Context) (bool, error) {
		rs, err := r.results.sample(ctx)
		if err != nil {
			if ctx.Err() == nil { // not the wait's own deadline
				perr = err
			}
			return false, nil
		}
		sampled, perr = true, nil
		lost, left = r.results.lost(rs), rs.Children
		return len(lost) == 0 && len(left) == 0, nil
	})
	r.res.Produced = r.results.producedCount()
	if err == nil || ctx.Err() != nil {
		return
	}
	if !sampled {
		r.note("the results probe never answered after the operator's return: %v", perr)
		return
	}
	kind := r.spec.Results.Children.Kind
	if len(left) > 0 {
		r.violate(Finished, "%d deleted %s(s) not gone %s after the operator's return: %s", len(left), kind, r.spec.finish(), strings.Join(firstN(left, 5), "; "))
	}
	if len(lost) > 0 {
		r.res.Lost = lost
		r.violate(NoLostResult, "%d result(s) produced by a %s now gone and never persisted by its owner (%s after the operator's return): %s",
			len(lost), kind, r.spec.finish(), strings.Join(firstN(lost, 5), "; "))
	}
}
