package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// stillness decides when a wait may end before its bound: once the run's
// fingerprint (everything in it that can move, see fingerprint) has stayed
// the same for window. A failed look counts as a change: what cannot be
// seen is not known to be still, so a doubt waits out the bound.
type stillness struct {
	clock  clock.PassiveClock
	window time.Duration
	// last is the fingerprint seen since since; ok is false before the
	// first look and after a failed one.
	last  string
	since time.Time
	ok    bool
}

func newStillness(c clock.PassiveClock, window time.Duration) *stillness {
	return &stillness{clock: c, window: window}
}

// look records one look (fp, or err when it failed) and reports whether
// the fingerprint has now stayed the same for the window.
func (s *stillness) look(fp string, err error) bool {
	now := s.clock.Now()
	if err != nil {
		s.ok = false
		return false
	}
	if !s.ok || fp != s.last {
		s.last, s.since, s.ok = fp, now, true
		return false
	}
	return now.Sub(s.since) >= s.window
}

// errStuck ends a wait whose run made no progress for the stuck window.
var errStuck = errors.New("no progress")

// stuckSample is how often a wait looks at the fingerprint: each look
// lists every kind in the run's namespaces.
const stuckSample = 2 * time.Second

// stuckWatch samples a run's fingerprint within one wait.
type stuckWatch struct {
	s    *stillness
	look func(context.Context) (string, error) // the run's fingerprint
	next time.Time
}

// watchStuck watches the namespaces (and the operator's), the run's
// objects, the probe and the operator for window.
func (r *run) watchStuck(window time.Duration, namespaces ...string) *stuckWatch {
	nss := slices.Clone(namespaces)
	if r.opNS != "" && !slices.Contains(nss, r.opNS) {
		nss = append(nss, r.opNS)
	}
	return &stuckWatch{s: newStillness(clock.RealClock{}, window), look: func(ctx context.Context) (string, error) { return r.fingerprint(ctx, nss) }}
}

// stuck looks at the fingerprint when a sample is due and returns errStuck
// once it stayed the same for the window.
func (w *stuckWatch) stuck(ctx context.Context) error {
	now := w.s.clock.Now()
	if now.Before(w.next) {
		return nil
	}
	// On a fixed grid, not from this look's start: the wait's poll tick
	// and each look's own time would otherwise add up over a window's
	// fifteen looks and end a still run seconds after its window.
	w.next = w.next.Add(stuckSample)
	if !w.next.After(now) {
		w.next = now.Add(stuckSample)
	}
	fp, err := w.look(ctx)
	if ctx.Err() != nil {
		return nil // the wait's own deadline, not a look
	}
	if w.s.look(fp, err) {
		return errStuck
	}
	return nil
}

// fingerprint renders what can move in the run as one text: every object
// in the namespaces (kind, name, whether it is deleting, its finalizers),
// the namespaces' phase and conditions, the run's own objects' status
// conditions (type, status, reason, message; not their times), what the
// probe listed of the run at its last sampling, what the results probe lists (with results),
// and whether the operator runs (and as which process). Times and resource versions are left out: a lease renewed or
// a status rewritten with the same content is not progress.
func (r *run) fingerprint(ctx context.Context, namespaces []string) (string, error) {
	var lines []string
	left, _, err := r.st.leftovers(ctx, namespaces...)
	if err != nil {
		return "", err
	}
	for _, l := range left {
		lines = append(lines, fmt.Sprintf("object %s/%s/%s deleting=%t finalizers=%v", l.Namespace, l.Kind, l.Name, l.Deleting > 0, l.Finalizers))
	}
	for _, n := range namespaces {
		var ns corev1.Namespace
		err := r.st.c.Get(ctx, client.ObjectKey{Name: n}, &ns)
		switch {
		case apierrors.IsNotFound(err):
			lines = append(lines, "namespace "+n+" gone")
			continue
		case err != nil:
			return "", err
		}
		lines = append(lines, fmt.Sprintf("namespace %s %s", n, ns.Status.Phase))
		for _, c := range ns.Status.Conditions {
			lines = append(lines, fmt.Sprintf("namespace %s %s=%s (%s: %s)", n, c.Type, c.Status, c.Reason, c.Message))
		}
	}
	objs := slices.Clone(r.dependents)
	if r.parent != nil {
		objs = append(objs, r.parent)
	}
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		err := r.st.c.Get(ctx, client.ObjectKeyFromObject(o), got)
		switch {
		case apierrors.IsNotFound(err):
			continue // its absence is in the objects' lines
		case err != nil:
			return "", err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			lines = append(lines, fmt.Sprintf("condition %s/%s %v=%v (%v: %v)", o.GetKind(), o.GetName(), m["type"], m["status"], m["reason"], m["message"]))
		}
	}
	if r.spec.hasProbe() {
		ids, err := r.probe.latest()
		if err != nil {
			return "", err
		}
		lines = append(lines, "probe "+strings.Join(ids, " "))
	}
	if r.results != nil {
		rs, err := r.results.sample(ctx)
		if err != nil {
			return "", err
		}
		lines = append(lines, "results children "+strings.Join(rs.Children, " "), "results produced "+strings.Join(rs.Produced, " "), "results persisted "+strings.Join(rs.Persisted, " "))
	}
	switch {
	case r.op == nil:
		lines = append(lines, "operator none")
	case r.op.exited():
		lines = append(lines, "operator exited")
	default:
		lines = append(lines, fmt.Sprintf("operator running %p", r.op)) // a restart is a new one
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

// stuckWindow is how long a run's fingerprint must stay the same before a
// wait ends early: timeouts.stuck, and never less than the operator's own
// hold lasts with operator-down's margin (a hold that times out as
// designed is silent until it does).
func (s *Spec) stuckWindow() time.Duration {
	w := s.stuck()
	if h := s.Timeouts.Hold.Duration; h > 0 {
		w = max(w, downFor(h))
	}
	return w
}

// still says, for a violation, how long the run stood still and as
// what: the objects that kept it, the probe, the operator.
func (w *stuckWatch) still() string {
	return fmt.Sprintf("no progress for %s (the same objects, finalizers, conditions, probe listing and operator)", w.s.window)
}

// endedEarly records that a wait ended before its bound.
func (r *run) endedEarly(wait string, w *stuckWatch) {
	r.res.EndedEarly = fmt.Sprintf("%s: no progress for %s", wait, w.s.window)
	r.event("ended early: %s", r.res.EndedEarly)
}
