package sweep

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/ledger"
)

// Event reasons, the action, and message formats. The Warning messages tell
// an admin what to do by hand.
const (
	ReasonUnreachable = "CleanupRecordUnreachable"
	ReasonInvalid     = "CleanupRecordInvalid"
	ReasonSwept       = "CleanupRecordSwept"
	ReasonRetained    = "CleanupRecordRetained"
	ReasonAdoptable   = "CleanupRecordAdoptable"
	ReasonUnverified  = "CleanupRecordUnverified"
	ActionSweep       = "Sweep"

	// ReasonClaimPending and ReasonClaimExpired are Warning Events on the
	// object that claims a record (ledger.AnnotationUID) without an
	// admin's approval: the first says until when the sweeper keeps the
	// predecessor's resources for it, the second that it has deleted them.
	ReasonClaimPending = "CleanupClaimPending"
	ReasonClaimExpired = "CleanupClaimExpired"

	// messageUnreachable: owner, deployment, connections tried, error
	// class, IDs, tag, namespace, name.
	messageUnreachable = "owner %s is gone but no allowed connection proves deployment %s (tried: %s; last error class %s). " +
		"The sweeper uses only the connection object the record names, if it still exists, and connections an admin designated. " +
		"To clean up by hand: in that deployment delete the resources with IDs %q and any resource tagged %q, " +
		"then delete this record: kubectl -n %s delete configmap %s"
	// messageUnverified: owner, deployment, the connections not used,
	// IDs, tag, namespace, name.
	messageUnverified = "owner %s is gone but no connection the sweeper may use authenticates the server of deployment %s (not used: %s). " +
		"Through an unauthenticated connection a copy of the deployment behind a proxy in the path answers every proof as the deployment would, " +
		"so the sweeper deletes nothing and keeps this record. Make one of those connections authenticated (for PostgreSQL: sslMode verify-full), " +
		"or clean up by hand: in that deployment delete the resources with IDs %q and any resource tagged %q, " +
		"then delete this record: kubectl -n %s delete configmap %s"
	// messageInvalid: namespace, name, what is wrong.
	messageInvalid = "cleanup record %s/%s is invalid and will not be acted on or deleted by the sweeper: %s. " +
		"Repair it, or clean up its external resources by hand and then delete it"
	// messageSwept: owner, number of deleted resources, deployment, connection.
	messageSwept = "owner %s is gone: deleted %d external resource(s) in deployment %s through %s, then removed this record"
	// messageRetained: owner, IDs, tag, deployment, namespace, name.
	messageRetained = "owner %s is gone and its deletion policy is Retain: the resources with IDs %q (tag %q) stay in deployment %s, and so does this record, so that a restored object can adopt them; the sweeper never deletes through it. " +
		"When nobody will adopt them, delete the record: kubectl -n %s delete configmap %s"
	// messageAdoptable: owner, the object that now has its name and claims
	// the record.
	messageAdoptable = "owner %s is gone and %s, with its kind, namespace and name, claims this record (annotation " + ledger.AnnotationUID + "): it may adopt it, so the sweeper deletes nothing while the claim stands"
	// messageClaimUnapproved: owner, the claimant, the deadline, records
	// namespace, record name, the claimant's UID.
	messageClaimUnapproved = "owner %s is gone and %s, with its kind, namespace and name, claims this record (annotation " + ledger.AnnotationUID + "), " +
		"but from a namespace created again since the record was written (or one whose identity is unknown), and no admin approved it: " +
		"the sweeper deletes nothing until %s, then sweeps the record as any gone owner's. " +
		"To let that object adopt it: kubectl -n %s annotate configmap %s " + ledger.AnnotationApproval + "=%s"
	// messageClaimPending: claimed UID, deadline, grace. It names no
	// deployment, ID or tag: the claimant may be whoever created the
	// namespace again, not the predecessor's tenant.
	messageClaimPending = "this object claims the resources of uid %s (annotation " + ledger.AnnotationUID + "), whose cleanup record was written in an earlier namespace of this name: " +
		"until %s the sweeper keeps them for this claim; unless an admin approves it by then, the sweeper deletes them as any gone owner's " +
		"(an unapproved claim is kept for %s from when the sweeper first saw it)"
	// messageClaimExpired: claimed UID, deadline, grace.
	messageClaimExpired = "the sweeper deleted the resources of uid %s that this object claims, and removed their cleanup record: no admin approved the claim by %s " +
		"(%s after the sweeper first saw it). Nothing is left to adopt: remove the annotation " + ledger.AnnotationUID + " to create new resources"
)

// Defaults.
const (
	DefaultSettle       = 5 * time.Minute
	DefaultMaxClockSkew = time.Minute
	DefaultInterval     = time.Minute
	DefaultPageSize     = 500
	DefaultWorkers      = 4
	DefaultMaxBackoff   = 30 * time.Minute
	// DefaultClaimGrace is how long a claim that needs an admin's approval
	// keeps its predecessor's record from the sweeper: a day, for an admin
	// restoring a namespace to approve it (ledger.ConfigMapStore.ApproveNamespace).
	DefaultClaimGrace = 24 * time.Hour
)

// SettleWindow is how long after a record's last create attempt
// (ledger.Record.SettleFrom) the sweeper leaves a record of a gone owner
// alone: settle plus the tolerated clock skew between replicas, a zero
// value standing for its default (DefaultSettle, DefaultMaxClockSkew).
// It is the one definition of "settled": `finale audit` calls a record
// overdue past the same window, so the two never disagree.
func SettleWindow(settle, maxClockSkew time.Duration) time.Duration {
	if settle == 0 {
		settle = DefaultSettle
	}
	if maxClockSkew == 0 {
		maxClockSkew = DefaultMaxClockSkew
	}
	return settle + maxClockSkew
}

// ClassNotProven is the class in the Note and Event of a record kept
// because no allowed connection proved its deployment.
const ClassNotProven = "NotProven"

// ClassNeedsApproval is the class in the Note of a record kept for a claim
// that needs an admin's approval (ledger.Record.ClaimApproved is false):
// the Note's Until is when the sweeper stops keeping it.
const ClassNeedsApproval = "NeedsApproval"

// Candidate is a connection the sweeper may use for one record.
type Candidate struct {
	// Name says which connection it is ("Server team-a/pg (uid ...)"), for
	// the log and Events: an admin must be able to tell which connection
	// a sweep used.
	Name   string
	Target ledger.Target
	// Authentication says what makes sure that Target's answers come from
	// the deployment itself, and not from a copy of it that a proxy in the
	// path put in its place ("TLS verify-full against the CA in Secret
	// x"): a credential of the service's end that a copy of its data does
	// not hold. "" when nothing does; the sweeper then never uses the
	// candidate (Unverified). A proof cannot replace it: a copy holds the
	// deployment's sentinel and answers every proof as the deployment
	// would, so a proxy that moves a session to a copy after its first
	// proof makes the deletes and the proof after them happen in the copy.
	Authentication string
}

// Targets lists, for one record, the connections the sweeper may use, in
// the order to try them. An implementation offers only the connection
// object the record names (ledger.Record.Via, if it still exists with the
// same UID) and connections an admin designated for sweeping: never any
// connection that merely proves the deployment, because a tenant's
// connection to a copy of the deployment proves it too. It says of each
// what authenticates it (Candidate.Authentication); the sweeper uses only
// those.
type Targets interface {
	Targets(ctx context.Context, r *ledger.Record) ([]Candidate, error)
}

// TargetsFn adapts a function to Targets.
type TargetsFn func(ctx context.Context, r *ledger.Record) ([]Candidate, error)

// Targets implements Targets.
func (f TargetsFn) Targets(ctx context.Context, r *ledger.Record) ([]Candidate, error) {
	return f(ctx, r)
}

// ByKind dispatches to the Targets of the record owner's kind (the owner's
// Kind, as recorded); a kind it does not know has no candidates.
type ByKind map[string]Targets

// Targets implements Targets.
func (b ByKind) Targets(ctx context.Context, r *ledger.Record) ([]Candidate, error) {
	t, ok := b[r.Owner.Kind]
	if !ok {
		return nil, nil
	}
	return t.Targets(ctx, r)
}

// EventRecorder is the part of controller-runtime's manager recorder
// (k8s.io/client-go/tools/events.EventRecorder) the sweeper uses.
type EventRecorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Options configure a Sweeper. Ledger, Owners, Live and Targets are
// required.
type Options struct {
	// Ledger is the operator's ledger: it authenticates the records and
	// removes them.
	Ledger *ledger.Ledger
	// Owners reads owners by namespace/name as PartialObjectMetadata; give it
	// the manager's cache, so that a pass does not GET each owner.
	Owners client.Reader
	// Live reads from the API server itself (the manager's APIReader): an
	// owner the cache calls gone is confirmed gone live before anything
	// irreversible.
	Live client.Reader
	// Targets are the candidate connections.
	Targets Targets
	// Recorder receives Events about records; nil records none.
	Recorder EventRecorder
	// Log defaults to controller-runtime's logger named "sweep".
	Log logr.Logger
	// Clock decides settle windows, backoff and the pass interval; nil is
	// the real clock.
	Clock clock.Clock
	// Settle is how long after the last create attempt an ownerless record
	// is left alone (default DefaultSettle): an owner created a moment ago
	// may not be in the cache yet.
	Settle time.Duration
	// MaxClockSkew is added to Settle (default DefaultMaxClockSkew): the
	// attempt time was stamped by another replica's clock.
	MaxClockSkew time.Duration
	// Interval is the time between passes (default DefaultInterval) and the
	// first backoff step.
	Interval time.Duration
	// MaxBackoff caps the per-record backoff (default DefaultMaxBackoff).
	MaxBackoff time.Duration
	// ClaimGrace is how long a record that an object claims without an
	// admin's approval (ledger.Record.ClaimApproved: a namespace deleted
	// and created again under its name) is kept from the sweeper, counted
	// from the sweeper's own first sight of the claim (default
	// DefaultClaimGrace). After it the record is swept as any gone
	// owner's, and the claimant is told. An approved claim, or one from
	// the namespace the record was written in, is kept while it stands.
	ClaimGrace time.Duration
	// PageSize is the number of records listed per request (default
	// DefaultPageSize); Workers bounds the records handled at once (default
	// DefaultWorkers).
	PageSize int64
	Workers  int
	// Classifier classifies errors for the errors metric; nil is
	// errclass.Default.
	Classifier *errclass.Classifier
}

// Sweeper is a leader-elected Runnable that finishes the cleanup of records
// whose owner is gone.
type Sweeper struct {
	opts Options

	mu    sync.Mutex       // guards memos
	memos map[string]*memo // by record key; records not healthy-Waiting only
}

// memo is what the sweeper remembers about one record between passes.
type memo struct {
	state    State
	failures int
	retryAt  time.Time
	seen     bool // in the current pass
	// claimSince is when this sweeper first saw an unapproved claim of
	// the record (or the earlier time its own Note says): the start of
	// the claim's grace. Zero when it saw none.
	claimSince time.Time
}

var (
	_ manager.Runnable               = (*Sweeper)(nil)
	_ manager.LeaderElectionRunnable = (*Sweeper)(nil)
)

// New checks opts, fills in defaults and returns a Sweeper.
func New(opts Options) (*Sweeper, error) {
	var missing []string
	if opts.Ledger == nil {
		missing = append(missing, "Ledger")
	}
	if opts.Owners == nil {
		missing = append(missing, "Owners")
	}
	if opts.Live == nil {
		missing = append(missing, "Live")
	}
	if opts.Targets == nil {
		missing = append(missing, "Targets")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sweep: New: missing %v", missing)
	}
	if opts.Settle < 0 || opts.MaxClockSkew < 0 || opts.Interval < 0 || opts.MaxBackoff < 0 || opts.ClaimGrace < 0 || opts.PageSize < 0 || opts.Workers < 0 {
		return nil, errors.New("sweep: New: Settle, MaxClockSkew, Interval, MaxBackoff, ClaimGrace, PageSize and Workers must not be negative")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	if opts.MaxClockSkew == 0 {
		opts.MaxClockSkew = DefaultMaxClockSkew
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.ClaimGrace == 0 {
		opts.ClaimGrace = DefaultClaimGrace
	}
	if opts.PageSize == 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Classifier == nil {
		opts.Classifier = errclass.Default
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logf.Log.WithName("sweep")
	}
	return &Sweeper{opts: opts, memos: map[string]*memo{}}, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: two sweepers
// would race to delete the same resources.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: a pass now, then one per Interval, until
// ctx ends. A failed pass is logged and retried at the next interval.
func (s *Sweeper) Start(ctx context.Context) error {
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.opts.Log.Error(err, "sweep pass failed; retrying at the next interval")
		}
		t := s.opts.Clock.NewTimer(s.opts.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// Report is what one pass found and did. Records in backoff are counted in
// the state they were last found in.
type Report struct {
	Waiting, Settling, Unreachable, Invalid, Adoptable, Unverified int
	// Retained counts records of gone owners with policy Retain: kept, for
	// a restored owner to adopt, and never acted on.
	Retained int
	// BackingOff counts records skipped this pass because of earlier failures.
	BackingOff int
	// Deleted counts external resources deleted; Removed counts records
	// removed after a confirmed delete.
	Deleted, Removed int
	// Errors counts failures (owner lookups, proofs, cleanup).
	Errors int
}

// in is the counter of state st: one switch for counting and the gauge, so
// a new state cannot be counted and left out of the metric.
func (r *Report) in(st State) *int {
	switch st {
	case Waiting:
		return &r.Waiting
	case Settling:
		return &r.Settling
	case Unreachable:
		return &r.Unreachable
	case Invalid:
		return &r.Invalid
	case Adoptable:
		return &r.Adoptable
	case Unverified:
		return &r.Unverified
	case Retained:
		return &r.Retained
	}
	return nil
}

func (r *Report) count(st State) {
	if n := r.in(st); n != nil {
		*n++
	}
}

// pass is the state of one Pass.
type pass struct {
	s   *Sweeper
	now time.Time

	mu  sync.Mutex // guards rep
	rep Report
}

// Pass goes once over all records. It returns an error only when the records
// could not be listed; per-record failures are counted, evented and retried.
func (s *Sweeper) Pass(ctx context.Context) (Report, error) {
	p := &pass{s: s, now: s.opts.Clock.Now()}
	defer func() { passSeconds.Observe(s.opts.Clock.Since(p.now).Seconds()) }()
	s.mu.Lock()
	for _, m := range s.memos {
		m.seen = false
	}
	s.mu.Unlock()
	cont, complete := "", false
	for {
		page, err := s.opts.Ledger.List(ctx, s.opts.PageSize, cont)
		if err != nil {
			p.countErr(ctx, err)
			return p.rep, fmt.Errorf("sweep: %w", err)
		}
		for _, inv := range page.Invalid {
			p.invalid(ctx, inv)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(s.opts.Workers)
		for _, r := range page.Records {
			g.Go(func() error { p.one(gctx, r); return nil })
		}
		_ = g.Wait() // workers report through p, never fail the group
		if ctx.Err() != nil {
			break
		}
		if page.Continue == "" {
			complete = true
			break
		}
		cont = page.Continue
	}
	// Only a pass that listed every record may conclude that one it did
	// not see is gone; an ended pass keeps every memo for the next.
	if complete {
		s.mu.Lock()
		for k, m := range s.memos {
			if !m.seen {
				delete(s.memos, k) // the record is gone
			}
		}
		s.mu.Unlock()
	}
	rep := p.rep
	for _, st := range states {
		recordsGauge.WithLabelValues(string(st)).Set(float64(*rep.in(st)))
	}
	return rep, ctx.Err()
}

func key(r *ledger.Record) string {
	if r != nil && r.Source != nil {
		return r.Source.Namespace + "/" + r.Source.Name
	}
	if r != nil {
		return "uid/" + string(r.Owner.UID)
	}
	return ""
}

// memo returns what earlier passes remembered about k (the zero memo if
// nothing) and marks it seen in this pass.
func (p *pass) memo(k string) memo {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	m, ok := p.s.memos[k]
	if !ok {
		return memo{}
	}
	m.seen = true
	return *m
}

// settle records the outcome st for k and reports whether it differs from
// the last pass's. failed extends the backoff; success clears it. A healthy
// Waiting record, by far the most common, is not remembered at all, which
// keeps the sweeper's memory independent of the number of live owners.
func (p *pass) settle(k string, st State, failed bool) (changed bool) {
	p.s.mu.Lock()
	m, ok := p.s.memos[k]
	switch {
	case st == Waiting && !failed:
		changed = ok && m.state != Waiting
		delete(p.s.memos, k)
	default:
		if !ok {
			m = &memo{state: Waiting}
			p.s.memos[k] = m
		}
		changed = m.state != st
		m.state = st
		m.seen = true
		if failed {
			m.failures++
			d := p.s.opts.Interval << min(m.failures-1, 20)
			if d > p.s.opts.MaxBackoff || d <= 0 {
				d = p.s.opts.MaxBackoff
			}
			m.retryAt = p.now.Add(d)
		} else {
			m.failures = 0
			m.retryAt = time.Time{}
		}
	}
	p.s.mu.Unlock()
	p.mu.Lock()
	p.rep.count(st)
	p.mu.Unlock()
	return changed
}

func (p *pass) add(f func(r *Report)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.rep)
}

func (p *pass) countErr(ctx context.Context, err error) errclass.Class {
	cl := p.s.opts.Classifier.Classify(ctx, err)
	errorsTotal.WithLabelValues(string(cl)).Inc()
	p.add(func(r *Report) { r.Errors++ })
	return cl
}

func (p *pass) invalid(ctx context.Context, inv ledger.Invalid) {
	k := key(inv.Record)
	p.memo(k)
	changed := p.settle(k, Invalid, false)
	if inv.Record != nil && inv.Record.Source != nil {
		changed = p.report(ctx, inv.Record, Invalid, "", changed)
	}
	if changed {
		ns, name := "", ""
		if inv.Record != nil && inv.Record.Source != nil {
			ns, name = inv.Record.Source.Namespace, inv.Record.Source.Name
		}
		what := "it does not decode or is inconsistent"
		switch {
		case errors.Is(inv.Err, ledger.ErrUnauthenticated):
			what = "it is not signed by this operator's key (edited, forged, or written by another installation)"
		case errors.Is(inv.Err, ledger.ErrLegacyRecord):
			what = "it was written by the previous release (schema 1, unsigned): its owner's reconcile migrates it while the owner exists; " +
				"if the owner is gone, nothing vouches for it"
		}
		p.s.opts.Log.Error(inv.Err, "invalid cleanup record left alone", "namespace", ns, "name", name)
		p.event(inv.Record, corev1.EventTypeWarning, ReasonInvalid, messageInvalid, ns, name, what)
	}
}

func (p *pass) event(r *ledger.Record, typ, reason, msg string, args ...interface{}) {
	if p.s.opts.Recorder == nil || r == nil || r.Source == nil {
		return
	}
	p.s.opts.Recorder.Eventf(r.Source, nil, typ, reason, ActionSweep, msg, args...)
}

func (p *pass) one(ctx context.Context, r *ledger.Record) {
	k := key(r)
	if m := p.memo(k); !m.retryAt.IsZero() && p.now.Before(m.retryAt) {
		p.add(func(rep *Report) { rep.BackingOff++; rep.count(m.state) })
		return
	}
	st, claimant, err := p.owner(ctx, r, p.s.opts.Owners)
	if err == nil && st == gone {
		// The cache may lag: nothing irreversible on its word alone.
		st, claimant, err = p.owner(ctx, r, p.s.opts.Live)
	}
	switch {
	case err != nil:
		p.countErr(ctx, err)
		p.s.opts.Log.Error(err, "look up owner of cleanup record", "owner", r.Owner.String())
		p.settle(k, Waiting, true)
		return
	case st == alive:
		p.settle(k, Waiting, false)
		p.unnote(ctx, r)
		return
	case st == namesake:
		if p.claim(ctx, k, r, claimant) {
			return
		}
		// The claim's grace is over: swept below as any gone owner's,
		// and the claimant told once it is.
	}
	if p.now.Sub(r.SettleFrom()) < SettleWindow(p.s.opts.Settle, p.s.opts.MaxClockSkew) {
		p.settle(k, Settling, false)
		p.unnote(ctx, r)
		return
	}
	if r.Policy == ledger.PolicyRetain {
		p.retain(ctx, k, r)
		return
	}
	cands, err := p.s.opts.Targets.Targets(ctx, r)
	if err != nil {
		p.countErr(ctx, err)
		p.s.opts.Log.Error(err, "list sweep targets", "owner", r.Owner.String())
	}
	var tried, unverified []string
	lastErr := errNoTarget
	for _, c := range cands {
		if c.Authentication == "" {
			// A copy behind a proxy would answer through it as the
			// deployment does: nothing it says confirms a delete.
			unverified = append(unverified, c.Name)
			continue
		}
		tried = append(tried, c.Name)
		res, err := p.s.opts.Ledger.Cleanup(ctx, r.Owner.UID, c.Target)
		if n := len(res.Deleted); n > 0 {
			deletedTotal.Add(float64(n))
			p.add(func(rep *Report) { rep.Deleted += n })
		}
		if err == nil {
			if res.Removed {
				removedTotal.Inc()
				p.add(func(rep *Report) { rep.Removed++ })
				p.s.opts.Log.Info("swept cleanup record", "owner", r.Owner.String(), "deployment", r.Deployment, "connection", c.Name, "authentication", c.Authentication, "deleted", res.Deleted)
				p.event(r, corev1.EventTypeNormal, ReasonSwept, messageSwept, r.Owner.String(), len(res.Deleted), r.Deployment, c.Name)
				if claimant != nil {
					since := p.claimSince(k, r)
					p.claimantEvent(r, claimant, ReasonClaimExpired, messageClaimExpired, r.Owner.UID,
						since.Add(p.s.opts.ClaimGrace).UTC().Format(time.RFC3339), p.s.opts.ClaimGrace)
				}
			}
			p.forget(k)
			return
		}
		p.countErr(ctx, err)
		p.s.opts.Log.Info("sweep through connection failed", "owner", r.Owner.String(), "connection", c.Name, "error", err.Error())
		lastErr = err
		if !errors.Is(err, ledger.ErrNotProven) {
			break // a real failure in the right deployment: retry later
		}
	}
	ns, name := "", ""
	if r.Source != nil {
		ns, name = r.Source.Namespace, r.Source.Name
	}
	if len(tried) == 0 && len(unverified) > 0 {
		p.unverified(ctx, k, r, unverified, ns, name)
		return
	}
	for _, u := range unverified {
		tried = append(tried, u+" (not used: not authenticated)")
	}
	if len(tried) == 0 {
		tried = []string{"none available"}
	}
	class := p.s.opts.Classifier.Classify(ctx, lastErr)
	if errors.Is(lastErr, ledger.ErrNotProven) {
		class = ClassNotProven
	}
	args := []interface{}{r.Owner.String(), r.Deployment, strings.Join(tried, ", "), class, r.ExternalIDs, r.Tag, ns, name}
	if p.report(ctx, r, Unreachable, string(class), p.settle(k, Unreachable, true)) {
		p.s.opts.Log.Info("cleanup record unreachable: "+fmt.Sprintf(messageUnreachable, args...), "owner", r.Owner.String(), "error", lastErr.Error())
		p.event(r, corev1.EventTypeWarning, ReasonUnreachable, messageUnreachable, args...)
	} else {
		p.s.opts.Log.V(1).Info("cleanup record still unreachable", "owner", r.Owner.String(), "deployment", r.Deployment, "error", lastErr.Error())
	}
}

// unverified keeps a record whose only connections are unauthenticated,
// and says so: nothing was asked of them, nothing deleted.
func (p *pass) unverified(ctx context.Context, k string, r *ledger.Record, names []string, ns, name string) {
	args := []interface{}{r.Owner.String(), r.Deployment, strings.Join(names, ", "), r.ExternalIDs, r.Tag, ns, name}
	if p.report(ctx, r, Unverified, "", p.settle(k, Unverified, true)) {
		p.s.opts.Log.Info("cleanup record kept, no authenticated connection: "+fmt.Sprintf(messageUnverified, args...), "owner", r.Owner.String())
		p.event(r, corev1.EventTypeWarning, ReasonUnverified, messageUnverified, args...)
	} else {
		p.s.opts.Log.V(1).Info("cleanup record still without an authenticated connection", "owner", r.Owner.String(), "deployment", r.Deployment)
	}
}

// retain reports the record of a gone Retain owner and leaves it: its
// resources stay, the sweeper never deletes them, and the record stays too,
// for a restored owner to adopt (a record removed here is one no restore
// can claim). An admin is told, once, which resources they are and how to
// drop the record when nobody will adopt them.
func (p *pass) retain(ctx context.Context, k string, r *ledger.Record) {
	if !p.report(ctx, r, Retained, "", p.settle(k, Retained, false)) {
		return
	}
	ns, name := "", ""
	if r.Source != nil {
		ns, name = r.Source.Namespace, r.Source.Name
	}
	args := []interface{}{r.Owner.String(), r.ExternalIDs, r.Tag, r.Deployment, ns, name}
	p.s.opts.Log.Info("retained: "+fmt.Sprintf(messageRetained, args...), "owner", r.Owner.String())
	p.event(r, corev1.EventTypeNormal, ReasonRetained, messageRetained, args...)
}

var errNoTarget = errors.New("no allowed connection for this record")

// report says whether to report (event, log) that r is kept in state st
// with class cl, and keeps that verdict on the stored record (ledger.Note),
// so that each kept record is reported once per change of its verdict,
// across restarts and leader changes, and `finale audit` reads the verdict
// from the record, not from Events that expire. changed is what this
// process's memory says; it decides when the store keeps no notes or the
// note cannot be written (the record changed meanwhile: the next pass
// looks again).
func (p *pass) report(ctx context.Context, r *ledger.Record, st State, cl string, changed bool) bool {
	return p.reportNote(ctx, r, ledger.Note{State: string(st), Class: cl, Since: p.now}, changed)
}

// reportNote is report of the Note n.
func (p *pass) reportNote(ctx context.Context, r *ledger.Record, n ledger.Note, changed bool) bool {
	st := n.State
	if r.Note.Same(n) {
		return false
	}
	err := p.s.opts.Ledger.Note(ctx, r, n)
	switch {
	case err == nil:
		return true
	case !errors.Is(err, ledger.ErrNoNotes):
		p.s.opts.Log.V(1).Info("could not keep the sweeper's verdict on the record", "owner", r.Owner.String(), "state", st, "error", err.Error())
	}
	return changed
}

// unnote drops the verdict of an earlier pass from a record that is no
// longer kept (its owner is back, or a new attempt restarted its settle
// window), so that a later verdict is reported again. Only records that
// carry one are written.
func (p *pass) unnote(ctx context.Context, r *ledger.Record) {
	if r.Note.State == "" {
		return
	}
	if err := p.s.opts.Ledger.Note(ctx, r, ledger.Note{}); err != nil && !errors.Is(err, ledger.ErrNoNotes) {
		p.s.opts.Log.V(1).Info("could not drop the sweeper's verdict from the record", "owner", r.Owner.String(), "error", err.Error())
	}
}

func (p *pass) forget(k string) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	delete(p.s.memos, k)
}

type ownerState int

const (
	alive ownerState = iota
	// gone: no object of that kind, namespace and name, or one (another
	// UID) that does not claim the record: a plain re-create of a name is
	// another object, and must not keep its predecessor's resources alive
	// for its whole life.
	gone
	// namesake: another object has the name and claims the record
	// (ledger.AnnotationUID names the record's UID): a restore, which may
	// adopt it.
	namesake
)

// owner looks the record's owner up through rd. The record is
// authenticated, so its namespace and name are those of the UID it names,
// and an object's namespace and name never change: looking up the name
// and comparing the UID finds the owner by its UID. Only an explicit claim
// stops the sweeper for a namesake; a restored object carries its claim
// from its creation (a restore keeps annotations).
func (p *pass) owner(ctx context.Context, r *ledger.Record, rd client.Reader) (ownerState, *metav1.PartialObjectMetadata, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(r.Owner.GroupVersionKind())
	err := rd.Get(ctx, client.ObjectKey{Namespace: r.Owner.Namespace, Name: r.Owner.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return gone, nil, nil
	case err != nil:
		return alive, nil, fmt.Errorf("sweep: look up %s: %w", r.Owner, err)
	case obj.GetUID() == r.Owner.UID:
		return alive, nil, nil
	case !r.Owner.ClaimedBy(obj):
		return gone, nil, nil
	}
	return namesake, obj, nil
}

// claim decides a record that c, an object of the owner's kind, namespace
// and name with another UID, claims, and reports whether the record is
// kept this pass. A claim that may pass (ledger.Record.ClaimApproved: the
// record's own namespace, or an admin's approval) keeps it while it
// stands: adoption follows. One that needs an admin keeps it for
// Options.ClaimGrace from the sweeper's first sight of the claim, then no
// longer: whoever created the namespace again could otherwise keep the
// predecessor's resources (a role whose name and tag any login reads)
// alive for ever. Nothing the claimant writes moves the deadline: it is
// counted from this sweeper's clock, and kept on the record (its Note),
// which only the operator and admins can write.
func (p *pass) claim(ctx context.Context, k string, r *ledger.Record, c *metav1.PartialObjectMetadata) bool {
	other := fmt.Sprintf("%s %s/%s (uid %s)", r.Owner.Kind, c.GetNamespace(), c.GetName(), c.GetUID())
	nsUID, err := p.namespaceUID(ctx, c.GetNamespace())
	if err != nil {
		// Not knowing whether the claim may pass is no ground to sweep.
		p.countErr(ctx, err)
		p.s.opts.Log.Error(err, "read the namespace of a claim on a cleanup record", "owner", r.Owner.String())
		p.settle(k, Adoptable, true)
		return true
	}
	if r.ClaimApproved(c.GetUID(), nsUID) {
		if p.report(ctx, r, Adoptable, "", p.settle(k, Adoptable, false)) {
			p.s.opts.Log.Info("cleanup record adoptable: "+fmt.Sprintf(messageAdoptable, r.Owner, other), "owner", r.Owner.String())
			p.event(r, corev1.EventTypeNormal, ReasonAdoptable, messageAdoptable, r.Owner.String(), other)
		}
		return true
	}
	since := p.claimSince(k, r)
	until := since.Add(p.s.opts.ClaimGrace)
	if !p.now.Before(until) {
		return false
	}
	n := ledger.Note{State: string(Adoptable), Class: ClassNeedsApproval, Since: since, Until: until}
	if p.reportNote(ctx, r, n, p.settle(k, Adoptable, false)) {
		ns, name := "", ledger.ConfigMapName(r.Owner.UID)
		if r.Source != nil {
			ns, name = r.Source.Namespace, r.Source.Name
		}
		deadline := until.UTC().Format(time.RFC3339)
		p.s.opts.Log.Info("cleanup record claimed without approval: "+fmt.Sprintf(messageClaimUnapproved, r.Owner, other, deadline, ns, name, c.GetUID()), "owner", r.Owner.String())
		p.event(r, corev1.EventTypeWarning, ReasonAdoptable, messageClaimUnapproved, r.Owner.String(), other, deadline, ns, name, c.GetUID())
		p.claimantEvent(r, c, ReasonClaimPending, messageClaimPending, r.Owner.UID, deadline, p.s.opts.ClaimGrace)
	}
	return true
}

// claimSince is the start of the grace of an unapproved claim on the
// record k: this sweeper's first sight of it, or the earlier start its
// own Note on the record says (a restarted sweeper, a new leader). A
// start in the future is no start. Never anything the claimant wrote.
func (p *pass) claimSince(k string, r *ledger.Record) time.Time {
	since := p.now
	if n := r.Note; n.State == string(Adoptable) && n.Class == ClassNeedsApproval && !n.Since.IsZero() && n.Since.Before(since) {
		since = n.Since
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	m, ok := p.s.memos[k]
	if !ok {
		m = &memo{state: Waiting}
		p.s.memos[k] = m
	}
	m.seen = true
	if m.claimSince.IsZero() || since.Before(m.claimSince) {
		m.claimSince = since
	}
	return m.claimSince
}

// namespaceUID reads the UID of namespace live; "" for a cluster-scoped
// claimant, and for a namespace the sweeper may not read or that is gone
// (unknown counts as another namespace, as in ledger.Adopt).
func (p *pass) namespaceUID(ctx context.Context, namespace string) (types.UID, error) {
	if namespace == "" {
		return "", nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	err := p.s.opts.Live.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("sweep: read namespace %s: %w", namespace, err)
	}
	return ns.GetUID(), nil
}

// claimantEvent sends an Event about the record r to c, the object that
// claims it: the user who restored it reads its Events, not the records
// namespace's.
func (p *pass) claimantEvent(r *ledger.Record, c *metav1.PartialObjectMetadata, reason, msg string, args ...interface{}) {
	if p.s.opts.Recorder == nil || c == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: r.Owner.APIVersion, Kind: r.Owner.Kind, Namespace: c.GetNamespace(), Name: c.GetName(), UID: c.GetUID()}
	p.s.opts.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, reason, ActionSweep, msg, args...)
}
