package capture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// DefaultMaxPersistAttempts bounds the conflict retries inside one Release
// call; past it Release returns an error and the caller (the reconciler)
// tries again later with the finalizer still held, so nothing is dropped.
const DefaultMaxPersistAttempts = 30

// Event reasons and messages. Messages are format strings.
const (
	EventReasonPending       = "CapturePending"
	EventReasonPersisted     = "ResultPersisted"
	EventReasonPersistFailed = "ResultPersistFailed"

	EventActionCapture = "Capture"

	MessagePending   = "capture finalizer %s held for %s: owner %s/%s has not recorded the result of this child, which is %s; it is released only when the result is recorded or persisted, or the owner is gone, deleting, finished or cancelled"
	MessagePersisted = "result of child %s (UID %s) persisted to owner %s/%s by the release path"
	// MessagePersistFailed carries the error's class, not its text: the
	// Event is read by the namespace's users; the error goes to the log.
	MessagePersistFailed = "persisting the result of child %s (UID %s) to owner %s/%s failed (%s error); the finalizer stays and the release is retried. The cause is in the controller's log"
)

// ErrNotRecordedAfterPersist means the ResultWriter ran but the ResultReader
// still reports the child's result as missing: the two adapters disagree
// about where the result lives. The finalizer stays.
var ErrNotRecordedAfterPersist = errors.New("capture: ResultWriter.Persist did not make ResultReader.Recorded true for the child; fix the adapters so they agree on where results live")

// ResultReader reports whether the owner has recorded the result of the child
// with the given UID. It must look only at owner (no I/O).
type ResultReader[O client.Object] interface {
	Recorded(owner O, child types.UID) bool
}

// ResultReaderFn adapts a function to ResultReader.
type ResultReaderFn[O client.Object] func(owner O, child types.UID) bool

// Recorded calls f.
func (f ResultReaderFn[O]) Recorded(owner O, child types.UID) bool { return f(owner, child) }

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

// Options configure a Releaser. Name, OwnerKind, NewOwner, Results and Writer
// are required.
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
	// Results reads whether the owner recorded a child's result.
	Results ResultReader[O]
	// Writer writes a child's result into the owner.
	Writer ResultWriter[O]
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
	byUs map[types.NamespacedName]types.UID
	// releasedFrom: the resourceVersion each child had when this process
	// removed its finalizer, to recognise a stale cached copy and not patch
	// it again. Dropped when the child is gone or seen at another version.
	// Guarded by mu.
	releasedFrom map[types.NamespacedName]releasedEntry
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
	case opts.Results == nil:
		return nil, errors.New("capture: Options.Results is required (how to tell the owner recorded a child's result)")
	case opts.Writer == nil:
		return nil, errors.New("capture: Options.Writer is required (how to put a child's result into the owner)")
	case live == nil || w == nil:
		return nil, errors.New("capture: a live reader and a writer are required")
	case opts.PendingThreshold < 0:
		return nil, fmt.Errorf("capture: Options.PendingThreshold is %s; it must be positive (or zero for the default)", opts.PendingThreshold)
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
	return &Releaser[O]{
		opts:         opts,
		live:         live,
		cache:        live,
		w:            w,
		pending:      map[types.NamespacedName]pendingEntry{},
		byUs:         map[types.NamespacedName]types.UID{},
		releasedFrom: map[types.NamespacedName]releasedEntry{},
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
// and applies Rule. The owner is returned when it was found.
func (r *Releaser[O]) Decide(ctx context.Context, child client.Object) (Decision, O, error) {
	f, owner, err := r.facts(ctx, child)
	if err != nil {
		return Decision{}, owner, err
	}
	return Rule(f), owner, nil
}

func (r *Releaser[O]) facts(ctx context.Context, child client.Object) (Facts, O, error) {
	var zero O
	f := Facts{
		ChildTerminal: r.opts.ChildState.Terminal(child),
		ChildDeleting: child.GetDeletionTimestamp() != nil,
	}
	ref := ownerRef(child, r.opts.OwnerKind)
	if ref == nil {
		return f, zero, nil
	}
	f.HasOwnerRef = true
	owner := r.opts.NewOwner()
	err := r.live.Get(ctx, client.ObjectKey{Namespace: child.GetNamespace(), Name: ref.Name}, owner)
	if apierrors.IsNotFound(err) {
		return f, zero, nil
	}
	if err != nil {
		return f, zero, fmt.Errorf("capture: read owner %s %s/%s of child %s: %w", r.opts.OwnerKind.Kind, child.GetNamespace(), ref.Name, child.GetName(), err)
	}
	f.OwnerFound = true
	f.OwnerUIDMatches = owner.GetUID() == ref.UID
	f.OwnerDeleting = owner.GetDeletionTimestamp() != nil
	f.OwnerFinished = r.opts.Completion != nil && r.opts.Completion.Finished(owner)
	f.Recorded = r.opts.Results.Recorded(owner, child.GetUID())
	return f, owner, nil
}

// Release is the one release path: it decides with Rule; on Release it
// removes the finalizer; on Persist it writes the child's result to the
// owner's status (conflicts retried on a fresh owner) and only then removes
// the finalizer; on Hold it changes nothing. A child without the finalizer
// gets the zero Decision. child is updated in place.
func (r *Releaser[O]) Release(ctx context.Context, child client.Object) (Decision, error) {
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
	for attempt := 1; ; attempt++ {
		if !controllerutil.ContainsFinalizer(child, fin) {
			return Decision{}, nil
		}
		d, owner, err := r.Decide(ctx, child)
		if err != nil {
			return d, err
		}
		r.mu.Lock()
		if r.byUs[client.ObjectKeyFromObject(child)] == child.GetUID() && d.Action == Release && d.Reason == ReasonRecorded {
			// This process's write is what made it recorded.
			d.Reason = ReasonPersisted
		}
		r.mu.Unlock()
		switch d.Action {
		case Hold:
			return d, nil
		case Release:
			removed, err := r.removeFinalizer(ctx, child)
			if apierrors.IsConflict(err) && attempt < r.opts.MaxPersistAttempts {
				if err := r.refetch(ctx, child); err != nil {
					return d, err
				}
				continue
			}
			if err != nil {
				return d, err
			}
			if removed {
				r.countRelease(d.Reason)
			}
			r.mu.Lock()
			delete(r.byUs, client.ObjectKeyFromObject(child))
			r.mu.Unlock()
			return d, nil
		case Persist:
			persisted, err := r.persist(ctx, owner, child)
			if apierrors.IsConflict(err) {
				r.mu.Lock()
				r.stats.Conflicts++
				r.mu.Unlock()
				conflictsTotal.WithLabelValues(r.opts.Name).Inc()
				if attempt >= r.opts.MaxPersistAttempts {
					return d, fmt.Errorf("capture: persisting result of child %s/%s: still conflicting after %d attempts, will retry: %w", child.GetNamespace(), child.GetName(), attempt, err)
				}
				if err := backoff(ctx, attempt); err != nil {
					return d, err
				}
				continue
			}
			if err != nil {
				class := errclass.Of(ctx, err)
				log.FromContext(ctx).Info("capture: persisting a child's result failed; the finalizer stays", "child", client.ObjectKeyFromObject(child), "class", class, "error", err.Error())
				r.event(child, corev1.EventTypeWarning, EventReasonPersistFailed, MessagePersistFailed, child.GetName(), child.GetUID(), owner.GetNamespace(), owner.GetName(), class)
				return d, err
			}
			r.mu.Lock()
			for _, c := range persisted {
				r.byUs[client.ObjectKeyFromObject(c)] = c.GetUID()
			}
			r.stats.Persisted += len(persisted)
			r.mu.Unlock()
			persistedTotal.WithLabelValues(r.opts.Name).Add(float64(len(persisted)))
			for _, c := range persisted {
				r.event(c, corev1.EventTypeNormal, EventReasonPersisted, MessagePersisted, c.GetName(), c.GetUID(), owner.GetNamespace(), owner.GetName())
			}
			// Loop: the next pass sees the result recorded, with the same
			// rule as everyone else, and releases.
		}
	}
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
	if !r.opts.Results.Recorded(owner, child.GetUID()) {
		return nil, ErrNotRecordedAfterPersist
	}
	persisted := append([]client.Object{child}, r.persistSiblings(ctx, owner, child)...)
	if err := r.w.Status().Update(ctx, owner); err != nil {
		return nil, fmt.Errorf("capture: update status of owner %s/%s with the result of child %s: %w", owner.GetNamespace(), owner.GetName(), child.GetName(), err)
	}
	return persisted, nil
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
			r.opts.Results.Recorded(owner, sib.GetUID()) {
			return nil
		}
		if ref := ownerRef(sib, r.opts.OwnerKind); ref == nil || ref.UID != owner.GetUID() {
			return nil
		}
		trial := owner.DeepCopyObject().(O)
		if err := r.opts.Writer.Persist(trial, sib); err != nil || !r.opts.Results.Recorded(trial, sib.GetUID()) {
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
func (r *Releaser[O]) removeFinalizer(ctx context.Context, child client.Object) (bool, error) {
	orig := child.DeepCopyObject().(client.Object)
	fromRV := child.GetResourceVersion()
	controllerutil.RemoveFinalizer(child, r.opts.Finalizer)
	// Optimistic lock: the finalizer list is replaced wholesale by a merge
	// patch, so it must not overwrite a finalizer someone added meanwhile.
	err := r.w.Patch(ctx, child, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
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

func (r *Releaser[O]) countRelease(reason Reason) {
	r.mu.Lock()
	r.stats.Releases[reason]++
	r.mu.Unlock()
	releasesTotal.WithLabelValues(r.opts.Name, string(reason)).Inc()
}

func (r *Releaser[O]) event(obj runtime.Object, eventtype, reason, note string, args ...interface{}) {
	if r.opts.Events == nil {
		return
	}
	r.opts.Events.Eventf(obj, nil, eventtype, reason, EventActionCapture, note, args...)
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
