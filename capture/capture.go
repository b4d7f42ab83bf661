package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/errclass"
)

// DefaultFinalizer is the capture finalizer used when Options.Finalizer is
// empty.
const DefaultFinalizer = "capture.finale.dev/result"

// DefaultPendingThreshold is how long a capture may be pending before it is
// reported as overdue, when Options.PendingThreshold is zero.
const DefaultPendingThreshold = 5 * time.Minute

// DefaultMaxPersistAttempts bounds the passes inside one Release call (each
// pass is one decision and at most one write; only conflicts start another);
// past it Release returns an error and the caller (the reconciler) tries
// again later with backoff and the finalizer still held, so nothing is
// dropped.
const DefaultMaxPersistAttempts = 30

// siblingPatches is how many sibling releases one pass has in flight.
const siblingPatches = 8

// DefaultReleaseTimeout bounds one Release call, API calls included, when
// Options.ReleaseTimeout is zero: a hung apiserver call ends the pass with
// an error (retried with backoff) instead of holding a worker.
const DefaultReleaseTimeout = time.Minute

// Event reasons and messages. Messages are format strings.
const (
	EventReasonPending       = "CapturePending"
	EventReasonPersisted     = "ResultPersisted"
	EventReasonPersistFailed = "ResultPersistFailed"
	EventReasonResultNotKept = "ResultNotKept"
	// EventReasonReleasedNamespaceTerminating is a release because the
	// child's namespace is terminating (ReasonNamespaceTerminating). It is
	// emitted while that namespace refuses new objects, Events included: a
	// recorder that redirects it to the operator's namespace
	// (internal/eventrec) keeps it findable.
	EventReasonReleasedNamespaceTerminating = "ReleasedNamespaceTerminating"
	// MessageReleasedNamespaceTerminating goes with it.
	MessageReleasedNamespaceTerminating = "capture finalizer %s released: namespace %s is terminating, and owner %s goes with it; the owner had not recorded the result of this child"

	eventActionCapture = "Capture"

	messagePending   = "capture finalizer %s held for %s: owner %s/%s has not recorded the result of this child, which is %s; it is released only when the result is recorded or persisted, or the owner is gone, deleting, finished or cancelled"
	messagePersisted = "result of child %s (UID %s) persisted to owner %s/%s by the release path"
	// messagePersistFailed carries the error's class, not its text: the
	// Event is read by the namespace's users; the error goes to the log.
	messagePersistFailed = "persisting the result of child %s (UID %s) to owner %s/%s failed (%s error); the finalizer stays and the release is retried. The cause is in the controller's log"
	messageResultNotKept = "owner %s/%s accepted the result of child %s (UID %s), but the object it returned does not hold it: its schema prunes the field or a webhook strips it; the finalizer stays and the write is retried with backoff"
)

// ErrNotRecordedAfterPersist means the ResultWriter ran but the ResultReader
// still reports the child's result as missing: the two adapters disagree
// about where the result lives. The finalizer stays.
var ErrNotRecordedAfterPersist = errors.New("capture: ResultWriter.Persist did not make ResultReader.Recorded true for the child; fix the adapters so they agree on where results live")

// ErrPassesExhausted means one Release call made Options.MaxPersistAttempts
// passes, each ended by a conflict, without a verdict. The finalizer stays;
// the reconciler retries with backoff.
var ErrPassesExhausted = errors.New("capture: no verdict within the pass bound (every pass conflicted); the finalizer stays and the release is retried with backoff")

// ErrResultNotKept means the owner's status write succeeded but the object
// it returned does not hold the child's result: the owner's schema prunes
// the field, or an admission webhook strips it. Writing again cannot help,
// so the pass ends, the finalizer stays and the reconciler backs off.
var ErrResultNotKept = errors.New("capture: the owner accepted the status write but the object it returned does not hold the child's result (its CRD schema prunes the field, or a webhook strips it); the finalizer stays: declare the results field in the owner's schema")

// ResultReader reports whether the owner has recorded the result of the child
// with the given UID. It must look only at owner (no I/O).
type ResultReader[O client.Object] interface {
	Recorded(owner O, child types.UID) bool
}

// ResultReaderFn adapts a function to ResultReader.
type ResultReaderFn[O client.Object] func(owner O, child types.UID) bool

// Recorded calls f.
func (f ResultReaderFn[O]) Recorded(owner O, child types.UID) bool { return f(owner, child) }

// ChildResultReader is a ResultReader for owners that record results under
// something the child carries other than its UID (Argo's Workflow keys its
// nodes by the Pod's node-id annotation). It must look only at owner and
// child (no I/O).
type ChildResultReader[O client.Object] interface {
	RecordedChild(owner O, child client.Object) bool
}

// ChildResultReaderFn adapts a function to ChildResultReader.
type ChildResultReaderFn[O client.Object] func(owner O, child client.Object) bool

// RecordedChild calls f.
func (f ChildResultReaderFn[O]) RecordedChild(owner O, child client.Object) bool {
	return f(owner, child)
}

// ResultWriter puts the child's result into owner's status, keyed by the
// child's UID, in memory. The Releaser writes it through the status
// subresource with optimistic concurrency and retries conflicts on a fresh
// copy. An error (for example a child without a readable result) keeps the
// finalizer and is reported.
type ResultWriter[O client.Object] interface {
	Persist(owner O, child client.Object) error
}

// ResultWriterFn adapts a function to ResultWriter.
type ResultWriterFn[O client.Object] func(owner O, child client.Object) error

// Persist calls f.
func (f ResultWriterFn[O]) Persist(owner O, child client.Object) error { return f(owner, child) }

// Completion reports whether the owner is finished or cancelled, that is no
// longer needs the results of its children.
type Completion[O client.Object] interface {
	Finished(owner O) bool
}

// CompletionFn adapts a function to Completion.
type CompletionFn[O client.Object] func(owner O) bool

// Finished calls f.
func (f CompletionFn[O]) Finished(owner O) bool { return f(owner) }

// ChildState reports whether a child has finished, so that its result is
// final and may be persisted.
type ChildState interface {
	Terminal(child client.Object) bool
}

// ChildStateFn adapts a function to ChildState.
type ChildStateFn func(child client.Object) bool

// Terminal calls f.
func (f ChildStateFn) Terminal(child client.Object) bool { return f(child) }

// EventRecorder is the part of client-go's events.EventRecorder (what
// controller-runtime's manager.GetEventRecorder returns) that capture uses.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Watchdog is the optional hook for the G1 watchdog: each pass over a child
// being deleted whose finalizer stays is an attempt (err says why it stays),
// and the release is done.
type Watchdog interface {
	Attempt(ctx context.Context, obj client.Object, finalizer string, err error) bool
	Done(ctx context.Context, obj client.Object, finalizer string)
}

// Writer is the narrowest client role the release path needs: patch the
// child's finalizers and update the owner's status.
type Writer interface {
	client.Writer
	client.StatusClient
}

// Options configure a Releaser. Name, OwnerKind and NewOwner are required;
// exactly one of Results and ChildResults; and Writer, unless OwnerPersists.
type Options[O client.Object] struct {
	// Name names the release controller and labels its metrics.
	Name string
	// Finalizer is the capture finalizer; DefaultFinalizer when empty.
	Finalizer string
	// OwnerKind is the group and kind of owner references that own children.
	OwnerKind schema.GroupKind
	// NewOwner returns an empty owner object.
	NewOwner func() O
	// NewChild returns an empty child object; a Pod when nil.
	NewChild func() client.Object
	// NewChildList returns an empty list of children; a PodList when nil.
	NewChildList func() client.ObjectList
	// Results reads whether the owner recorded a child's result, by the
	// child's UID.
	Results ResultReader[O]
	// ChildResults, instead of Results, reads it from the whole child.
	ChildResults ChildResultReader[O]
	// Writer writes a child's result into the owner.
	Writer ResultWriter[O]
	// OwnerPersists: the owner's own controller is the only writer of
	// results (it owns a status this process must not write); the release
	// path never persists, and a terminal child being deleted whose result
	// the active owner has not recorded is held (ReasonAwaitingOwner) until
	// the owner records it or no longer needs it. Writer must be nil.
	OwnerPersists bool
	// Completion says the owner is finished or cancelled; never when nil.
	Completion Completion[O]
	// ChildState says a child is terminal; PodTerminal when nil.
	ChildState ChildState
	// Clock measures how long a capture has been pending (visibility only).
	Clock clock.PassiveClock
	// PendingThreshold: a capture pending longer gets the overdue metric
	// and one Warning Event; DefaultPendingThreshold when zero.
	PendingThreshold time.Duration
	// Events receives Events; none are emitted when nil.
	Events EventRecorder
	// Watchdog, when set, sees every held attempt and every release.
	Watchdog Watchdog
	// MaxPersistAttempts bounds conflict retries within one Release call;
	// DefaultMaxPersistAttempts when zero.
	MaxPersistAttempts int
	// MaxConcurrentReconciles of the release controller; 1 when zero.
	MaxConcurrentReconciles int
	// ReleaseTimeout bounds one Release call; DefaultReleaseTimeout when
	// zero.
	ReleaseTimeout time.Duration
}

// Stats are counts since the Releaser was made, for tests and reports.
type Stats struct {
	// Releases by reason.
	Releases map[Reason]int
	// Persisted results written by the release path.
	Persisted int
	// Conflicts on the owner's status, each retried.
	Conflicts int
	// Errors returned by Release (each retried by the reconciler).
	Errors int
	// NotKept: status writes that succeeded but returned the owner without
	// the result (ErrResultNotKept).
	NotKept int
}

// Releaser owns a capture finalizer: it decides, with Rule, whether a child
// may lose it, persists results the owner has not recorded, and removes it.
// It is also a controller-runtime reconciler on the children
// (SetupWithManager), independent of the owner's own workers.
type Releaser[O client.Object] struct {
	opts Options[O]
	// live reads owners (and children after a conflict) from the apiserver.
	live client.Reader
	// cache reads children in Reconcile; live when SetupWithManager is not used.
	cache client.Reader
	w     Writer

	mu sync.Mutex
	// pending: children being deleted whose capture is held, by name, and whether
	// the overdue Warning was already emitted. Guarded by mu.
	pending map[types.NamespacedName]pendingEntry
	// stats guarded by mu.
	stats Stats
	// byUs: children whose result this process persisted and that it has
	// not released yet, so that their release counts as Persisted even when
	// the write was batched with a sibling's. Guarded by mu.
	byUs map[types.NamespacedName]ours
	// releasedFrom: the resourceVersion each child had when this process
	// removed its finalizer, to recognise a stale cached copy and not patch
	// it again. Dropped when the child is gone or seen at another version.
	// Guarded by mu.
	releasedFrom map[types.NamespacedName]releasedEntry
	// claimed: children a pass is releasing now, so that a concurrent pass
	// does not patch them too. Guarded by mu.
	claimed map[types.NamespacedName]bool
	// indexed: SetupWithManager indexed children by owner UID in cache, so
	// siblings can be found for a batched persist. Set before Start.
	indexed bool
}

type releasedEntry struct {
	uid types.UID
	rv  string
}

// New returns a Releaser. live must read from the apiserver, not a cache:
// "owner not found" releases the finalizer, so it must never come from a
// cache that has not seen the owner yet.
func New[O client.Object](live client.Reader, w Writer, opts Options[O]) (*Releaser[O], error) {
	switch {
	case opts.Name == "":
		return nil, errors.New("capture: Options.Name is required (it names the controller and labels its metrics)")
	case opts.OwnerKind.Kind == "":
		return nil, errors.New("capture: Options.OwnerKind is required (the group and kind of the owner references to follow)")
	case opts.NewOwner == nil:
		return nil, errors.New("capture: Options.NewOwner is required (it returns an empty owner object)")
	case opts.Results == nil && opts.ChildResults == nil:
		return nil, errors.New("capture: Options.Results or Options.ChildResults is required (how to tell the owner recorded a child's result)")
	case opts.Results != nil && opts.ChildResults != nil:
		return nil, errors.New("capture: set one of Options.Results and Options.ChildResults, not both")
	case opts.Writer == nil && !opts.OwnerPersists:
		return nil, errors.New("capture: Options.Writer is required (how to put a child's result into the owner), unless Options.OwnerPersists says the owner alone writes results")
	case opts.Writer != nil && opts.OwnerPersists:
		return nil, errors.New("capture: Options.OwnerPersists says the release path never persists, but Options.Writer is set; choose one")
	case live == nil || w == nil:
		return nil, errors.New("capture: a live reader and a writer are required")
	case opts.PendingThreshold < 0:
		return nil, fmt.Errorf("capture: Options.PendingThreshold is %s; it must be positive (or zero for the default)", opts.PendingThreshold)
	case opts.ReleaseTimeout < 0:
		return nil, fmt.Errorf("capture: Options.ReleaseTimeout is %s; it must be positive (or zero for the default)", opts.ReleaseTimeout)
	}
	if opts.Finalizer == "" {
		opts.Finalizer = DefaultFinalizer
	}
	if opts.NewChild == nil {
		opts.NewChild = func() client.Object { return &corev1.Pod{} }
	}
	if opts.NewChildList == nil {
		opts.NewChildList = func() client.ObjectList { return &corev1.PodList{} }
	}
	if opts.ChildState == nil {
		opts.ChildState = ChildStateFn(PodTerminal)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PendingThreshold == 0 {
		opts.PendingThreshold = DefaultPendingThreshold
	}
	if opts.MaxPersistAttempts <= 0 {
		opts.MaxPersistAttempts = DefaultMaxPersistAttempts
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 1
	}
	if opts.ReleaseTimeout == 0 {
		opts.ReleaseTimeout = DefaultReleaseTimeout
	}
	return &Releaser[O]{
		opts:         opts,
		live:         live,
		cache:        live,
		w:            w,
		pending:      map[types.NamespacedName]pendingEntry{},
		byUs:         map[types.NamespacedName]ours{},
		releasedFrom: map[types.NamespacedName]releasedEntry{},
		claimed:      map[types.NamespacedName]bool{},
		stats:        Stats{Releases: map[Reason]int{}},
	}, nil
}

// Place adds the capture finalizer to a child before it is created, so that
// no window exists in which the child could go without its result. It
// reports whether it changed child.
func Place(child client.Object, finalizer string) bool {
	if finalizer == "" {
		finalizer = DefaultFinalizer
	}
	return controllerutil.AddFinalizer(child, finalizer)
}

// Finalizer is the capture finalizer this Releaser owns.
func (r *Releaser[O]) Finalizer() string { return r.opts.Finalizer }

// Stats returns a copy of the counts.
func (r *Releaser[O]) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Releases = make(map[Reason]int, len(r.stats.Releases))
	for k, v := range r.stats.Releases {
		s.Releases[k] = v
	}
	return s
}

// OwnerRef returns the child's owner reference of the owner kind,
// preferring the controller reference, or nil when there is none.
func (r *Releaser[O]) OwnerRef(child client.Object) *metav1.OwnerReference {
	return ownerRef(child, r.opts.OwnerKind)
}

func ownerRef(child client.Object, kind schema.GroupKind) *metav1.OwnerReference {
	var found *metav1.OwnerReference
	for i, ref := range child.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != kind.Group || ref.Kind != kind.Kind {
			continue
		}
		if ref.Controller != nil && *ref.Controller {
			return &child.GetOwnerReferences()[i]
		}
		if found == nil {
			found = &child.GetOwnerReferences()[i]
		}
	}
	return found
}

// Decide gathers the facts about child and its owner (the owner read live)
// and applies Rule. The owner is returned when it was found. With
// Options.OwnerPersists, a Persist verdict is a Hold (ReasonAwaitingOwner).
func (r *Releaser[O]) Decide(ctx context.Context, child client.Object) (Decision, O, error) {
	f, owner, err := r.facts(ctx, child)
	if err != nil {
		return Decision{}, owner, err
	}
	return r.verdict(f), owner, nil
}

func (r *Releaser[O]) verdict(f Facts) Decision {
	d := Rule(f)
	if d.Action == Persist && r.opts.OwnerPersists {
		return Decision{Action: Hold, Reason: ReasonAwaitingOwner}
	}
	return d
}

func (r *Releaser[O]) facts(ctx context.Context, child client.Object) (Facts, O, error) {
	var zero O
	ref := ownerRef(child, r.opts.OwnerKind)
	if ref == nil {
		return r.factsOf(child, zero, false), zero, nil
	}
	owner := r.opts.NewOwner()
	err := r.live.Get(ctx, client.ObjectKey{Namespace: child.GetNamespace(), Name: ref.Name}, owner)
	if apierrors.IsNotFound(err) {
		return r.factsOf(child, zero, false), zero, nil
	}
	if err != nil {
		return Facts{}, zero, fmt.Errorf("capture: read owner %s %s/%s of child %s: %w", r.opts.OwnerKind.Kind, child.GetNamespace(), ref.Name, child.GetName(), err)
	}
	f := r.factsOf(child, owner, true)
	// The namespace is read only when it could change the verdict: a child
	// being deleted that nothing else releases. The common passes (recorded,
	// finished, a child not being deleted) cost no extra read.
	if f.ChildDeleting && r.verdict(f).Action != Release {
		term, err := r.namespaceTerminating(ctx, child.GetNamespace())
		if err != nil {
			return Facts{}, zero, err
		}
		f.NamespaceTerminating = term
	}
	return f, owner, nil
}

// namespaceTerminating reads ns live: a cache could still show a namespace
// of the same name that was deleted and re-created. A namespace that is
// not found is not taken for terminating (doubt keeps); a read that fails
// is an error, and the finalizer stays.
func (r *Releaser[O]) namespaceTerminating(ctx context.Context, ns string) (bool, error) {
	var n corev1.Namespace
	if err := r.live.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("capture: read namespace %s: %w", ns, err)
	}
	return n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating, nil
}

// factsOf is the facts about child given its owner as read (found false:
// not found). It does no I/O.
func (r *Releaser[O]) factsOf(child client.Object, owner O, found bool) Facts {
	f := Facts{
		ChildTerminal: r.opts.ChildState.Terminal(child),
		ChildDeleting: child.GetDeletionTimestamp() != nil,
	}
	ref := ownerRef(child, r.opts.OwnerKind)
	if ref == nil {
		return f
	}
	f.HasOwnerRef = true
	if !found {
		return f
	}
	f.OwnerFound = true
	f.OwnerUIDMatches = owner.GetUID() == ref.UID
	f.OwnerDeleting = owner.GetDeletionTimestamp() != nil
	f.OwnerFinished = r.opts.Completion != nil && r.opts.Completion.Finished(owner)
	f.Recorded = r.recorded(owner, child)
	return f
}

func (r *Releaser[O]) recorded(owner O, child client.Object) bool {
	if r.opts.ChildResults != nil {
		return r.opts.ChildResults.RecordedChild(owner, child)
	}
	return r.opts.Results.Recorded(owner, child.GetUID())
}

// Release is the one release path: it decides with Rule; on Release it
// removes the finalizer; on Persist it writes the child's result to the
// owner's status (conflicts retried on a fresh owner), checks the result on
// the object the write returned, and only then removes the finalizer; on
// Hold it changes nothing. A child without the finalizer gets the zero
// Decision. child is updated in place.
//
// Every call is bounded: at most Options.MaxPersistAttempts passes (only a
// conflict starts another), at most one owner write per pass, and
// Options.ReleaseTimeout in all. A write the apiserver accepted but whose
// returned object lacks the result (a schema that prunes it, a webhook that
// strips it) ends the call with ErrResultNotKept, a Warning Event and
// finale_capture_results_not_kept_total: writing it again at once cannot
// help, so the reconciler backs off, and its worker is free for other
// children.
func (r *Releaser[O]) Release(ctx context.Context, child client.Object) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.ReleaseTimeout)
	defer cancel()
	d, err := r.release(ctx, child)
	if err != nil {
		r.mu.Lock()
		r.stats.Errors++
		r.mu.Unlock()
	}
	return d, err
}

func (r *Releaser[O]) release(ctx context.Context, child client.Object) (Decision, error) {
	fin := r.opts.Finalizer
	var (
		d Decision
		// written is the owner as this call's own status write returned
		// it: the next pass decides on it, not on a fresh read, so what
		// the apiserver kept is what counts.
		written *O
		last    error
		// nsTerminating: the last live decision found the child's
		// namespace terminating; siblings share the namespace.
		nsTerminating bool
	)
	for attempt := 1; attempt <= r.opts.MaxPersistAttempts; attempt++ {
		if !controllerutil.ContainsFinalizer(child, fin) {
			return Decision{}, nil
		}
		var owner O
		if written != nil {
			owner, written = *written, nil
			d = r.verdict(r.factsOf(child, owner, true))
		} else {
			f, o, err := r.facts(ctx, child)
			if err != nil {
				return Decision{}, err
			}
			owner, d, nsTerminating = o, r.verdict(f), f.NamespaceTerminating
		}
		r.mu.Lock()
		if o := r.byUs[client.ObjectKeyFromObject(child)]; o.uid == child.GetUID() && (o.done || o.inFlight > 0) && d.Action == Release && d.Reason == ReasonRecorded {
			// This process's write is what made it recorded.
			d.Reason = ReasonPersisted
		}
		r.mu.Unlock()
		switch d.Action {
		case Hold:
			return d, nil
		case Release:
			removed, err := r.removeFinalizer(ctx, child, d.Reason)
			if isStale(err) {
				last = err
				if err := r.refetch(ctx, child); err != nil {
					return d, err
				}
				continue
			}
			if err != nil {
				return d, err
			}
			if removed {
				r.released(child, d.Reason)
			}
			r.mu.Lock()
			delete(r.byUs, client.ObjectKeyFromObject(child))
			r.mu.Unlock()
			if ref := ownerRef(child, r.opts.OwnerKind); ref != nil {
				r.releaseSiblings(ctx, child, ref.UID, owner, d.Reason != ReasonOwnerGone, nsTerminating)
			}
			return d, nil
		case Persist:
			persisted, err := r.persist(ctx, owner, child)
			if apierrors.IsConflict(err) {
				last = err
				r.mu.Lock()
				r.stats.Conflicts++
				r.mu.Unlock()
				conflictsTotal.WithLabelValues(r.opts.Name).Inc()
				if err := backoff(ctx, attempt); err != nil {
					return d, err
				}
				continue
			}
			if errors.Is(err, ErrResultNotKept) {
				r.mu.Lock()
				r.stats.NotKept++
				r.mu.Unlock()
				notKeptTotal.WithLabelValues(r.opts.Name).Inc()
				log.FromContext(ctx).Info("capture: the owner's returned status lacks the child's result; the finalizer stays", "child", client.ObjectKeyFromObject(child), "owner", client.ObjectKeyFromObject(owner))
				r.event(child, corev1.EventTypeWarning, EventReasonResultNotKept, messageResultNotKept, owner.GetNamespace(), owner.GetName(), child.GetName(), child.GetUID())
				return d, err
			}
			if err != nil {
				class := errclass.Of(ctx, err)
				log.FromContext(ctx).Info("capture: persisting a child's result failed; the finalizer stays", "child", client.ObjectKeyFromObject(child), "class", class, "error", err.Error())
				r.event(child, corev1.EventTypeWarning, EventReasonPersistFailed, messagePersistFailed, child.GetName(), child.GetUID(), owner.GetNamespace(), owner.GetName(), class)
				return d, err
			}
			r.mu.Lock()
			r.stats.Persisted += len(persisted)
			r.mu.Unlock()
			persistedTotal.WithLabelValues(r.opts.Name).Add(float64(len(persisted)))
			for _, c := range persisted {
				r.event(c, corev1.EventTypeNormal, EventReasonPersisted, messagePersisted, c.GetName(), c.GetUID(), owner.GetNamespace(), owner.GetName())
			}
			// The next pass decides on the owner as the write returned it,
			// with the same rule as everyone else, and releases.
			written = &owner
		}
	}
	return d, fmt.Errorf("capture: child %s/%s: %w (last: %w)", child.GetNamespace(), child.GetName(), ErrPassesExhausted, last)
}

// releaseSiblings releases, on the same live read of the owner, the other
// children of that owner that the rule releases too: when an owner records
// the results of N children at once (or finishes, or goes), one read of it
// serves N releases instead of N reads of a large object. Each sibling is
// decided on its cached copy and that owner read, and patched with the
// cached copy's resourceVersion; a sibling that conflicts or fails is left
// to its own pass. found is false when the owner was read as gone;
// nsTerminating is the namespace's state as that pass read it (the
// siblings share the namespace, and a namespace never stops terminating).
func (r *Releaser[O]) releaseSiblings(ctx context.Context, child client.Object, ownerUID types.UID, owner O, found, nsTerminating bool) {
	if !r.indexed {
		return
	}
	list := r.opts.NewChildList()
	// Read only; the few that are patched are copied first.
	if err := r.cache.List(ctx, list, client.InNamespace(child.GetNamespace()), client.MatchingFields{r.indexName(): string(ownerUID)}, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	type release struct {
		sib client.Object
		d   Decision
	}
	var todo []release
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		sib, ok := obj.(client.Object)
		if !ok || sib.GetUID() == child.GetUID() || !controllerutil.ContainsFinalizer(sib, r.opts.Finalizer) || r.staleAfterRelease(sib) {
			return nil
		}
		f := r.factsOf(sib, owner, found)
		f.NamespaceTerminating = nsTerminating && f.ChildDeleting
		d := r.verdict(f)
		if d.Action != Release || !r.claim(client.ObjectKeyFromObject(sib)) {
			return nil
		}
		todo = append(todo, release{sib: sib.DeepCopyObject().(client.Object), d: d})
		return nil
	})
	// A few patches in flight: one pass releasing a fleet one patch at a
	// time would take as long as the fleet is large.
	sem := make(chan struct{}, siblingPatches)
	var wg sync.WaitGroup
	for _, t := range todo {
		key := client.ObjectKeyFromObject(t.sib)
		if ctx.Err() != nil {
			r.unclaim(key)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer r.unclaim(key)
			d := t.d
			r.mu.Lock()
			if o := r.byUs[key]; o.uid == t.sib.GetUID() && (o.done || o.inFlight > 0) && d.Reason == ReasonRecorded {
				d.Reason = ReasonPersisted
			}
			r.mu.Unlock()
			deleting := t.sib.GetDeletionTimestamp() != nil
			removed, err := r.removeFinalizer(ctx, t.sib, d.Reason)
			if err != nil || !removed {
				return
			}
			r.released(t.sib, d.Reason)
			r.mu.Lock()
			delete(r.byUs, key)
			r.mu.Unlock()
			r.forget(t.sib)
			if deleting && r.opts.Watchdog != nil {
				r.opts.Watchdog.Done(ctx, t.sib, r.opts.Finalizer)
			}
		}()
	}
	wg.Wait()
}

// claim marks a child as being released by a sibling batch, so that other
// passes leave it alone meanwhile; it reports false when already claimed.
func (r *Releaser[O]) claim(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claimed[key] {
		return false
	}
	r.claimed[key] = true
	return true
}

func (r *Releaser[O]) unclaim(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.claimed, key)
}

// persist writes child's result into owner's status, together with the
// results of siblings in the same state (finalized, terminal, deleting, not
// recorded), each under its own UID: one write instead of one per child
// when many finish and go at once. owner is a fresh live read; the update
// carries its resourceVersion, so a concurrent owner write makes it
// conflict rather than be overwritten. It returns the children persisted.
func (r *Releaser[O]) persist(ctx context.Context, owner O, child client.Object) ([]client.Object, error) {
	if err := r.opts.Writer.Persist(owner, child); err != nil {
		return nil, fmt.Errorf("capture: ResultWriter for child %s/%s: %w", child.GetNamespace(), child.GetName(), err)
	}
	if !r.recorded(owner, child) {
		return nil, ErrNotRecordedAfterPersist
	}
	batch := append([]client.Object{child}, r.persistSiblings(ctx, owner, child)...)
	// Marked in flight before the write: a sibling's own pass may see the
	// write (and release it) before this call returns, and its release must
	// count as Persisted.
	r.markOurs(batch, nil)
	// The Update decodes the stored object into owner: what is checked
	// below is what the apiserver kept, not what was sent.
	if err := r.w.Status().Update(ctx, owner); err != nil {
		r.markOurs(nil, batch)
		return nil, fmt.Errorf("capture: update status of owner %s/%s with the result of child %s: %w", owner.GetNamespace(), owner.GetName(), child.GetName(), err)
	}
	var persisted []client.Object
	for _, c := range batch {
		// A sibling whose result was not kept either is left to its own
		// pass, which reports it.
		if r.recorded(owner, c) {
			persisted = append(persisted, c)
		}
	}
	r.markOurs(nil, batch, persisted...)
	if !r.recorded(owner, child) {
		return nil, fmt.Errorf("capture: owner %s/%s, child %s: %w", owner.GetNamespace(), owner.GetName(), child.GetName(), ErrResultNotKept)
	}
	return persisted, nil
}

// ours is what this process knows about its own persists of one child's
// result: writes in flight, and whether one of them was kept.
type ours struct {
	uid      types.UID
	inFlight int
	done     bool
}

// markOurs starts in-flight persists of start, ends those of end, and marks
// kept (a subset of end) as done. Concurrent passes batch the same child;
// one failing must not forget another's success.
func (r *Releaser[O]) markOurs(start, end []client.Object, kept ...client.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range start {
		key := client.ObjectKeyFromObject(c)
		o := r.byUs[key]
		if o.uid != c.GetUID() {
			o = ours{uid: c.GetUID()}
		}
		o.inFlight++
		r.byUs[key] = o
	}
	for _, c := range end {
		key := client.ObjectKeyFromObject(c)
		o, ok := r.byUs[key]
		if !ok || o.uid != c.GetUID() {
			continue
		}
		o.inFlight--
		if slices.ContainsFunc(kept, func(k client.Object) bool { return k.GetUID() == c.GetUID() }) {
			o.done = true
		}
		if o.inFlight <= 0 && !o.done {
			delete(r.byUs, key)
			continue
		}
		r.byUs[key] = o
	}
}

// persistSiblings adds, in memory, the results of the owner's other children
// that are waiting for the same write. A sibling whose result cannot be
// written is left out; its own pass reports it.
func (r *Releaser[O]) persistSiblings(ctx context.Context, owner O, child client.Object) []client.Object {
	if !r.indexed {
		return nil
	}
	list := r.opts.NewChildList()
	if err := r.cache.List(ctx, list, client.InNamespace(owner.GetNamespace()), client.MatchingFields{r.indexName(): string(owner.GetUID())}); err != nil {
		return nil
	}
	var out []client.Object
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		sib, ok := obj.(client.Object)
		if !ok || sib.GetUID() == child.GetUID() || sib.GetDeletionTimestamp() == nil ||
			!controllerutil.ContainsFinalizer(sib, r.opts.Finalizer) || !r.opts.ChildState.Terminal(sib) ||
			r.recorded(owner, sib) {
			return nil
		}
		if ref := ownerRef(sib, r.opts.OwnerKind); ref == nil || ref.UID != owner.GetUID() {
			return nil
		}
		trial := owner.DeepCopyObject().(O)
		if err := r.opts.Writer.Persist(trial, sib); err != nil || !r.recorded(trial, sib) {
			return nil
		}
		if err := r.opts.Writer.Persist(owner, sib); err != nil {
			return nil
		}
		out = append(out, sib)
		return nil
	})
	return out
}

func (r *Releaser[O]) indexName() string { return ownerUIDIndex + "/" + r.opts.Name }

// removeFinalizer reports whether this call removed it; a child already
// gone (released by an earlier pass seen through a stale cache) is not a
// second release.
//
// reason says what the decision rested on. An orphan's release rests on
// the child's owner references, so it carries the child's resourceVersion
// (a merge patch with an optimistic lock: any change to the child since it
// was read makes it conflict). Every other release rests on the owner, read
// live, and on the child's identity: it is a JSON patch that tests the UID
// and that the finalizer is still at the index it was read at, then removes
// it. Other writers of the child (Argo labels a Pod completed as it records
// its node) then cost no conflict, and a finalizer list changed meanwhile
// fails the test (422, see isStale) instead of being overwritten.
func (r *Releaser[O]) removeFinalizer(ctx context.Context, child client.Object, reason Reason) (bool, error) {
	fromRV := child.GetResourceVersion()
	var err error
	if reason == ReasonOrphan {
		orig := child.DeepCopyObject().(client.Object)
		controllerutil.RemoveFinalizer(child, r.opts.Finalizer)
		err = r.w.Patch(ctx, child, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	} else {
		i := slices.Index(child.GetFinalizers(), r.opts.Finalizer)
		if i < 0 {
			return false, nil
		}
		ops, merr := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": child.GetUID()},
			{"op": "test", "path": "/metadata/finalizers/" + strconv.Itoa(i), "value": r.opts.Finalizer},
			{"op": "remove", "path": "/metadata/finalizers/" + strconv.Itoa(i)},
		})
		if merr != nil {
			return false, fmt.Errorf("capture: %w", merr)
		}
		err = r.w.Patch(ctx, child, client.RawPatch(types.JSONPatchType, ops))
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("capture: remove finalizer %s from %s/%s: %w", r.opts.Finalizer, child.GetNamespace(), child.GetName(), err)
	}
	r.mu.Lock()
	r.releasedFrom[client.ObjectKeyFromObject(child)] = releasedEntry{uid: child.GetUID(), rv: fromRV}
	r.mu.Unlock()
	return true, nil
}

// isStale reports whether a finalizer removal failed because the child
// changed since it was read: a conflict, or a failed test of the JSON patch
// (the apiserver answers 422). Either is redone on a fresh read.
func isStale(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) }

func (r *Releaser[O]) refetch(ctx context.Context, child client.Object) error {
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(child), child); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: nothing left to hold; Release sees no finalizer.
			child.SetFinalizers(nil)
			return nil
		}
		return fmt.Errorf("capture: re-read child %s/%s: %w", child.GetNamespace(), child.GetName(), err)
	}
	return nil
}

// released counts a release this process made and, when it rests on the
// namespace terminating rather than on the owner, says so in an Event: it
// is the one release that does not wait for the owner's record.
func (r *Releaser[O]) released(child client.Object, reason Reason) {
	r.mu.Lock()
	r.stats.Releases[reason]++
	r.mu.Unlock()
	releasesTotal.WithLabelValues(r.opts.Name, string(reason)).Inc()
	if reason == ReasonNamespaceTerminating {
		name := ""
		if ref := ownerRef(child, r.opts.OwnerKind); ref != nil {
			name = ref.Name
		}
		r.event(child, corev1.EventTypeNormal, EventReasonReleasedNamespaceTerminating, MessageReleasedNamespaceTerminating, r.opts.Finalizer, child.GetNamespace(), name)
	}
}

func (r *Releaser[O]) event(obj runtime.Object, eventtype, reason, note string, args ...interface{}) {
	if r.opts.Events == nil {
		return
	}
	r.opts.Events.Eventf(obj, nil, eventtype, reason, eventActionCapture, note, args...)
}

// backoff spreads conflicting writers apart. It delays a retry only; it
// decides nothing, so it uses the wall clock.
func backoff(ctx context.Context, attempt int) error {
	maxDelay := time.Duration(min(attempt, 10)) * 5 * time.Millisecond
	t := time.NewTimer(rand.N(maxDelay) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
