package watchdog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/errclass"
)

// Vocabulary of the Events and the condition.
const (
	// ConditionType is the type of the condition on the deleting object.
	ConditionType = "CleanupBlocked"
	// ReasonCleanupBlocked is the reason of the Warning Event and of the
	// condition while it is True.
	ReasonCleanupBlocked = "CleanupBlocked"
	// ReasonCleanupRecovered is the reason of the Normal Event and of the
	// condition once it is False again.
	ReasonCleanupRecovered = "CleanupRecovered"
	// actionCleanup is the action of both Events (events.k8s.io/v1 requires one).
	actionCleanup = "Cleanup"

	// messageBlocked is the Warning Event note and, per blocked finalizer,
	// the condition message: finalizer, age, attempts, last error class.
	messageBlocked = "finalizer %s has held the deletion for %s: %d cleanup attempts, last error class %s"
	// messageRecovered is the Normal Event note and the condition message
	// once no finalizer of the object is blocked: finalizer, age, attempts.
	messageRecovered = "finalizer %s is no longer blocked after %s and %d cleanup attempts"

	// DefaultThreshold is Options.Threshold when unset.
	DefaultThreshold = 5 * time.Minute
	// maxErrorLen bounds LastError: one pathological error must not hold
	// megabytes in memory for every retry.
	maxErrorLen = 1024
)

// Recorder emits Events. The manager's recorder
// (manager.Manager.GetEventRecorder, events.k8s.io/v1) satisfies it, as
// does any k8s.io/client-go/tools/events.EventRecorder.
type Recorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// RecorderFn adapts a function to Recorder.
type RecorderFn func(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})

// Eventf implements Recorder.
func (f RecorderFn) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	f(regarding, related, eventtype, reason, action, note, args...)
}

// Options configure a Watchdog. The zero value works: real clock, 5m
// threshold, no Events, no condition.
type Options struct {
	// Clock measures ages; default clock.RealClock{}. If it also
	// implements clock.WithTicker, Runnable ticks on it.
	Clock clock.PassiveClock
	// Threshold: a deletion older than this (since its deletionTimestamp)
	// whose cleanup still fails is blocked. Zero means DefaultThreshold;
	// negative is invalid (see Validate).
	Threshold time.Duration
	// Recorder, if set, gets a Warning Event on each transition to blocked
	// and a Normal Event on each recovery.
	Recorder Recorder
	// Classifier classifies attempt errors; default errclass.Default.
	Classifier *errclass.Classifier
	// Conditions, if set, writes the CleanupBlocked condition on each
	// transition (StatusConditions for CRDs with status.conditions).
	Conditions ConditionWriter
	// Scheme resolves the kind of typed objects (metrics label, Event and
	// condition target); default client-go's scheme, which knows only
	// built-in kinds. Pass the manager's scheme.
	Scheme *runtime.Scheme
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.Threshold < 0 {
		return fmt.Errorf("watchdog: Threshold %s is negative; use a positive duration, or zero for the default %s", o.Threshold, DefaultThreshold)
	}
	return nil
}

// Deletion is a snapshot of one finalizer's cleanup on one deleting object.
type Deletion struct {
	Kind, Namespace, Name string
	UID                   types.UID
	Finalizer             string
	// Since is the object's deletionTimestamp.
	Since time.Time
	// Age is the time since Since, on the watchdog's clock.
	Age      time.Duration
	Attempts int
	// AttemptsByClass counts failed attempts by class; successful attempts
	// count only in Attempts.
	AttemptsByClass map[errclass.Class]int
	// LastClass and LastError describe the latest failed attempt; they stay
	// after a later success, for the record.
	LastClass errclass.Class
	LastError string
	Blocked   bool
	// LastAttempt is when the latest attempt was recorded; LastFailed says
	// whether it failed.
	LastAttempt time.Time
	LastFailed  bool
}

// Watchdog tracks deletions in progress. It is safe for concurrent use.
type Watchdog struct {
	clock      clock.PassiveClock
	threshold  time.Duration
	recorder   Recorder
	classifier *errclass.Classifier
	conditions ConditionWriter
	scheme     *runtime.Scheme

	mu sync.Mutex
	// entries holds one entry per deleting object and finalizer; guarded by mu.
	entries map[key]*entry
	// writers serialises condition writes per object; guarded by mu (the
	// objLock's own mutex guards the write itself).
	writers map[types.UID]*objLock
}

type key struct {
	uid       types.UID
	finalizer string
}

// entry is guarded by Watchdog.mu.
type entry struct {
	ref         *metav1.PartialObjectMetadata // GVK, namespace, name, UID, generation
	kind        string
	finalizer   string
	since       time.Time
	attempts    int
	byClass     map[errclass.Class]int
	lastClass   errclass.Class
	lastError   string
	lastAttempt time.Time
	lastFailed  bool
	blocked     bool
}

type objLock struct {
	mu   sync.Mutex
	refs int // guarded by Watchdog.mu
}

// New returns a Watchdog. It panics when o.Validate fails: options are
// programmer input, fixed at start-up.
func New(o Options) *Watchdog {
	if err := o.Validate(); err != nil {
		panic(err)
	}
	w := &Watchdog{
		clock:      o.Clock,
		threshold:  o.Threshold,
		recorder:   o.Recorder,
		classifier: o.Classifier,
		conditions: o.Conditions,
		scheme:     o.Scheme,
		entries:    map[key]*entry{},
		writers:    map[types.UID]*objLock{},
	}
	if w.clock == nil {
		w.clock = clock.RealClock{}
	}
	if w.threshold == 0 {
		w.threshold = DefaultThreshold
	}
	if w.classifier == nil {
		w.classifier = errclass.Default
	}
	if w.scheme == nil {
		w.scheme = scheme.Scheme
	}
	return w
}

// Threshold is the effective threshold.
func (w *Watchdog) Threshold() time.Duration { return w.threshold }

// transition is a change of blocked state to announce, taken under the
// lock and announced outside it.
type transition struct {
	ref     *metav1.PartialObjectMetadata
	d       Deletion
	blocked bool
}

// Attempt records one cleanup attempt of finalizer on obj (which has a
// deletionTimestamp); err is the attempt's result. It returns whether the
// deletion is (now) blocked. Bad input (nil object, no deletionTimestamp,
// no UID, empty finalizer) is logged with the reason and not tracked.
func (w *Watchdog) Attempt(ctx context.Context, obj client.Object, finalizer string, err error) (blocked bool) {
	ref, kind, ok := w.identify(ctx, obj, finalizer, "Attempt")
	if !ok {
		return false
	}
	failed := err != nil
	class := w.classifier.Classify(ctx, err)
	if failed && class == "" {
		// A user rule that answered "" must not turn a failure into a
		// success or an empty label.
		class = errclass.Unknown
	}
	label := successLabel
	if failed {
		label = string(class)
	}
	cleanupAttempts.WithLabelValues(kind, finalizer, label).Inc()

	now := w.clock.Now()
	w.mu.Lock()
	k := key{ref.UID, finalizer}
	e := w.entries[k]
	if e == nil {
		e = &entry{kind: kind, finalizer: finalizer, since: ref.DeletionTimestamp.Time, byClass: map[errclass.Class]int{}}
		w.entries[k] = e
		pendingDeletions.WithLabelValues(kind, finalizer).Inc()
	}
	e.ref = ref
	e.attempts++
	e.lastAttempt = now
	e.lastFailed = failed
	if failed {
		e.byClass[class]++
		e.lastClass = class
		e.lastError = truncate(err.Error(), maxErrorLen)
	}
	next := afterAttempt(e.state(now), w.threshold)
	tr, changed := w.setBlocked(e, next, now)
	w.mu.Unlock()

	if changed {
		w.announce(ctx, tr)
	}
	return next
}

// Done records that finalizer was removed from obj: the deletion finished.
// It observes the age at completion, forgets the entry and, if the
// deletion was blocked, announces the recovery. Call it once per removal,
// also when no Attempt was recorded (a first attempt that succeeded).
func (w *Watchdog) Done(ctx context.Context, obj client.Object, finalizer string) {
	if isNil(obj) || finalizer == "" {
		log.FromContext(ctx).Error(errBadInput, "watchdog Done ignored: need an object and a finalizer", "finalizer", finalizer)
		return
	}
	now := w.clock.Now()
	w.mu.Lock()
	k := key{obj.GetUID(), finalizer}
	e := w.entries[k]
	var tr transition
	var changed bool
	var kind string
	var since time.Time
	if e != nil {
		kind, since = e.kind, e.since
		tr, changed = w.setBlocked(e, false, now)
		delete(w.entries, k)
		pendingDeletions.WithLabelValues(e.kind, finalizer).Dec()
	}
	w.mu.Unlock()

	if e == nil {
		dt := obj.GetDeletionTimestamp()
		if dt == nil {
			return
		}
		kind, since = w.kindOf(obj), dt.Time
	}
	ageAtCompletion.WithLabelValues(kind, finalizer).Observe(nonNegative(now.Sub(since)).Seconds())
	if changed {
		w.announce(ctx, tr)
	}
}

// Forget drops every entry of the object with uid without recording a
// completion: for objects that disappeared without Done. It returns how
// many entries it dropped.
func (w *Watchdog) Forget(uid types.UID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, e := range w.entries {
		if k.uid == uid {
			w.dropLocked(k, e)
			n++
		}
	}
	return n
}

func (w *Watchdog) dropLocked(k key, e *entry) {
	delete(w.entries, k)
	pendingDeletions.WithLabelValues(e.kind, e.finalizer).Dec()
	if e.blocked {
		blockedDeletions.WithLabelValues(e.kind, e.finalizer).Dec()
	}
}

// Sweep forgets entries whose object is gone (not found, or replaced under
// another UID) or no longer carries the finalizer, reading through r (an
// uncached reader such as the manager's APIReader). It returns how many
// entries it dropped; entries it could not check stay, and their errors
// are returned joined.
func (w *Watchdog) Sweep(ctx context.Context, r client.Reader) (int, error) {
	w.mu.Lock()
	refs := map[types.UID]*metav1.PartialObjectMetadata{}
	for k, e := range w.entries {
		refs[k.uid] = e.ref
	}
	w.mu.Unlock()

	dropped := 0
	var errs []error
	for uid, ref := range refs {
		if ref.GroupVersionKind().Empty() {
			errs = append(errs, fmt.Errorf("sweep %s/%s: %w", ref.Namespace, ref.Name, ErrNoKind))
			continue
		}
		got := &metav1.PartialObjectMetadata{}
		got.SetGroupVersionKind(ref.GroupVersionKind())
		err := r.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, got)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && got.UID != uid):
			dropped += w.Forget(uid)
		case err != nil:
			errs = append(errs, fmt.Errorf("sweep %s %s/%s: %w", ref.Kind, ref.Namespace, ref.Name, err))
		default:
			w.mu.Lock()
			for k, e := range w.entries {
				if k.uid == uid && !slices.Contains(got.Finalizers, k.finalizer) {
					w.dropLocked(k, e)
					dropped++
				}
			}
			w.mu.Unlock()
		}
	}
	return dropped, errors.Join(errs...)
}

// Check re-evaluates every entry against the clock and promotes to blocked
// those past the threshold that nobody attempted since (see doc.go for who
// calls it). It returns how many it promoted.
func (w *Watchdog) Check(ctx context.Context) int {
	now := w.clock.Now()
	var trs []transition
	w.mu.Lock()
	for _, e := range w.entries {
		if tr, changed := w.setBlocked(e, onCheck(e.state(now), w.threshold), now); changed {
			trs = append(trs, tr)
		}
	}
	w.mu.Unlock()
	for _, tr := range trs {
		w.announce(ctx, tr)
	}
	return len(trs)
}

// Pending returns a snapshot of the deletions in progress, oldest first.
func (w *Watchdog) Pending() []Deletion {
	now := w.clock.Now()
	w.mu.Lock()
	out := make([]Deletion, 0, len(w.entries))
	for _, e := range w.entries {
		out = append(out, e.deletion(now))
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b Deletion) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.Finalizer, b.Namespace+"/"+b.Name+"/"+b.Finalizer)
	})
	return out
}

// setBlocked moves e to blocked and keeps the gauge in step. Callers hold mu.
func (w *Watchdog) setBlocked(e *entry, blocked bool, now time.Time) (transition, bool) {
	if e.blocked == blocked {
		return transition{}, false
	}
	e.blocked = blocked
	g := blockedDeletions.WithLabelValues(e.kind, e.finalizer)
	if blocked {
		g.Inc()
	} else {
		g.Dec()
	}
	return transition{ref: e.ref, d: e.deletion(now), blocked: blocked}, true
}

func (e *entry) state(now time.Time) state {
	return state{
		blocked:    e.blocked,
		age:        nonNegative(now.Sub(e.since)),
		sinceLast:  nonNegative(now.Sub(e.lastAttempt)),
		lastFailed: e.lastFailed,
	}
}

func (e *entry) deletion(now time.Time) Deletion {
	return Deletion{
		Kind:            e.kind,
		Namespace:       e.ref.Namespace,
		Name:            e.ref.Name,
		UID:             e.ref.UID,
		Finalizer:       e.finalizer,
		Since:           e.since,
		Age:             nonNegative(now.Sub(e.since)),
		Attempts:        e.attempts,
		AttemptsByClass: maps.Clone(e.byClass),
		LastClass:       e.lastClass,
		LastError:       e.lastError,
		Blocked:         e.blocked,
		LastAttempt:     e.lastAttempt,
		LastFailed:      e.lastFailed,
	}
}

// announce emits the Event and writes the condition of one transition.
// Neither can fail the caller: a lost Event is the recorder's business and
// a failed condition write is logged and counted.
func (w *Watchdog) announce(ctx context.Context, tr transition) {
	d := tr.d
	if w.recorder != nil {
		if tr.blocked {
			w.recorder.Eventf(tr.ref, nil, corev1.EventTypeWarning, ReasonCleanupBlocked, actionCleanup,
				messageBlocked, d.Finalizer, roundAge(d.Age), d.Attempts, classText(d.LastClass))
		} else {
			w.recorder.Eventf(tr.ref, nil, corev1.EventTypeNormal, ReasonCleanupRecovered, actionCleanup,
				messageRecovered, d.Finalizer, roundAge(d.Age), d.Attempts)
		}
	}
	if w.conditions != nil {
		w.syncCondition(ctx, tr)
	}
}

// syncCondition writes the object's condition from the state current when
// the write starts, under a per-object lock: two transitions racing (a
// Check promoting while an Attempt recovers) then end with the condition
// of the later state, whichever write goes first.
func (w *Watchdog) syncCondition(ctx context.Context, tr transition) {
	uid := tr.ref.UID
	w.mu.Lock()
	l := w.writers[uid]
	if l == nil {
		l = &objLock{}
		w.writers[uid] = l
	}
	l.refs++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(w.writers, uid)
		}
		w.mu.Unlock()
	}()

	l.mu.Lock()
	defer l.mu.Unlock()
	cond := w.conditionFor(uid, tr)
	err := w.conditions.WriteCondition(ctx, tr.ref, cond)
	switch {
	case err == nil, errors.Is(err, ErrObjectGone):
	default:
		conditionWriteFailures.WithLabelValues(tr.d.Kind).Inc()
		log.FromContext(ctx).Error(err, "watchdog could not write the CleanupBlocked condition; the deletion goes on",
			"kind", tr.d.Kind, "namespace", tr.d.Namespace, "name", tr.d.Name, "status", cond.Status)
	}
}

// conditionFor is True while any finalizer of the object is blocked, its
// message naming each blocked finalizer; otherwise False, naming the
// finalizer that recovered.
func (w *Watchdog) conditionFor(uid types.UID, tr transition) metav1.Condition {
	now := w.clock.Now()
	var blocked []Deletion
	w.mu.Lock()
	for k, e := range w.entries {
		if k.uid == uid && e.blocked {
			blocked = append(blocked, e.deletion(now))
		}
	}
	w.mu.Unlock()
	cond := metav1.Condition{
		Type:               ConditionType,
		ObservedGeneration: tr.ref.Generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	if len(blocked) == 0 {
		d := tr.d
		cond.Status = metav1.ConditionFalse
		cond.Reason = ReasonCleanupRecovered
		cond.Message = fmt.Sprintf(messageRecovered, d.Finalizer, roundAge(d.Age), d.Attempts)
		return cond
	}
	slices.SortFunc(blocked, func(a, b Deletion) int { return strings.Compare(a.Finalizer, b.Finalizer) })
	msgs := make([]string, len(blocked))
	for i, d := range blocked {
		msgs[i] = fmt.Sprintf(messageBlocked, d.Finalizer, roundAge(d.Age), d.Attempts, classText(d.LastClass))
	}
	cond.Status = metav1.ConditionTrue
	cond.Reason = ReasonCleanupBlocked
	cond.Message = strings.Join(msgs, "; ")
	return cond
}

var errBadInput = errors.New("watchdog: bad input")

// identify validates obj and returns the reference the watchdog keeps (no
// spec, no status: entries stay small and hold nothing sensitive).
func (w *Watchdog) identify(ctx context.Context, obj client.Object, finalizer, op string) (*metav1.PartialObjectMetadata, string, bool) {
	lg := log.FromContext(ctx)
	if isNil(obj) {
		lg.Error(errBadInput, "watchdog "+op+" ignored: nil object", "finalizer", finalizer)
		return nil, "", false
	}
	kv := []any{"namespace", obj.GetNamespace(), "name", obj.GetName(), "finalizer", finalizer}
	switch {
	case finalizer == "":
		lg.Error(errBadInput, "watchdog "+op+" ignored: empty finalizer; pass the finalizer whose cleanup was attempted", kv...)
		return nil, "", false
	case obj.GetDeletionTimestamp() == nil:
		lg.Error(errBadInput, "watchdog "+op+" ignored: object has no deletionTimestamp; record attempts only for objects being deleted", kv...)
		return nil, "", false
	case obj.GetUID() == "":
		lg.Error(errBadInput, "watchdog "+op+" ignored: object has no UID; pass the object as read from the API server", kv...)
		return nil, "", false
	}
	ref := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace:         obj.GetNamespace(),
		Name:              obj.GetName(),
		UID:               obj.GetUID(),
		Generation:        obj.GetGeneration(),
		DeletionTimestamp: obj.GetDeletionTimestamp().DeepCopy(),
	}}
	gvk, err := apiutil.GVKForObject(obj, w.scheme)
	if err != nil {
		lg.Error(fmt.Errorf("%w: %w", ErrNoKind, err), "watchdog tracks the deletion without Events or condition", kv...)
		return ref, typeName(obj), true
	}
	ref.SetGroupVersionKind(gvk)
	return ref, gvk.Kind, true
}

func (w *Watchdog) kindOf(obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, w.scheme); err == nil {
		return gvk.Kind
	}
	return typeName(obj)
}

func classText(c errclass.Class) string {
	if c == "" {
		return "none"
	}
	return string(c)
}

func roundAge(d time.Duration) time.Duration { return d.Round(time.Second) }

func nonNegative(d time.Duration) time.Duration { return max(d, 0) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isNil(obj client.Object) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func typeName(obj client.Object) string {
	t := reflect.TypeOf(obj)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
