package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/watchdog"
)

// DefaultRetryInterval is Options.RetryInterval when unset.
const DefaultRetryInterval = 10 * time.Second

// Recorder emits Events; the manager's recorder
// (manager.Manager.GetEventRecorder in controller-runtime v0.25) and any
// k8s.io/client-go/tools/events.EventRecorder satisfy it.
type Recorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// RecorderFn adapts a function to Recorder.
type RecorderFn func(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})

// Eventf calls f.
func (f RecorderFn) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	f(regarding, related, eventtype, reason, action, note, args...)
}

// Client is what the reconciler needs from the API server: read the object,
// patch its finalizers and its status.
type Client interface {
	client.Reader
	client.Writer
	client.StatusClient
}

// Options configure a Reconciler. Ledger, Hold and Watchdog are the
// guarantees; leaving them nil switches them off (the "naive build" of the
// comparisons), which is never what production wants.
type Options struct {
	// Finalizer is the cleanup finalizer. Required.
	Finalizer string
	// Scheme resolves the managed kind for cleanup records and Events.
	// Required.
	Scheme *runtime.Scheme
	// Ledger writes the cleanup record before every create and removes it
	// after a confirmed delete. nil: no records (naive).
	Ledger *ledger.Ledger
	// Hold keeps the parent while this object still needs it. nil: no hold;
	// a deleting object whose parent is gone then lets go without a delete
	// (the leak the hold exists to prevent).
	Hold *hold.Hold
	// Watchdog sees every delete attempt. nil: not watched.
	Watchdog *watchdog.Watchdog
	// Recorder gets Events on condition transitions. nil: no Events.
	Recorder Recorder
	// Classifier names error classes in messages; nil is errclass.Default.
	Classifier *errclass.Classifier
	// APIReader reads the object live (uncached) right before a create, to
	// confirm it still exists, carries the finalizer and is not being
	// deleted: a reconcile working from a stale cache must not create what
	// a finished deletion will never see. nil uses the Client, which is
	// right only when the Client is uncached; pass the manager's
	// GetAPIReader().
	APIReader client.Reader
	// Clock stamps conditions; nil is the real clock.
	Clock clock.PassiveClock
	// DefaultPolicy applies when the object has no Spec.DeletionPolicy or
	// it is empty. Zero is PolicyDelete.
	DefaultPolicy DeletionPolicy
	// RetryInterval is how soon a reconcile that needs the user, or waits
	// for the parent, looks again; zero is DefaultRetryInterval.
	RetryInterval time.Duration
}

// Reconciler reconciles one managed kind O whose external resources are
// reached through clients C pooled by K.
type Reconciler[O client.Object, K comparable, C any] struct {
	c       Client
	newObj  func() O
	adapter Adapter[O, K, C]
	pool    Pool[K, C]
	o       Options
	// superseded holds, per object UID, the resourceVersions this
	// reconciler's own last writes replaced (see skipStale).
	superseded sync.Map
}

// ErrConfig wraps every configuration error of New.
var ErrConfig = errors.New("lifecycle: invalid configuration")

// New returns a reconciler for objects made by newObj.
func New[O client.Object, K comparable, C any](c Client, newObj func() O, a Adapter[O, K, C], p Pool[K, C], o Options) (*Reconciler[O, K, C], error) {
	switch {
	case c == nil || newObj == nil || a == nil || p == nil:
		return nil, fmt.Errorf("%w: client, newObj, adapter and pool are required", ErrConfig)
	case o.Finalizer == "":
		return nil, fmt.Errorf("%w: Options.Finalizer is required (for example example.com/cleanup)", ErrConfig)
	case o.Scheme == nil:
		return nil, fmt.Errorf("%w: Options.Scheme is required", ErrConfig)
	case o.RetryInterval < 0:
		return nil, fmt.Errorf("%w: Options.RetryInterval %s is negative", ErrConfig, o.RetryInterval)
	}
	obj := newObj()
	if _, err := fieldsOf(obj); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if _, err := apiutil.GVKForObject(obj, o.Scheme); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch o.DefaultPolicy {
	case "":
		o.DefaultPolicy = PolicyDelete
	case PolicyDelete, PolicyRetain:
	default:
		return nil, fmt.Errorf("%w: Options.DefaultPolicy %q: use %q or %q", ErrConfig, o.DefaultPolicy, PolicyDelete, PolicyRetain)
	}
	if o.Classifier == nil {
		o.Classifier = errclass.Default
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.APIReader == nil {
		o.APIReader = c
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	return &Reconciler[O, K, C]{c: c, newObj: newObj, adapter: a, pool: p, o: o}, nil
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler[O, K, C]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := r.newObj()
	if err := r.c.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("lifecycle: get %s: %w", req.NamespacedName, err)
	}
	if r.skipStale(obj) {
		return reconcile.Result{}, nil
	}
	st := newStatus(r, obj)
	if !obj.GetDeletionTimestamp().IsZero() {
		return r.delete(ctx, obj, st)
	}
	// Cluster API's rule: the finalizer goes on before anything external
	// exists, so no create can outrun the cleanup that undoes it.
	if !controllerutil.ContainsFinalizer(obj, r.o.Finalizer) {
		if err := r.setFinalizer(ctx, obj, true); err != nil {
			return reconcile.Result{}, err
		}
		st = newStatus(r, obj)
	}
	res, err := r.apply(ctx, obj, st)
	if perr := st.flush(ctx); perr != nil && err == nil {
		err = perr
	}
	return res, err
}

func (r *Reconciler[O, K, C]) apply(ctx context.Context, obj O, st *status[O, K, C]) (reconcile.Result, error) {
	if st.get(ConditionReady) == nil {
		st.ready(false, ReasonCreating, MessageCreating)
	}
	conn, err := r.adapter.Connect(ctx, obj)
	if err != nil {
		return r.failed(ctx, st, err, ReasonReconcileError, MessageError), nil
	}
	if conn.Parent == nil {
		st.synced(false, ReasonParentNotFound, MessageParentMissing)
		st.ready(false, ReasonCreating, MessageCreating)
		return reconcile.Result{RequeueAfter: r.o.RetryInterval}, nil
	}
	if r.o.Hold != nil && !r.o.Hold.Held(conn.Parent) {
		// The hold usually comes within moments of a parent's first
		// dependent; a condition (and its write) for that is noise. Only a
		// wait longer than RetryInterval is reported.
		if st.get(ConditionSynced) == nil && r.o.Clock.Since(obj.GetCreationTimestamp().Time) < r.o.RetryInterval {
			st.discard()
		} else {
			st.synced(false, ReasonWaitingForHold, MessageWaitingHold, kindOf(conn.Parent, r.o.Scheme), conn.Parent.GetName())
		}
		return reconcile.Result{RequeueAfter: min(r.o.RetryInterval, time.Second)}, nil
	}
	tag := ledger.Tag(r.owner(obj))
	var created, adopted string
	err = r.pool.Do(ctx, conn.Key, func(ctx context.Context, c C) error {
		obs, err := r.adapter.Observe(ctx, c, obj, tag)
		if err != nil {
			return err
		}
		if len(obs.IDs) == 0 {
			if err := r.confirmLive(ctx, obj); err != nil {
				return err
			}
			created, err = r.create(ctx, c, obj, tag)
			return err
		}
		ready := st.get(ConditionReady)
		if !isTrue(ready) {
			adopted = obs.IDs[0]
		}
		// Ready is set only after the IDs were recorded, so a Ready object
		// of this generation needs no record read; anything else (an
		// adoption, a lost ID write, a build without records before) does.
		if !isTrue(ready) || ready.ObservedGeneration != obj.GetGeneration() {
			if err := r.recordIDs(ctx, c, obj, tag, obs.IDs); err != nil {
				return err
			}
		}
		if !obs.UpToDate {
			return r.adapter.Update(ctx, c, obj, obs.IDs[0], tag)
		}
		return nil
	})
	if errors.Is(err, errStale) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err != nil {
		return r.failed(ctx, st, err, ReasonReconcileError, MessageError), nil
	}
	switch {
	case created != "":
		Creates.WithLabelValues(r.owner(obj).Kind, OutcomeCreated).Inc()
		r.event(obj, corev1.EventTypeNormal, ReasonCreated, ActionCreate, MessageCreated, created)
	case adopted != "":
		Creates.WithLabelValues(r.owner(obj).Kind, OutcomeAdopted).Inc()
		r.event(obj, corev1.EventTypeNormal, ReasonAdopted, ActionCreate, MessageAdopted, adopted)
	}
	st.synced(true, ReasonReconcileSuccess, MessageSynced)
	st.ready(true, ReasonAvailable, MessageAvailable)
	return reconcile.Result{}, nil
}

// create writes the record first and creates only once it is durable; the
// ledger looks for the tag again after the write, so an earlier attempt
// whose answer was lost is adopted, never duplicated. An adapter that
// declares the ID has it written with the record, saving the write after
// the create.
func (r *Reconciler[O, K, C]) create(ctx context.Context, c C, obj O, tag string) (string, error) {
	var id string
	createFn := func(ctx context.Context, tag string) ([]string, error) {
		var err error
		if id, err = r.adapter.Create(ctx, c, obj, tag); err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	if r.o.Ledger == nil {
		_, err := createFn(ctx, tag)
		return id, err
	}
	if d, ok := r.adapter.(Declarer[O]); ok {
		if declared, ok := d.DeclareID(obj, tag); ok && declared != "" {
			_, err := r.o.Ledger.CreateDeclared(ctx, r.owner(obj), r.target(c, obj), []string{declared}, createFn)
			return id, err
		}
	}
	_, err := r.o.Ledger.Create(ctx, r.owner(obj), r.target(c, obj), createFn)
	return id, err
}

// errStale stops a create planned from a stale read; the next reconcile
// sees the object as it is.
var errStale = errors.New("lifecycle: the object changed (deleted, deleting or without the finalizer) since it was read; not creating")

// confirmLive re-reads obj from the API server: a create is planned only
// for an object that exists, carries the cleanup finalizer and is not being
// deleted, so the deletion that follows is guaranteed to see what it made.
func (r *Reconciler[O, K, C]) confirmLive(ctx context.Context, obj O) error {
	live := r.newObj()
	if err := r.o.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return errStale
		}
		return fmt.Errorf("lifecycle: confirm %s before creating: %w", client.ObjectKeyFromObject(obj), err)
	}
	if live.GetUID() != obj.GetUID() || !live.GetDeletionTimestamp().IsZero() || !controllerutil.ContainsFinalizer(live, r.o.Finalizer) {
		return errStale
	}
	return nil
}

// recordIDs makes sure the record holds ids: it writes only when one is
// new, and writes a whole record (adopting, never creating) when there is
// none, for a resource created by a build without records.
func (r *Reconciler[O, K, C]) recordIDs(ctx context.Context, c C, obj O, tag string, ids []string) error {
	if r.o.Ledger == nil {
		return nil
	}
	t := r.target(c, obj)
	_, err := r.o.Ledger.Observe(ctx, obj.GetUID(), t, ids, time.Time{})
	if !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	_, err = r.o.Ledger.Create(ctx, r.owner(obj), t, func(context.Context, string) ([]string, error) {
		return nil, fmt.Errorf("lifecycle: resource tagged %s vanished while being recorded; will retry", tag)
	})
	return err
}

func (r *Reconciler[O, K, C]) delete(ctx context.Context, obj O, st *status[O, K, C]) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, r.o.Finalizer) {
		return reconcile.Result{}, nil
	}
	if policyOf(st.f, r.o.DefaultPolicy) == PolicyRetain {
		if err := r.forget(ctx, obj); err != nil {
			return r.failed(ctx, st, err, ReasonDeleteFailed, MessageDeleteFailed), st.flush(ctx)
		}
		return r.finish(ctx, obj, ReasonRetained, MessageRetained)
	}
	st.ready(false, ReasonDeleting, MessageDeleting)
	conn, err := r.adapter.Connect(ctx, obj)
	// A Connect error with a parent in hand (its Secret is gone, say) still
	// lets the hold decide; one without (the parent could not be read) must
	// not be taken for a parent that is gone.
	if r.o.Hold != nil && (err == nil || conn.Parent != nil) && r.o.Hold.ShouldReleaseWithoutDelete(conn.Parent) {
		// The hold is over: what the record covers is the sweeper's now.
		if err := r.o.Hold.ReleaseWithoutDelete(ctx, r.c, obj, parentName(obj, conn)); err != nil {
			return reconcile.Result{}, err
		}
		Finished.WithLabelValues(r.owner(obj).Kind, OutcomeReleased).Inc()
		r.done(ctx, obj)
		return reconcile.Result{}, nil
	}
	if err != nil {
		r.attempt(ctx, obj, err)
		return r.failed(ctx, st, err, ReasonDeleteFailed, MessageDeleteFailed), st.flush(ctx)
	}
	passCtx := ctx
	switch {
	case r.o.Hold != nil:
		var cancel context.CancelFunc
		passCtx, cancel = r.o.Hold.PassContext(ctx, conn.Parent)
		defer cancel()
	case conn.Parent == nil:
		// Without a hold nothing can reach the service any more: the naive
		// build lets go (and leaks, unless a record lets the sweeper act).
		return r.finish(ctx, obj, ReasonDeleted, MessageDeleted)
	}
	tag := ledger.Tag(r.owner(obj))
	err = r.pool.Do(passCtx, conn.Key, func(ctx context.Context, c C) error { return r.cleanup(ctx, c, obj, tag) })
	r.attempt(ctx, obj, err)
	if err != nil {
		res := r.failed(ctx, st, err, ReasonDeleteFailed, MessageDeleteFailed)
		if r.o.Hold != nil {
			res = reconcile.Result{RequeueAfter: r.o.Hold.RetryAfter(conn.Parent, max(res.RequeueAfter, time.Second))}
		}
		return res, st.flush(ctx)
	}
	return r.finish(ctx, obj, ReasonDeleted, MessageDeleted)
}

// cleanup deletes and confirms: through the record when there is one
// (recorded IDs and tagged resources, identity proven before and after,
// record removed last); otherwise by tag, confirmed by looking again.
func (r *Reconciler[O, K, C]) cleanup(ctx context.Context, c C, obj O, tag string) error {
	if r.o.Ledger != nil {
		res, err := r.o.Ledger.Cleanup(ctx, obj.GetUID(), r.target(c, obj))
		if err != nil || res.Removed {
			return err
		}
	}
	ids, err := r.findByTag(ctx, c, obj, tag)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := r.adapter.Delete(ctx, c, obj, id, tag); err != nil && r.o.Classifier.Classify(ctx, err) != errclass.NotFound {
			return err
		}
	}
	if len(ids) == 0 {
		return nil
	}
	left, err := r.findByTag(ctx, c, obj, tag)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("lifecycle: %q still carry tag %s after delete", left, tag)
	}
	return nil
}

// forget removes obj's record without deleting anything (Retain).
func (r *Reconciler[O, K, C]) forget(ctx context.Context, obj O) error {
	if r.o.Ledger == nil {
		return nil
	}
	return r.o.Ledger.Forget(ctx, obj.GetUID())
}

// skipStale reports that obj was read at a resourceVersion one of this
// reconciler's own writes has already replaced: a cache that has not yet
// seen the write. Acting on it would redo the write, and would take the
// resource this reconciler just created for an adoption. The write's own
// watch event brings the object back, so skipping loses nothing. Any other
// version clears what was remembered: a reconcile never runs twice at
// once for one object, so the entry is this object's alone.
func (r *Reconciler[O, K, C]) skipStale(obj O) bool {
	v, ok := r.superseded.Load(obj.GetUID())
	if !ok {
		return false
	}
	if slices.Contains(v.([]string), obj.GetResourceVersion()) {
		return true
	}
	r.superseded.Delete(obj.GetUID())
	return false
}

// supersede remembers that a write replaced obj's version rv.
func (r *Reconciler[O, K, C]) supersede(obj client.Object, rv string) {
	var rvs []string
	if v, ok := r.superseded.Load(obj.GetUID()); ok {
		rvs = v.([]string)
	}
	r.superseded.Store(obj.GetUID(), append(slices.Clone(rvs), rv))
}

// finish removes the finalizer: the last write, after everything it
// protects is done.
func (r *Reconciler[O, K, C]) finish(ctx context.Context, obj O, reason, msg string) (reconcile.Result, error) {
	if err := r.setFinalizer(ctx, obj, false); err != nil {
		return reconcile.Result{}, err
	}
	r.superseded.Delete(obj.GetUID()) // the object goes now
	r.done(ctx, obj)
	outcome := OutcomeDeleted
	if reason == ReasonRetained {
		outcome = OutcomeRetained
	}
	Finished.WithLabelValues(r.owner(obj).Kind, outcome).Inc()
	r.event(obj, corev1.EventTypeNormal, reason, ActionDelete, msg)
	return reconcile.Result{}, nil
}

func (r *Reconciler[O, K, C]) attempt(ctx context.Context, obj O, err error) {
	if r.o.Watchdog != nil {
		r.o.Watchdog.Attempt(ctx, obj, r.o.Finalizer, err)
	}
}

func (r *Reconciler[O, K, C]) done(ctx context.Context, obj O) {
	if r.o.Watchdog != nil {
		r.o.Watchdog.Done(ctx, obj, r.o.Finalizer)
	}
}

// failed records err in the Synced condition. An error that needs the user
// is retried at RetryInterval; any other is retried sooner, with backoff
// left to the workqueue.
func (r *Reconciler[O, K, C]) failed(ctx context.Context, st *status[O, K, C], err error, reason, msg string) reconcile.Result {
	if na, ok := asNeedsAction(err); ok {
		st.synced(false, na.Reason, MessageNeedsAction, err)
		return reconcile.Result{RequeueAfter: r.o.RetryInterval}
	}
	if errors.Is(err, ledger.ErrRecordWrite) {
		st.synced(false, ReasonRecordFailed, MessageRecordFailed, err)
	} else {
		st.synced(false, reason, msg, r.class(ctx, err), err)
	}
	return reconcile.Result{RequeueAfter: min(r.o.RetryInterval, 2*time.Second)}
}

func (r *Reconciler[O, K, C]) class(ctx context.Context, err error) errclass.Class {
	return r.o.Classifier.Classify(ctx, err)
}

func (r *Reconciler[O, K, C]) setFinalizer(ctx context.Context, obj O, add bool) error {
	base := obj.DeepCopyObject().(client.Object)
	changed := false
	if add {
		changed = controllerutil.AddFinalizer(obj, r.o.Finalizer)
	} else {
		changed = controllerutil.RemoveFinalizer(obj, r.o.Finalizer)
	}
	if !changed {
		return nil
	}
	// The optimistic lock keeps a concurrent writer's finalizers.
	if err := r.c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("lifecycle: %s finalizer %s: %w", map[bool]string{true: "add", false: "remove"}[add], r.o.Finalizer, err)
	}
	r.supersede(obj, base.GetResourceVersion())
	return nil
}

func (r *Reconciler[O, K, C]) owner(obj O) ledger.Owner {
	gvk, _ := apiutil.GVKForObject(obj, r.o.Scheme) // checked in New
	return ledger.Owner{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
}

// target binds the adapter to one client for the ledger.
func (r *Reconciler[O, K, C]) target(c C, obj O) ledger.Target {
	return ledger.TargetFuncs{
		IdentifyFn:  func(ctx context.Context) (ledger.Identity, error) { return r.adapter.Identify(ctx, c) },
		FindByTagFn: func(ctx context.Context, tag string) ([]string, error) { return r.findByTag(ctx, c, obj, tag) },
		DeleteFn: func(ctx context.Context, id string) error {
			return r.adapter.Delete(ctx, c, obj, id, ledger.Tag(r.owner(obj)))
		},
	}
}

// findByTag is the adapter's TagFinder when it has one, else Observe's IDs.
func (r *Reconciler[O, K, C]) findByTag(ctx context.Context, c C, obj O, tag string) ([]string, error) {
	if f, ok := r.adapter.(TagFinder[C]); ok {
		return f.FindByTag(ctx, c, tag)
	}
	obs, err := r.adapter.Observe(ctx, c, obj, tag)
	return obs.IDs, err
}

func (r *Reconciler[O, K, C]) event(obj O, typ, reason, action, note string, args ...interface{}) {
	if r.o.Recorder != nil {
		r.o.Recorder.Eventf(obj, nil, typ, reason, action, note, args...)
	}
}

func parentName[K comparable](obj client.Object, conn Connection[K]) string {
	if conn.Parent != nil {
		return conn.Parent.GetName()
	}
	return "of " + obj.GetName()
}

func kindOf(obj client.Object, s *runtime.Scheme) string {
	if gvk, err := apiutil.GVKForObject(obj, s); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

func isTrue(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }
