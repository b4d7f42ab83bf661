package check

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Experiment is one way a deletion can go wrong, run against the
// operator: a world made, a fault or an order, then the invariants.
type Experiment struct {
	// Name is what --only takes.
	Name string
	// Description says what the experiment does.
	Description string
	// Fix says what breaks when it breaks, and which finale package
	// fixes it.
	Fix string

	runs func(quick bool) int
	skip func(*Spec) string
	run  func(ctx context.Context, r *run) error
	note func(*stack) string
	// notFor, when set, says why the experiment does not apply to the
	// world's scopes ("" when it does).
	notFor func(scopes) string
}

// Experiment names.
const (
	OrderDependentsFirst = "order-dependents-first"
	OrderParentFirst     = "order-parent-first"
	OrderSecretFirst     = "order-secret-first"
	OrderAllAtOnce       = "order-all-at-once"
	OrderForeground      = "order-foreground"
	KillDuringCreates    = "kill-during-creates"
	KillDuringDeletion   = "kill-during-deletion"
	OperatorDown         = "operator-down"
	Escaped              = "escaped"
	TransportFreeze      = "transport-freeze"
	TransportStall       = "transport-stall"
	StaleAPIServer       = "stale-apiserver"
	OwnNamespace         = "own-namespace"
	ResultsStalled       = "results-stalled"
)

// Kills per crash run, and crash runs per experiment.
const (
	killsPerRun      = 3
	quickKillsPerRun = 2
	crashRuns        = 3
)

// defaultWindow is where kills fall before a first run measured the real
// create or cleanup time; minWindow is the narrowest window used (a
// cleanup of a few milliseconds still gets its kills spread).
const (
	defaultWindow = 3 * time.Second
	minWindow     = 200 * time.Millisecond
)

// Names lists the experiments in the order Run runs them.
func Names() []string {
	var out []string
	for _, e := range Experiments() {
		out = append(out, e.Name)
	}
	return out
}

func once(bool) int      { return 1 }
func never(*Spec) string { return "" }
func noParent(s *Spec) string {
	if !s.hasParent() {
		return "the description has no parent (connection) object"
	}
	return ""
}
func noSecret(s *Spec) string {
	if !s.hasSecret() {
		return "the description has no credential Secret (parent.secret)"
	}
	return ""
}
func noFaults(s *Spec) string {
	if len(s.Faults) == 0 {
		return "the description has no fault points (no external service)"
	}
	return ""
}
func noNote(*stack) string   { return "" }
func crashes(quick bool) int { return map[bool]int{true: 1, false: crashRuns}[quick] }

// Experiments returns every experiment, in the order Run runs them: the
// deletion orders first (the undisturbed all-at-once run measures the
// creates' window, dependents-first the cleanup's: the kills fall in them).
func Experiments() []*Experiment {
	return []*Experiment{
		{
			Name:        OrderAllAtOnce,
			Description: "the owner namespace deleted with everything in it at once",
			Fix:         "a parent or Secret gone before its dependents' cleanup: hold (the parent and its Secret held while dependents clean up) and ledger (a record outside the namespace)",
			runs:        once, skip: never, note: noNote,
			run: func(ctx context.Context, r *run) error { return r.order(ctx, nil) },
		},
		{
			Name:        OrderDependentsFirst,
			Description: "every dependent deleted and, once they are gone, the namespace",
			Fix:         "a dependent's own cleanup failing with everything it needs present: lifecycle (finalizer, delete, confirm, release in that order), clientpool and errclass",
			runs:        once, skip: never, note: noNote,
			run: func(ctx context.Context, r *run) error {
				if err := r.setup(ctx); err != nil {
					return err
				}
				if err := r.dependentsThenNamespace(ctx); err != nil {
					return err
				}
				// The kills of kill-during-deletion fall within the
				// time this undisturbed cleanup took.
				d := r.probe.cleanedIn()
				if !r.spec.hasProbe() {
					d = r.goneIn // no external cleanup to time: the dependents' own
				}
				if d > 0 && len(r.res.Violations) == 0 {
					r.st.setWindow(false, d)
				}
				return nil
			},
		},
		{
			Name:        OrderParentFirst,
			Description: "the parent (connection) object deleted, then the namespace",
			Fix:         "dependents left without their connection: hold (the parent kept while a dependent still has its cleanup finalizer), ledger and sweep for what still escapes",
			runs:        once, skip: noParent, note: noNote,
			run: func(ctx context.Context, r *run) error {
				return r.order(ctx, func(ctx context.Context) error {
					if err := r.deleteObject(ctx, r.parent); err != nil {
						return err
					}
					r.event("%s %s deletion asked", r.parent.GetKind(), r.parent.GetName())
					r.waitDeletingOrGone(ctx, r.parent)
					return nil
				})
			},
		},
		{
			Name:        OrderSecretFirst,
			Description: "the credential Secret deleted, then the namespace",
			Fix:         "dependents left without credentials: hold (the Secret held with its parent), clientpool (credentials read per call, not captured at dial)",
			runs:        once, skip: noSecret, note: noNote,
			run: func(ctx context.Context, r *run) error {
				return r.order(ctx, func(ctx context.Context) error {
					if err := r.deleteObject(ctx, r.secret); err != nil {
						return err
					}
					r.event("Secret %s deletion asked", r.secret.GetName())
					r.waitDeletingOrGone(ctx, r.secret)
					return nil
				})
			},
		},
		{
			Name:        OrderForeground,
			Description: "the parent deleted with propagationPolicy Foreground, then the namespace with Foreground (kubectl delete --cascade=foreground)",
			Fix:         "the garbage collector's foreground deletion blocking on a finalizer: lifecycle and hold",
			runs:        once, skip: never, note: noNote,
			run: func(ctx context.Context, r *run) error {
				fg := client.PropagationPolicy(metav1.DeletePropagationForeground)
				return r.orderWith(ctx, func(ctx context.Context) error {
					if r.parent == nil {
						return nil // no parent: the namespace alone, Foreground
					}
					if err := r.deleteObject(ctx, r.parent, fg); err != nil {
						return err
					}
					r.event("%s %s deletion asked (Foreground)", r.parent.GetKind(), r.parent.GetName())
					return nil
				}, fg)
			},
		},
		{
			Name:        KillDuringCreates,
			Description: "the operator SIGKILLed at random moments while it creates, restarted at once each time; then the dependents deleted and, once they are gone, the namespace",
			Fix:         "a create repeated or lost across a crash: ledger (a record written before the create) and lifecycle (adoption by ownership tag)",
			runs:        crashes, skip: never, note: noNote,
			run: killDuringCreates,
		},
		{
			Name:        KillDuringDeletion,
			Description: "the operator SIGKILLed at random moments while it cleans up after the dependents' deletion, restarted at once each time; then the namespace deleted",
			Fix:         "a delete done but not recorded, or a finalizer released before the delete was confirmed: lifecycle and ledger",
			runs:        crashes, skip: never, note: noNote,
			run: killDuringDeletion,
		},
		{
			Name:        OperatorDown,
			Description: "the operator down during a namespace deletion for longer than its own timeouts (timeouts.hold), then back",
			Fix:         "a timeout that released without cleaning: hold (bounded, and a release without the delete leaves the record), ledger and sweep (what the hold gave up on is swept)",
			runs:        once, note: noNote,
			skip: func(s *Spec) string {
				if s.Timeouts.Hold.Duration == 0 {
					return "timeouts.hold is not set: the operator's own longest deletion timeout, which the operator stays down past"
				}
				return ""
			},
			run: operatorDown,
		},
		{
			Name:        Escaped,
			Description: "the operator down; the namespace deleted and the dependents' finalizers removed by hand, so that they go without their cleanup; the operator back: its sweeper must clean what escaped within timeouts.sweep",
			Fix:         "nothing cleans what escaped its owner's cleanup: ledger (a record of every external resource, outside the namespace) and sweep (records whose owner is gone swept within the settle window, through a connection proven to be the record's deployment)",
			runs:        once, note: noNote,
			skip: func(s *Spec) string {
				switch {
				case !s.hasProbe():
					return reasonEscapedNoProbe
				case s.Timeouts.Sweep.Duration == 0:
					return reasonEscapedNoSweep
				}
				return ""
			},
			run: escaped,
		},
		{
			Name:        TransportFreeze,
			Description: "the operator's established connections to the external service frozen (open, silent; new connections work), then the dependents deleted and, once they are gone, the namespace",
			Fix:         "a cached client reused forever: clientpool (calls bounded, the broken client evicted and redialled) and errclass",
			runs:        once, skip: noFaults, note: noNote,
			run: func(ctx context.Context, r *run) error {
				return r.transport(ctx, false)
			},
		},
		{
			Name:        TransportStall,
			Description: "the operator's established HTTP/2 connections stalled (PINGs answered, nothing else; new connections work), then the dependents deleted and, once they are gone, the namespace",
			Fix:         "a cached HTTP/2 client whose keepalive is fooled: clientpool (calls bounded, evicted on a timeout) and errclass",
			runs:        once, note: noNote,
			skip: func(s *Spec) string {
				if !slices.ContainsFunc(s.Faults, func(f FaultPoint) bool { return f.Protocol == ProtocolHTTP2 }) {
					return "no fault point has protocol http2 (a stall needs HTTP/2 framing; transport-freeze covers plain TCP)"
				}
				return ""
			},
			run: func(ctx context.Context, r *run) error {
				return r.transport(ctx, true)
			},
		},
		{
			Name:        StaleAPIServer,
			Description: "the operator's view stale: its cache lists and watches through a second kube-apiserver whose etcd link lags (stale.lag) while it creates, then while the dependents are deleted; once they are gone, the namespace",
			Fix:         "a decision taken on a cached view: lifecycle (live reads before irreversible steps), hold (a live count of dependents before a release)",
			runs:        once, skip: never,
			run: staleAPIServer,
			note: func(st *stack) string {
				if st.spec.usesCacheKubeconfig() {
					return ""
				}
				return "stale-apiserver: the operator takes one kubeconfig ({{.CacheKubeconfig}} appears nowhere in its command or environment), so everything it did went through the lagging apiserver, writes included"
			},
		},
		{
			Name:        OwnNamespace,
			Description: "the operator's own namespace (its records, leases, keys: {{.OperatorNamespace}}) deleted with the rest while the operator runs: it, then every dependent, then (once they are gone) the owner namespace",
			Fix:         "state the cleanup needs deleted with the rest: ledger (records signed and kept apart) and hold; deploy the operator in a namespace of its own",
			runs:        once, skip: never, note: noNote,
			run: func(ctx context.Context, r *run) error {
				if err := r.setup(ctx); err != nil {
					return err
				}
				t0 := time.Now()
				if err := r.deleteNamespaces(ctx, []string{r.opNS}); err != nil {
					return err
				}
				if err := r.deleteDependents(ctx); err != nil {
					return err
				}
				return r.namespaceAfterDependents(ctx, t0, r.opNS)
			},
		},
		{
			Name:        ResultsStalled,
			Description: "the children run; the operator's recording of results stalls (operator.stalled, else the operator down) while every child finishes, produces its result (results.complete) and is deleted; the stall lasts until they are gone or past timeouts.hold; the operator comes back; then the dependents deleted and, once they are gone, the namespace",
			Fix:         "a child's finalizer released (on a timer, or by a part of the operator that runs while its recorder is stalled) before its owner persisted the result: capture (a finalizer of its own, released only once the owner's record shows the result, or the owner is gone)",
			runs:        once, note: noNote,
			skip: func(s *Spec) string {
				if s.Results == nil {
					return "the description gives no results (result-capture children)"
				}
				return ""
			},
			notFor: func(sc scopes) string {
				if sc.children {
					return reasonClusterChildren
				}
				return ""
			},
			run: resultsStalled,
		},
	}
}

// Skipped lists the experiments this description skips, each with its
// reason, in Run's order: what --validate says before a run.
func (s *Spec) Skipped() []Result {
	var out []Result
	for _, e := range Experiments() {
		if r := e.skip(s); r != "" {
			out = append(out, Result{Name: e.Name, Description: e.Description, Verdict: Skipped, Reason: r})
		}
	}
	return out
}

// Notes say which invariants this description leaves unchecked; Run's
// report carries them.
func (s *Spec) Notes() []string {
	var out []string
	if !s.hasProbe() {
		out = append(out, noteNoProbe)
	}
	if s.Results == nil {
		out = append(out, noteResults)
	}
	return out
}

// setup is every run's start: namespaces, operator, objects, ready.
func (r *run) setup(ctx context.Context) error {
	if err := r.begin(ctx); err != nil {
		return err
	}
	if err := r.create(ctx); err != nil {
		return err
	}
	if d, ok := r.waitReady(ctx); ok && r.exp.Name == OrderAllAtOnce {
		r.st.setWindow(true, d)
	}
	return nil
}

// order runs one deletion order: before (nil: nothing) then the namespace.
func (r *run) order(ctx context.Context, before func(context.Context) error) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	if before != nil {
		if err := before(ctx); err != nil {
			return err
		}
	}
	if err := r.deleteNamespaces(ctx, []string{r.ns}); err != nil {
		return err
	}
	r.finish(ctx, t0, r.ns)
	return nil
}

// orderWith is order with options on the namespace's deletion.
func (r *run) orderWith(ctx context.Context, before func(context.Context) error, opts ...client.DeleteOption) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	if err := before(ctx); err != nil {
		return err
	}
	if err := r.deleteNamespaces(ctx, []string{r.ns}, opts...); err != nil {
		return err
	}
	r.finish(ctx, t0, r.ns)
	return nil
}

// killMoments draws n moments in [0, window), sorted: a function of the
// seed, n and the window alone, so that a reproduction (--seed,
// --kill-window) draws the same moments.
func killMoments(seed int64, n int, window time.Duration) []time.Duration {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x66696e616c65)) // "finale"
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(rng.Int64N(int64(window)))
	}
	slices.Sort(out)
	return out
}

// killWindow is the window the kills fall in: Options.KillWindow, else
// the one measured in this check's first runs (creates or cleanup), else
// defaultWindow. The reproduction names it, so that the same seed draws
// the same moments.
func (r *run) killWindow(creates bool) time.Duration {
	w := r.opts.KillWindow
	if w <= 0 {
		w = max(r.st.window(creates, defaultWindow), minWindow)
	}
	w = w.Round(time.Millisecond)
	r.res.Reproduce += " --kill-window " + w.String()
	return w
}

func (r *run) kills() int {
	if r.opts.Quick {
		return quickKillsPerRun
	}
	return killsPerRun
}

// killAt SIGKILLs the operator at each moment after t0 and restarts it at
// once.
func (r *run) killAt(ctx context.Context, t0 time.Time, moments []time.Duration) error {
	var counts sync.WaitGroup
	defer counts.Wait()
	for _, m := range moments {
		if err := sleep(ctx, time.Until(t0.Add(m))); err != nil {
			return err
		}
		r.kill()
		if r.spec.hasProbe() {
			// The probe (a command that may take a second) counts beside
			// the kills: waiting for it would push every later kill past
			// its drawn moment.
			at := Duration(time.Since(r.t0))
			counts.Add(1)
			go func() {
				defer counts.Done()
				if n, err := r.probe.count(ctx); err == nil {
					r.event("(the probe listed %d of the run's external resources just after the kill at +%s)", n, at)
				}
			}()
		}
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func killDuringCreates(ctx context.Context, r *run) error {
	if err := r.begin(ctx); err != nil {
		return err
	}
	window := r.killWindow(true)
	moments := killMoments(r.res.Seed, r.kills(), window)
	r.event("kills drawn at %v within the creates' window of %s", moments, window.Round(10*time.Millisecond))
	t0 := time.Now()
	if err := r.create(ctx); err != nil {
		return err
	}
	if err := r.killAt(ctx, t0, moments); err != nil {
		return err
	}
	r.waitReady(ctx)
	return r.dependentsThenNamespace(ctx)
}

func killDuringDeletion(ctx context.Context, r *run) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	window := r.killWindow(false)
	moments := killMoments(r.res.Seed, r.kills(), window)
	r.event("kills drawn at %v within the external cleanup's window of %s", moments, window.Round(10*time.Millisecond))
	t0 := time.Now()
	if err := r.deleteDependents(ctx); err != nil {
		return err
	}
	if err := r.killAt(ctx, t0, moments); err != nil {
		return err
	}
	return r.namespaceAfterDependents(ctx, t0)
}

// downMargin is how far past timeouts.hold the operator stays down.
func downFor(hold time.Duration) time.Duration { return hold + hold/5 + 2*time.Second }

func operatorDown(ctx context.Context, r *run) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	r.kill()
	if err := r.deleteNamespaces(ctx, []string{r.ns}); err != nil {
		return err
	}
	down := downFor(r.spec.Timeouts.Hold.Duration)
	r.fault("the operator down for %s (timeouts.hold %s) during the deletion", down, r.spec.Timeouts.Hold.Duration)
	if err := sleep(ctx, down); err != nil {
		return err
	}
	if err := r.start(ctx); err != nil {
		return err
	}
	r.finish(ctx, time.Now(), r.ns)
	return nil
}

// Why escaped is skipped.
const (
	reasonEscapedNoSweep = "timeouts.sweep is not set: how long the operator's sweeper takes to clean what escaped (its settle window, clock skew and pass interval)"
	reasonEscapedNoProbe = "the description has no probe: nothing would show what the sweeper left"
)

// escaped makes the dependents escape their cleanup as an admin does
// with a namespace stuck Terminating while its operator is down: the
// finalizers removed by hand. Only the operator's records, outside the
// namespace, still say what they made; the sweeper must clean it within
// timeouts.sweep of the operator's return.
func escaped(ctx context.Context, r *run) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	r.kill()
	t0 := time.Now()
	if err := r.deleteNamespaces(ctx, []string{r.ns}); err != nil {
		return err
	}
	// The namespace controller marks them deleting first: the finalizers
	// are removed from objects on their way out, as an admin finds them.
	for _, d := range r.dependents {
		r.waitDeletingOrGone(ctx, d)
	}
	removed, err := r.stripFinalizers(ctx, r.dependents)
	if err != nil {
		return err
	}
	kind := r.dependents[0].GetKind()
	if len(removed) == 0 {
		removed = []string{"none had any"}
	}
	r.fault("the finalizers of every %s removed by hand, the operator down: %s", kind, strings.Join(removed, "; "))
	if !r.waitEnd(ctx, t0, "every "+kind, r.objectsGone(r.dependents), []string{r.ns}, r.dependents) {
		r.leaks(ctx, t0, r.spec.finish(), afterDeletion, false)
		r.duplicates()
		return nil
	}
	r.event("every %s gone without its cleanup", kind)
	if err := r.start(ctx); err != nil {
		return err
	}
	back := time.Now()
	r.waitNamespacesGone(ctx, back, r.ns)
	// The window runs from the operator's return whether or not the
	// namespace went: the owners the records name are gone already.
	r.leaks(ctx, back, r.spec.Timeouts.Sweep.Duration, afterReturn, true)
	r.duplicates()
	return nil
}

// transport freezes (or stalls) the established connections of every
// fault point, then deletes the namespace; the fault stays on.
func (r *run) transport(ctx context.Context, stall bool) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	n := 0
	for _, f := range r.spec.Faults {
		p := r.st.proxies[f.Name]
		if stall {
			if f.Protocol != ProtocolHTTP2 {
				continue
			}
			k, err := p.Stall()
			if err != nil {
				return err
			}
			n += k
			r.fault("stalled %d established HTTP/2 connection(s) of %s (PINGs answered, nothing else)", k, f.Name)
			continue
		}
		k := p.Freeze()
		n += k
		r.fault("froze %d established connection(s) of %s (open, silent; new ones work)", k, f.Name)
	}
	if n == 0 {
		r.note("the operator held no established connection when the fault came: it dials per call, so the fault had nothing to act on")
	}
	return r.dependentsThenNamespace(ctx)
}

// dependentsThenNamespace deletes every dependent, waits until they are
// gone, then deletes the namespace: the order in which nothing the
// cleanup needs is missing, so that what breaks is the experiment's fault,
// not the order.
func (r *run) dependentsThenNamespace(ctx context.Context) error {
	t0 := time.Now()
	if err := r.deleteDependents(ctx); err != nil {
		return err
	}
	return r.namespaceAfterDependents(ctx, t0)
}

func (r *run) deleteDependents(ctx context.Context) error {
	for _, d := range r.dependents {
		if err := r.deleteObject(ctx, d); err != nil {
			return err
		}
	}
	r.event("every %s deletion asked", r.dependents[0].GetKind())
	return nil
}

// namespaceAfterDependents waits until the dependents are gone (within
// timeouts.finish from t0), then deletes the namespace and finishes.
func (r *run) namespaceAfterDependents(ctx context.Context, t0 time.Time, also ...string) error {
	kind := r.dependents[0].GetKind()
	if !r.waitEnd(ctx, t0, "every "+kind, r.objectsGone(r.dependents), append([]string{r.ns}, also...), r.dependents) {
		r.leaks(ctx, t0, r.spec.finish(), afterDeletion, false)
		r.duplicates()
		return nil
	}
	r.goneIn = time.Since(t0)
	r.event("every %s gone", kind)
	if err := r.deleteNamespaces(ctx, []string{r.ns}); err != nil {
		return err
	}
	r.finish(ctx, t0, append([]string{r.ns}, also...)...)
	return nil
}

func staleAPIServer(ctx context.Context, r *run) error {
	r.cacheLagging = true
	r.allLagging = !r.spec.usesCacheKubeconfig()
	a, _, err := r.st.laggingAPIServer(ctx)
	if err != nil {
		return err
	}
	lag := r.spec.lag()
	a.EtcdLink.SetLag(lag)
	what := "its cache"
	if r.allLagging {
		what = "everything it does (it takes one kubeconfig)"
	}
	r.fault("the second apiserver's etcd link lags %s; the operator's %s goes through it", lag, what)
	if err := r.setup(ctx); err != nil {
		return err
	}
	return r.dependentsThenNamespace(ctx)
}

// faultsCreates reports whether the experiment disturbs the creates (so
// that a run not ready says nothing about the description).
func (e *Experiment) faultsCreates() bool {
	return e.Name == KillDuringCreates || e.Name == StaleAPIServer
}

// measuresWindow reports whether the experiment's undisturbed run
// measures a window the crash experiments' kills fall in (setup's
// creates, dependents-first's cleanup).
func (e *Experiment) measuresWindow() bool {
	return e.Name == OrderAllAtOnce || e.Name == OrderDependentsFirst
}

// drawsKills reports whether the experiment draws kill moments in a
// measured window (killWindow).
func (e *Experiment) drawsKills() bool {
	return e.Name == KillDuringCreates || e.Name == KillDuringDeletion
}

// String names the experiment.
func (e *Experiment) String() string { return fmt.Sprintf("%s: %s", e.Name, e.Description) }
