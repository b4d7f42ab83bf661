package sweep

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	ActionSweep       = "Sweep"

	// MessageUnreachable: owner, deployment, IDs, tag, namespace, name, error.
	MessageUnreachable = "owner %s is gone but no connection proves deployment %s (%v). " +
		"To clean up by hand: in that deployment delete the resources with IDs %q and any resource tagged %q, " +
		"then delete this record: kubectl -n %s delete configmap %s"
	// MessageInvalid: namespace, name, error.
	MessageInvalid = "cleanup record %s/%s is invalid and will not be acted on or deleted by the sweeper: %v. " +
		"Repair it, or clean up its external resources by hand and then delete it"
	// MessageSwept: owner, number of deleted resources, deployment.
	MessageSwept = "owner %s is gone: deleted %d external resource(s) in deployment %s, then removed this record"
)

// Defaults.
const (
	DefaultSettle     = 5 * time.Minute
	DefaultInterval   = time.Minute
	DefaultPageSize   = 500
	DefaultWorkers    = 4
	DefaultMaxBackoff = 30 * time.Minute
)

// Targets lists the connections the sweeper may try: typically one per
// connection object the operator knows, in any namespace. The sweeper uses
// one only for records whose deployment it proves.
type Targets interface {
	Targets(ctx context.Context) ([]ledger.Target, error)
}

// TargetsFn adapts a function to Targets.
type TargetsFn func(ctx context.Context) ([]ledger.Target, error)

// Targets implements Targets.
func (f TargetsFn) Targets(ctx context.Context) ([]ledger.Target, error) { return f(ctx) }

// EventRecorder is the part of controller-runtime's manager recorder
// (k8s.io/client-go/tools/events.EventRecorder) the sweeper uses.
type EventRecorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Options configure a Sweeper. Store, Owners and Targets are required.
type Options struct {
	// Store holds the records (the operator's ledger store).
	Store ledger.Store
	// Owners reads owners by namespace/name as PartialObjectMetadata; give it
	// the manager's cache, so that a pass does not GET each owner.
	Owners client.Reader
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
	// Interval is the time between passes (default DefaultInterval) and the
	// first backoff step.
	Interval time.Duration
	// MaxBackoff caps the per-record backoff (default DefaultMaxBackoff).
	MaxBackoff time.Duration
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
	opts   Options
	ledger *ledger.Ledger

	mu    sync.Mutex       // guards memos
	memos map[string]*memo // by record key; records not healthy-Waiting only
}

// memo is what the sweeper remembers about one record between passes.
type memo struct {
	state    State
	failures int
	retryAt  time.Time
	seen     bool // in the current pass
}

var (
	_ manager.Runnable               = (*Sweeper)(nil)
	_ manager.LeaderElectionRunnable = (*Sweeper)(nil)
)

// New checks opts, fills in defaults and returns a Sweeper.
func New(opts Options) (*Sweeper, error) {
	var missing []string
	if opts.Store == nil {
		missing = append(missing, "Store")
	}
	if opts.Owners == nil {
		missing = append(missing, "Owners")
	}
	if opts.Targets == nil {
		missing = append(missing, "Targets")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sweep: New: missing %v", missing)
	}
	if opts.Settle < 0 || opts.Interval < 0 || opts.MaxBackoff < 0 || opts.PageSize < 0 || opts.Workers < 0 {
		return nil, errors.New("sweep: New: Settle, Interval, MaxBackoff, PageSize and Workers must not be negative")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultMaxBackoff
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
	return &Sweeper{
		opts:   opts,
		ledger: ledger.New(opts.Store, ledger.Options{Clock: opts.Clock, Classifier: opts.Classifier}),
		memos:  map[string]*memo{},
	}, nil
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
	Waiting, Settling, Unreachable, Invalid int
	// BackingOff counts records skipped this pass because of earlier failures.
	BackingOff int
	// Deleted counts external resources deleted; Removed counts records
	// removed after a confirmed delete.
	Deleted, Removed int
	// Errors counts failures (owner lookups, identification, cleanup).
	Errors int
}

func (r *Report) count(st State) {
	switch st {
	case Waiting:
		r.Waiting++
	case Settling:
		r.Settling++
	case Unreachable:
		r.Unreachable++
	case Invalid:
		r.Invalid++
	}
}

// pass is the state of one Pass.
type pass struct {
	s   *Sweeper
	now time.Time

	mu  sync.Mutex // guards rep
	rep Report

	targetsOnce sync.Once
	targets     []candidate // set by targetsOnce
}

type candidate struct {
	t  ledger.Target
	id ledger.Identity
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
	cont := ""
	for {
		page, err := s.opts.Store.List(ctx, s.opts.PageSize, cont)
		if err != nil {
			p.countErr(ctx, err)
			return p.rep, fmt.Errorf("sweep: %w", err)
		}
		for _, inv := range page.Invalid {
			p.invalid(inv)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(s.opts.Workers)
		for _, r := range page.Records {
			g.Go(func() error { p.one(gctx, r); return nil })
		}
		_ = g.Wait() // workers report through p, never fail the group
		if page.Continue == "" || ctx.Err() != nil {
			break
		}
		cont = page.Continue
	}
	s.mu.Lock()
	for k, m := range s.memos {
		if !m.seen {
			delete(s.memos, k) // the record is gone
		}
	}
	s.mu.Unlock()
	rep := p.rep
	for _, st := range states {
		n := map[State]int{Waiting: rep.Waiting, Settling: rep.Settling, Unreachable: rep.Unreachable, Invalid: rep.Invalid}[st]
		recordsGauge.WithLabelValues(string(st)).Set(float64(n))
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

func (p *pass) countErr(ctx context.Context, err error) {
	cl := p.s.opts.Classifier.Classify(ctx, err)
	errorsTotal.WithLabelValues(string(cl)).Inc()
	p.add(func(r *Report) { r.Errors++ })
}

func (p *pass) invalid(inv ledger.Invalid) {
	k := key(inv.Record)
	p.memo(k)
	if p.settle(k, Invalid, false) {
		ns, name := "", ""
		if inv.Record != nil && inv.Record.Source != nil {
			ns, name = inv.Record.Source.Namespace, inv.Record.Source.Name
		}
		p.s.opts.Log.Error(inv.Err, "invalid cleanup record left alone", "namespace", ns, "name", name)
		p.event(inv.Record, corev1.EventTypeWarning, ReasonInvalid, MessageInvalid, ns, name, inv.Err)
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
	gone, err := p.ownerGone(ctx, r)
	if err != nil {
		p.countErr(ctx, err)
		p.s.opts.Log.Error(err, "look up owner of cleanup record", "owner", r.Owner.String())
		p.settle(k, Waiting, true)
		return
	}
	if !gone {
		p.settle(k, Waiting, false)
		return
	}
	if p.now.Sub(r.SettleFrom()) < p.s.opts.Settle {
		p.settle(k, Settling, false)
		return
	}
	lastErr := errNoTarget
	for _, c := range p.candidates(ctx) {
		if !ledger.Proves(c.id, r.Deployment, r.Proof) {
			continue
		}
		res, err := p.s.ledger.Cleanup(ctx, r.Owner.UID, c.t)
		if n := len(res.Deleted); n > 0 {
			deletedTotal.Add(float64(n))
			p.add(func(rep *Report) { rep.Deleted += n })
		}
		if err == nil {
			if res.Removed {
				removedTotal.Inc()
				p.add(func(rep *Report) { rep.Removed++ })
				p.s.opts.Log.Info("swept cleanup record", "owner", r.Owner.String(), "deployment", r.Deployment, "deleted", res.Deleted)
				p.event(r, corev1.EventTypeNormal, ReasonSwept, MessageSwept, r.Owner.String(), len(res.Deleted), r.Deployment)
			}
			p.forget(k)
			return
		}
		p.countErr(ctx, err)
		lastErr = err
		if !errors.Is(err, ledger.ErrNotProven) {
			break // a real failure in the right deployment: retry later
		}
	}
	ns, name := "", ""
	if r.Source != nil {
		ns, name = r.Source.Namespace, r.Source.Name
	}
	args := []interface{}{r.Owner.String(), r.Deployment, lastErr, r.ExternalIDs, r.Tag, ns, name}
	if p.settle(k, Unreachable, true) {
		p.s.opts.Log.Info("cleanup record unreachable: "+fmt.Sprintf(MessageUnreachable, args...), "owner", r.Owner.String())
		p.event(r, corev1.EventTypeWarning, ReasonUnreachable, MessageUnreachable, args...)
	} else {
		p.s.opts.Log.V(1).Info("cleanup record still unreachable", "owner", r.Owner.String(), "deployment", r.Deployment, "error", lastErr.Error())
	}
}

var errNoTarget = errors.New("no known connection reaches it")

func (p *pass) forget(k string) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	delete(p.s.memos, k)
}

// candidates identifies every target once per pass, only when some record
// needs it. Cleanup proves the identity again, live, before acting.
func (p *pass) candidates(ctx context.Context) []candidate {
	p.targetsOnce.Do(func() {
		ts, err := p.s.opts.Targets.Targets(ctx)
		if err != nil {
			p.countErr(ctx, err)
			p.s.opts.Log.Error(err, "list sweep targets")
			return
		}
		for _, t := range ts {
			id, err := t.Identify(ctx)
			if err != nil {
				p.countErr(ctx, err)
				p.s.opts.Log.Error(err, "identify sweep target")
				continue
			}
			p.targets = append(p.targets, candidate{t: t, id: id})
		}
	})
	return p.targets
}

// ownerGone reports whether no object with the record's owner UID exists:
// not found by namespace/name, or found with another UID (recreated).
func (p *pass) ownerGone(ctx context.Context, r *ledger.Record) (bool, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(r.Owner.GroupVersionKind())
	err := p.s.opts.Owners.Get(ctx, client.ObjectKey{Namespace: r.Owner.Namespace, Name: r.Owner.Name}, obj)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("sweep: look up %s: %w", r.Owner, err)
	}
	return obj.GetUID() != r.Owner.UID, nil
}
