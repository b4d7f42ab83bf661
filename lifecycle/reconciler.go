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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/watchdog"
)

// Defaults of Options.
const (
	DefaultRetryInterval  = 10 * time.Second
	DefaultVerifyInterval = 5 * time.Minute
	DefaultLastChance     = 30 * time.Second
)

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

// Guarantee names a guarantee that Options.Skip leaves out on purpose.
type Guarantee uint8

// The guarantees that can be skipped. Skipping is always an explicit,
// named choice: New refuses a nil Ledger, Hold or Watchdog that Skip does
// not name.
const (
	// SkipLedger builds without cleanup records: a create whose object
	// goes without its finalizer leaks, and nothing sweeps it.
	SkipLedger Guarantee = 1 << iota
	// SkipHold builds without a deletion hold: for kinds with no parent
	// object, or whose parent never goes before them.
	SkipHold
	// SkipWatchdog builds without visibility of stuck deletions.
	SkipWatchdog
)

// Unprotected skips every guarantee: the naive operator of the benchmarks
// and fault scenarios, never what production wants.
const Unprotected = SkipLedger | SkipHold | SkipWatchdog

// Options configure a Reconciler. Ledger, Hold and Watchdog are the
// guarantees; each is required unless Skip names it.
type Options struct {
	// Finalizer is the cleanup finalizer. Required. With a Hold it must be
	// the CleanupFinalizer the hold has for this kind.
	Finalizer string
	// Scheme resolves the managed kind for cleanup records and Events.
	// Required.
	Scheme *runtime.Scheme
	// Ledger writes the cleanup record before every create and removes it
	// after a confirmed delete.
	Ledger *ledger.Ledger
	// Hold keeps the parent while this object still needs it.
	Hold *hold.Hold
	// Watchdog sees every delete attempt.
	Watchdog *watchdog.Watchdog
	// Skip names the guarantees deliberately left out.
	Skip Guarantee
	// Recorder gets Events. nil: no Events.
	Recorder Recorder
	// Classifier names error classes in messages and decides which Delete
	// errors mean the resource is gone. nil is the pool's when the pool
	// tells it (*clientpool.Pool.Classifier), else errclass.Default; one
	// that differs from the pool's is refused: give it once, to the pool.
	Classifier *errclass.Classifier
	// APIReader reads live (uncached) right before a create or an
	// adoption, to confirm the object still exists, carries the finalizer
	// and is not being deleted, and that its parent is still held: a
	// reconcile working from a stale cache must not create what a finished
	// deletion will never see. nil uses the Client, which is right only
	// when the Client is uncached; pass the manager's GetAPIReader().
	APIReader client.Reader
	// Clock stamps conditions and decides verification and backoff; nil is
	// the real clock.
	Clock clock.PassiveClock
	// DefaultPolicy applies when the object has no Spec.DeletionPolicy or
	// it is empty. Zero is PolicyDelete.
	DefaultPolicy DeletionPolicy
	// RetryInterval is how soon a reconcile that needs the user, or waits
	// for the parent, looks again; zero is DefaultRetryInterval. Transient
	// failures are returned to the workqueue instead, whose rate limiter
	// backs off per object.
	RetryInterval time.Duration
	// VerifyInterval is how often a steady object's reconcile checks that
	// its cleanup record still exists (and writes it again if not); zero
	// is DefaultVerifyInterval.
	VerifyInterval time.Duration
	// LastChance bounds the delete attempted once a hold is over, before
	// the object is released without it; zero is DefaultLastChance.
	LastChance time.Duration
}

// Reconciler reconciles one managed kind O whose external resources are
// reached through clients C pooled by K.
type Reconciler[O client.Object, K comparable, C any] struct {
	c       Client
	newObj  func() O
	adapter Adapter[O, K, C]
	pool    Pool[K, C]
	o       Options
	gvk     schema
	// superseded holds, per object UID, the resourceVersions this
	// reconciler's own last writes replaced (see skipStale).
	superseded sync.Map
	// verified holds, per object UID, when its record was last confirmed
	// and through which parent (a verification).
	verified sync.Map
	// failures counts, per object UID, the failed passes of a held
	// deletion in a row, for its backoff.
	failures sync.Map
	// namespaces holds, per object UID, its namespace's UID as read live
	// (see namespaceUID); noNamespaces logs once that it cannot be read.
	namespaces   sync.Map
	noNamespaces sync.Once
	// namespaceCache, when set, serves the namespace UIDs a record is
	// written with (Setup's WatchNamespaces informer); nil reads them live.
	namespaceCache client.Reader
}

type schema struct{ group, version, kind string }

type verification struct {
	at     time.Time
	parent types.UID
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
		return nil, fmt.Errorf("%w: Options.Scheme is required (mgr.GetScheme())", ErrConfig)
	case o.RetryInterval < 0 || o.VerifyInterval < 0 || o.LastChance < 0:
		return nil, fmt.Errorf("%w: Options.RetryInterval, VerifyInterval and LastChance must not be negative", ErrConfig)
	}
	obj := newObj()
	if _, err := fieldsOf(obj); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	gvk, err := apiutil.GVKForObject(obj, o.Scheme)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := o.checkGuarantees(obj, gvk.Kind); err != nil {
		return nil, err
	}
	switch o.DefaultPolicy {
	case "":
		o.DefaultPolicy = PolicyDelete
	case PolicyDelete, PolicyRetain:
	default:
		return nil, fmt.Errorf("%w: Options.DefaultPolicy %q: use %q or %q", ErrConfig, o.DefaultPolicy, PolicyDelete, PolicyRetain)
	}
	if o.Classifier, err = classifierFor(p, o.Classifier); err != nil {
		return nil, err
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
	if o.VerifyInterval == 0 {
		o.VerifyInterval = DefaultVerifyInterval
	}
	if o.LastChance == 0 {
		o.LastChance = DefaultLastChance
	}
	return &Reconciler[O, K, C]{c: c, newObj: newObj, adapter: a, pool: p, o: o,
		gvk: schema{gvk.Group, gvk.Version, gvk.Kind}}, nil
}

// checkGuarantees refuses a guarantee that is nil without being skipped,
// one that is both given and skipped, and a hold that does not know this
// kind under the same finalizer: a mismatch strands namespace deletions
// with the objects still Ready and no Event.
func (o Options) checkGuarantees(obj client.Object, kind string) error {
	for _, g := range []struct {
		skip  Guarantee
		isNil bool
		name  string
	}{
		{SkipLedger, o.Ledger == nil, "Ledger"},
		{SkipHold, o.Hold == nil, "Hold"},
		{SkipWatchdog, o.Watchdog == nil, "Watchdog"},
	} {
		skipped := o.Skip&g.skip != 0
		switch {
		case g.isNil && !skipped:
			return fmt.Errorf("%w: Options.%s is nil: pass one, or name it in Options.Skip (lifecycle.Skip%s) to build without that guarantee on purpose", ErrConfig, g.name, g.name)
		case !g.isNil && skipped:
			return fmt.Errorf("%w: Options.%s is set and Options.Skip names it: choose one", ErrConfig, g.name)
		}
	}
	if o.Hold != nil {
		fin, ok := o.Hold.CleanupFinalizer(obj)
		switch {
		case !ok:
			return fmt.Errorf("%w: the Hold has no Dependent for kind %s: add it to hold.Config.Dependents", ErrConfig, kind)
		case fin != o.Finalizer:
			return fmt.Errorf("%w: the Hold waits for finalizer %q on %s, the reconciler uses %q: make them the same (one constant)", ErrConfig, fin, kind, o.Finalizer)
		}
	}
	return nil
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
		res, err := r.delete(ctx, obj, st)
		// An object whose finalizer went is gone or about to be: its
		// status is not worth a write.
		if controllerutil.ContainsFinalizer(obj, r.o.Finalizer) {
			if ferr := st.flush(ctx); ferr != nil && err == nil {
				err = ferr
			}
		}
		return res, err
	}
	// Cluster API's rule: the finalizer goes on before anything external
	// exists, so no create can outrun the cleanup that undoes it. The
	// annotation that ties the object to its UID goes with it, in the same
	// write.
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
		st.ready(false, ReasonCreating, messageCreating)
	}
	conn, err := r.adapter.Connect(ctx, obj)
	if err != nil {
		return r.failed(ctx, st, err, ReasonReconcileError, messageError)
	}
	if conn.Parent == nil {
		st.synced(false, ReasonParentNotFound, messageParentMissing)
		st.ready(false, ReasonCreating, messageCreating)
		return reconcile.Result{RequeueAfter: r.o.RetryInterval}, nil
	}
	if r.o.Hold != nil && !r.o.Hold.Held(conn.Parent) {
		// The hold usually comes within moments of a parent's first
		// dependent, and the parent's change wakes this object; a condition
		// (and its write) for that is noise. Only a wait longer than
		// RetryInterval is reported.
		if st.get(ConditionSynced) == nil && r.o.Clock.Since(obj.GetCreationTimestamp().Time) < r.o.RetryInterval {
			st.discard()
		} else {
			st.synced(false, ReasonWaitingForHold, messageWaitingHold, kindOf(conn.Parent, r.o.Scheme), conn.Parent.GetName())
		}
		return reconcile.Result{RequeueAfter: min(r.o.RetryInterval, time.Second)}, nil
	}
	tag := ledger.Tag(r.owner(obj))
	var created, adopted string
	var from *adoption
	claim := obj.GetAnnotations()[AnnotationUID]
	x := r.remote(conn.Key)
	err = func() error {
		if claim != string(obj.GetUID()) && r.o.Ledger != nil {
			var err error
			if from, err = r.adopt(ctx, x, obj, conn, claim); err != nil {
				return err
			}
		}
		obs, err := x.observe(ctx, obj, tag)
		if err != nil {
			return err
		}
		if len(obs.IDs) == 0 {
			if err := r.confirmLive(ctx, obj, conn); err != nil {
				return err
			}
			created, err = r.create(ctx, x, obj, conn, tag)
			return err
		}
		if len(obs.IDs) > 1 {
			kept, err := r.duplicates(ctx, x, obj, obs.IDs, tag)
			if err != nil {
				return err
			}
			obs.IDs = []string{kept}
		}
		ready := st.get(ConditionReady)
		if !isTrue(ready) && from == nil {
			adopted = obs.IDs[0]
		}
		if err := r.verify(ctx, x, obj, conn, obs.IDs, isTrue(ready) && ready.ObservedGeneration == obj.GetGeneration()); err != nil {
			return err
		}
		if !obs.UpToDate {
			return x.update(ctx, obj, obs.IDs[0], tag)
		}
		return nil
	}()
	if errors.Is(err, errStale) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if errors.Is(err, errSecretUnheld) {
		st.synced(false, ReasonWaitingForHold, messageWaitingHold, "Secret", r.o.Hold.SecretName(conn.Parent))
		return reconcile.Result{RequeueAfter: min(r.o.RetryInterval, time.Second)}, nil
	}
	if err != nil {
		return r.failed(ctx, st, err, ReasonReconcileError, messageError)
	}
	if claim != string(obj.GetUID()) {
		if err := r.setUIDAnnotation(ctx, obj); err != nil {
			return reconcile.Result{}, err
		}
	}
	kind := r.gvk.kind
	switch {
	case from != nil:
		createsTotal.WithLabelValues(kind, outcomeAdoptedFrom).Inc()
		r.event(obj, corev1.EventTypeNormal, ReasonAdoptedFrom, actionCreate, messageAdoptedFrom, from.ids, from.uid)
	case created != "":
		createsTotal.WithLabelValues(kind, outcomeCreated).Inc()
		r.event(obj, corev1.EventTypeNormal, ReasonCreated, actionCreate, messageCreated, created)
	case adopted != "":
		createsTotal.WithLabelValues(kind, outcomeAdopted).Inc()
		r.event(obj, corev1.EventTypeNormal, ReasonAdopted, actionCreate, messageAdopted, adopted)
	}
	st.synced(true, ReasonReconcileSuccess, messageSynced)
	st.ready(true, ReasonAvailable, messageAvailable)
	return reconcile.Result{}, nil
}

// duplicates resolves two or more resources carrying obj's tag, which only
// a create that completed after its retry makes (a retry waits while an
// attempt is in doubt, so a service that keeps its landing bound never
// does): the one in the cleanup record is the one the object uses, its
// create having returned it, and every other is deleted by exact ID and
// tag. When the record does not name exactly one of them nothing says which
// is in use: reported to the user, nothing deleted.
func (r *Reconciler[O, K, C]) duplicates(ctx context.Context, x remote[O, K, C], obj O, ids []string, tag string) (string, error) {
	var recorded []string
	if r.o.Ledger != nil {
		rec, err := r.o.Ledger.Get(ctx, obj.GetUID())
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return "", err
		}
		if rec != nil {
			recorded = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !slices.Contains(rec.ExternalIDs, id) })
		}
	}
	if len(recorded) != 1 {
		return "", &NeedsAction{Reason: ReasonDuplicates, Action: fmt.Sprintf(messageDuplicates, ids)}
	}
	kept := recorded[0]
	for _, id := range ids {
		if id == kept {
			continue
		}
		if err := x.Delete(ctx, id, tag); err != nil && r.class(ctx, err) != errclass.NotFound {
			return "", fmt.Errorf("lifecycle: delete duplicate %s of %s: %w", id, r.owner(obj), err)
		}
		logf.FromContext(ctx).Info("deleted a duplicate external resource", "deleted", id, "kept", kept, "owner", r.owner(obj).String())
		r.event(obj, corev1.EventTypeWarning, ReasonDuplicateDeleted, actionReconcile, messageDuplicateDeleted, id, kept)
	}
	return kept, nil
}

// plan is what obj's record must say besides what the deployment reports.
func (r *Reconciler[O, K, C]) plan(obj O, conn Connection[K]) ledger.Plan {
	p := ledger.Plan{Owner: r.owner(obj), Policy: r.policy(obj)}
	if conn.Parent != nil {
		gvk, _ := apiutil.GVKForObject(conn.Parent, r.o.Scheme)
		p.Via = &ledger.ConnectionRef{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: conn.Parent.GetNamespace(), Name: conn.Parent.GetName(), UID: conn.Parent.GetUID(),
		}
	}
	return p
}

// verify keeps the record of an object whose resources exist in line with
// it: written again when it vanished out of band, its policy and
// connection updated. A Ready object of this generation is checked at
// most every VerifyInterval (or when its parent was re-created), so a
// steady object costs one read per interval, not per reconcile.
func (r *Reconciler[O, K, C]) verify(ctx context.Context, x remote[O, K, C], obj O, conn Connection[K], ids []string, steady bool) error {
	if r.o.Ledger == nil {
		return nil
	}
	var parent types.UID
	if conn.Parent != nil {
		parent = conn.Parent.GetUID()
	}
	if v, ok := r.verified.Load(obj.GetUID()); ok && steady {
		v := v.(verification)
		if v.parent == parent && r.o.Clock.Since(v.at) < r.o.VerifyInterval {
			return nil
		}
	}
	p, err := r.recordPlan(ctx, obj, conn, false)
	if err != nil {
		return err
	}
	_, recreated, err := r.o.Ledger.Ensure(ctx, p, x, ids)
	if err != nil {
		return err
	}
	r.verified.Store(obj.GetUID(), verification{at: r.o.Clock.Now(), parent: parent})
	if recreated {
		logf.FromContext(ctx).Info("cleanup record was missing and has been written again", "owner", r.owner(obj).String(), "ids", ids)
		r.event(obj, corev1.EventTypeWarning, ReasonRecordRecreated, actionReconcile, messageRecordRecreated)
	}
	return nil
}

// create writes the record first and creates only once it is durable; what
// already carries the tag (an earlier attempt whose answer was lost) is
// adopted, never duplicated. An adapter that declares the ID has it
// written with the record, saving the write after the create.
func (r *Reconciler[O, K, C]) create(ctx context.Context, x remote[O, K, C], obj O, conn Connection[K], tag string) (string, error) {
	var id string
	createFn := func(ctx context.Context, tag string) ([]string, error) {
		var err error
		if id, err = x.create(ctx, obj, tag); err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	if r.o.Ledger == nil {
		_, err := createFn(ctx, tag)
		return id, err
	}
	p, err := r.recordPlan(ctx, obj, conn, false)
	if err != nil {
		return "", err
	}
	if d, ok := r.adapter.(Declarer[O]); ok {
		if declared, ok := d.DeclareID(obj, tag); ok && declared != "" {
			p.Declared = []string{declared}
		}
	}
	_, err = r.o.Ledger.Create(ctx, p, x, createFn)
	if err == nil && p.Via != nil {
		r.verified.Store(obj.GetUID(), verification{at: r.o.Clock.Now(), parent: p.Via.UID})
	}
	return id, err
}

// errStale stops a create planned from a stale read; the next reconcile
// sees the object as it is.
var errStale = errors.New("lifecycle: the object or its parent changed (deleted, deleting, without the finalizer or the hold) since it was read; not creating")

// confirmLive re-reads obj, and with a hold its parent, from the API
// server: a create is planned only for an object that exists, carries the
// cleanup finalizer and is not being deleted, so the deletion that follows
// is guaranteed to see what it made, and only while the parent is held, so
// the parent cannot go before that deletion.
func (r *Reconciler[O, K, C]) confirmLive(ctx context.Context, obj O, conn Connection[K]) error {
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
	if r.o.Hold == nil || conn.Parent == nil {
		return nil
	}
	parent := conn.Parent.DeepCopyObject().(client.Object)
	if err := r.o.APIReader.Get(ctx, client.ObjectKeyFromObject(conn.Parent), parent); err != nil {
		if apierrors.IsNotFound(err) {
			return errStale
		}
		return fmt.Errorf("lifecycle: confirm parent %s before creating: %w", client.ObjectKeyFromObject(conn.Parent), err)
	}
	if parent.GetUID() != conn.Parent.GetUID() || !r.o.Hold.Held(parent) {
		return errStale
	}
	// The Secret too: the hold puts its finalizer there first, but a
	// Secret reconciler working from a stale cache may have taken it off
	// since (found by internal/model).
	if name := r.o.Hold.SecretName(parent); name != "" {
		s := &metav1.PartialObjectMetadata{}
		s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := r.o.APIReader.Get(ctx, client.ObjectKey{Namespace: parent.GetNamespace(), Name: name}, s)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("lifecycle: confirm the hold on Secret %s/%s before creating: %w", parent.GetNamespace(), name, err)
		}
		if err == nil && !r.o.Hold.SecretHeld(s) {
			return errSecretUnheld
		}
	}
	return nil
}

// errSecretUnheld stops a create through a held parent whose Secret has
// lost its hold; the hold's next pass over the parent puts it back.
var errSecretUnheld = errors.New("lifecycle: the parent's credential Secret does not carry its hold; not creating until it does")

func (r *Reconciler[O, K, C]) delete(ctx context.Context, obj O, st *status[O, K, C]) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, r.o.Finalizer) {
		return reconcile.Result{}, nil
	}
	if r.policy(obj) == PolicyRetain {
		if err := r.keep(ctx, obj); err != nil {
			return r.failed(ctx, st, err, ReasonDeleteFailed, messageDeleteFailed)
		}
		return r.finish(ctx, obj, ReasonRetained, messageRetained)
	}
	var rec *ledger.Record
	if r.o.Ledger != nil {
		var err error
		// The record as this ledger wrote it, when it remembers it: a live
		// read here cost every delete one more API round trip, and what it
		// decided needs none. Only a record the store says is missing lets
		// a never-Ready object go without a cleanup, and that still comes
		// from the store (a record is remembered only while it exists as
		// far as this ledger knows). A remembered one sends the object
		// through Cleanup, which removes the record only if its version is
		// still the one remembered, and otherwise starts over from the
		// store.
		rec, err = r.o.Ledger.Current(ctx, obj.GetUID())
		switch {
		case errors.Is(err, ledger.ErrLegacyRecord):
			// The previous release's record: migrated through this
			// object's own connection before the cleanup (cleanupLegacy).
		case errors.Is(err, ledger.ErrNotFound):
			// No record, no create: an object that never got as far as a
			// create (its connection never worked, its Secret never
			// existed) has nothing outside to delete and waits for
			// nothing. One that was Ready has lost its record out of band
			// and is cleaned up by its tag below.
			if ready := st.get(ConditionReady); !isTrue(ready) && (ready == nil || ready.Reason != ReasonDeleting) {
				return r.finish(ctx, obj, ReasonNothingCreated, messageNothingCreated)
			}
		case err != nil:
			return r.failed(ctx, st, err, ReasonDeleteFailed, messageDeleteFailed)
		}
	}
	st.ready(false, ReasonDeleting, messageDeleting)
	conn, err := r.adapter.Connect(ctx, obj)
	// A Connect error with a parent in hand (its Secret is gone, say) still
	// lets the hold decide; one without (the parent could not be read) must
	// not be taken for a parent that is gone.
	if r.o.Hold != nil && (err == nil || conn.Parent != nil) && r.o.Hold.ShouldReleaseWithoutDelete(conn.Parent) {
		// The hold is over. While the parent and its credentials are still
		// there (an operator that was down past the hold), the delete is
		// tried once more before letting go: releasing without it is for
		// when it cannot succeed.
		if err == nil && conn.Parent != nil {
			lastCtx, cancel := context.WithTimeout(ctx, r.o.LastChance)
			tag := ledger.Tag(r.owner(obj))
			cerr := r.cleanup(lastCtx, r.remote(conn.Key), obj, conn, tag)
			cancel()
			r.attempt(ctx, obj, cerr)
			if cerr == nil {
				return r.finish(ctx, obj, ReasonDeleted, messageDeleted)
			}
			logf.FromContext(ctx).Error(cerr, "last delete attempt after the hold ended failed; releasing without delete")
		}
		return r.release(ctx, obj, conn, rec)
	}
	if err != nil {
		r.attempt(ctx, obj, err)
		return r.failed(ctx, st, err, ReasonDeleteFailed, messageDeleteFailed)
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
		return r.finish(ctx, obj, ReasonDeleted, messageDeleted)
	}
	tag := ledger.Tag(r.owner(obj))
	err = r.cleanup(passCtx, r.remote(conn.Key), obj, conn, tag)
	r.attempt(ctx, obj, err)
	if err != nil {
		if r.o.Hold == nil {
			return r.failed(ctx, st, err, ReasonDeleteFailed, messageDeleteFailed)
		}
		// Within a held deletion the retry is bounded by the hold end, so
		// the pass at the hold end is the one that releases: the retry is
		// this object's own backoff, capped there, not the workqueue's.
		res, _ := r.failed(ctx, st, err, ReasonDeleteFailed, messageDeleteFailed)
		backoff := r.backoff(obj)
		if res.RequeueAfter > 0 {
			backoff = res.RequeueAfter
		}
		logf.FromContext(ctx).Error(err, "delete attempt failed", "retryIn", backoff)
		return reconcile.Result{RequeueAfter: r.o.Hold.RetryAfter(conn.Parent, backoff)}, nil
	}
	return r.finish(ctx, obj, ReasonDeleted, messageDeleted)
}

// release lets obj go without its external delete: the hold is over. Its
// record stays for the sweeper. The Event on obj may never land (its
// namespace is usually terminating, and a terminating namespace refuses new
// Events), so the transition is also reported on the record, in the
// operator's namespace, and in the log.
func (r *Reconciler[O, K, C]) release(ctx context.Context, obj O, conn Connection[K], rec *ledger.Record) (reconcile.Result, error) {
	kind, name := "connection", "(unknown)"
	if conn.Parent != nil {
		kind, name = kindOf(conn.Parent, r.o.Scheme), conn.Parent.GetName()
	}
	if err := r.o.Hold.ReleaseWithoutDelete(ctx, r.c, obj, name); err != nil {
		return reconcile.Result{}, err
	}
	logf.FromContext(ctx).Info("released without deleting the external resource: the hold ended; the cleanup record stays for the sweeper",
		"owner", r.owner(obj).String(), "parent", kind+" "+name, "recorded", rec != nil)
	if rec != nil && rec.Source != nil && r.o.Recorder != nil {
		r.o.Recorder.Eventf(rec.Source, obj, corev1.EventTypeWarning, ReasonReleased, actionDelete, messageReleased, kind, name)
	}
	deletionsTotal.WithLabelValues(r.gvk.kind, outcomeReleased).Inc()
	r.done(ctx, obj)
	r.forgetObject(obj)
	return reconcile.Result{}, nil
}

// cleanup deletes and confirms: through the record when there is one
// (recorded IDs and tagged resources, the deployment proven from inside
// before and after, record removed last); otherwise by tag, confirmed by
// looking again.
func (r *Reconciler[O, K, C]) cleanup(ctx context.Context, x remote[O, K, C], obj O, conn Connection[K], tag string) error {
	if r.o.Ledger != nil {
		res, err := r.o.Ledger.Cleanup(ctx, obj.GetUID(), x)
		if errors.Is(err, ledger.ErrLegacyRecord) {
			res, err = r.cleanupLegacy(ctx, x, obj, conn)
		}
		if err != nil || res.Removed {
			return err
		}
	}
	ids, err := r.findByTag(ctx, x, obj, tag)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := x.Delete(ctx, id, tag); err != nil && r.o.Classifier.Classify(ctx, err) != errclass.NotFound {
			return err
		}
	}
	if len(ids) == 0 {
		return nil
	}
	left, err := r.findByTag(ctx, x, obj, tag)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("lifecycle: %q still carry tag %s after delete", left, tag)
	}
	return nil
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

// supersede remembers that a write replaced obj's version rv. A write that
// made no new version (an empty patch) replaced nothing: remembering it
// would skip every later reconcile of an object no watch event will bring
// again.
func (r *Reconciler[O, K, C]) supersede(obj client.Object, rv string) {
	if obj.GetResourceVersion() == rv {
		return
	}
	var rvs []string
	if v, ok := r.superseded.Load(obj.GetUID()); ok {
		rvs = v.([]string)
	}
	r.superseded.Store(obj.GetUID(), append(slices.Clone(rvs), rv))
}

// forgetObject drops what the reconciler remembers about obj, which goes.
func (r *Reconciler[O, K, C]) forgetObject(obj O) {
	r.superseded.Delete(obj.GetUID())
	r.verified.Delete(obj.GetUID())
	r.failures.Delete(obj.GetUID())
	r.namespaces.Delete(obj.GetUID())
}

// finish removes the finalizer: the last write, after everything it
// protects is done. The happy path emits no Event here (the object is
// going, often in a terminating namespace that refuses Events): the log
// says it. What a user would wonder about (retained, nothing created) is
// evented.
func (r *Reconciler[O, K, C]) finish(ctx context.Context, obj O, reason, msg string) (reconcile.Result, error) {
	if err := r.setFinalizer(ctx, obj, false); err != nil {
		return reconcile.Result{}, err
	}
	r.forgetObject(obj)
	r.done(ctx, obj)
	outcome := map[string]string{ReasonRetained: outcomeRetained, ReasonNothingCreated: outcomeNothingCreated}[reason]
	if outcome == "" {
		outcome = outcomeDeleted
	}
	deletionsTotal.WithLabelValues(r.gvk.kind, outcome).Inc()
	logf.FromContext(ctx).V(1).Info("cleanup finalizer removed", "outcome", outcome)
	if reason != ReasonDeleted {
		r.event(obj, corev1.EventTypeNormal, reason, actionDelete, msg)
	}
	return reconcile.Result{}, nil
}

func (r *Reconciler[O, K, C]) attempt(ctx context.Context, obj O, err error) {
	if r.o.Watchdog != nil {
		r.o.Watchdog.Attempt(ctx, obj, r.o.Finalizer, err)
	}
	if err == nil {
		r.failures.Delete(obj.GetUID())
		return
	}
	n := 0
	if v, ok := r.failures.Load(obj.GetUID()); ok {
		n = v.(int)
	}
	r.failures.Store(obj.GetUID(), n+1)
}

// backoff is the retry of a held deletion after n failed passes in a row:
// one second doubling to RetryInterval. A namespace deletion waits on it
// and the hold has an end, so it stays within seconds.
func (r *Reconciler[O, K, C]) backoff(obj O) time.Duration {
	n := 1
	if v, ok := r.failures.Load(obj.GetUID()); ok {
		n = v.(int)
	}
	return min(time.Second<<min(n-1, 9), max(r.o.RetryInterval, time.Second))
}

func (r *Reconciler[O, K, C]) done(ctx context.Context, obj O) {
	if r.o.Watchdog != nil {
		r.o.Watchdog.Done(ctx, obj, r.o.Finalizer)
	}
}

// failed records err's class in the Synced condition, never its text
// (status is readable by every user of the namespace), and decides the
// retry. An error only the user or an admin can resolve is looked at again
// at RetryInterval; every other error is returned to the workqueue, whose
// rate limiter backs off per object (and which counts it in
// controller_runtime_reconcile_errors_total and logs it with the details).
func (r *Reconciler[O, K, C]) failed(ctx context.Context, st *status[O, K, C], err error, reason, msg string) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	var doubt *ledger.InDoubtError
	switch na, ok := asNeedsAction(err); {
	case ok:
		st.synced(false, na.Reason, messageNeedsAction, needsActionMessage(na))
		log.Info("needs the user", "reason", na.Reason, "error", err.Error())
		return reconcile.Result{RequeueAfter: r.o.RetryInterval}, nil
	case errors.Is(err, ledger.ErrInvalidRecord):
		st.synced(false, ReasonRecordInvalid, messageRecordInvalid)
		log.Error(err, "cleanup record invalid; needs an admin")
		return reconcile.Result{RequeueAfter: r.o.RetryInterval}, nil
	case errors.Is(err, ledger.ErrNotProven):
		st.synced(false, ReasonNotProven, messageNotProven)
	case errors.Is(err, ledger.ErrRecordWrite):
		st.synced(false, ReasonRecordFailed, messageRecordFailed, r.class(ctx, err))
	case errors.As(err, &doubt):
		// A wait with a known end, not a failure: looked at again when it
		// ends, not with the workqueue's backoff.
		left := doubt.RetryAfter(r.o.Clock.Now())
		st.synced(false, ReasonCreateInDoubt, messageCreateInDoubt, left.Round(time.Second))
		log.Info("create in doubt: waiting until it can no longer complete", "until", doubt.Until)
		return reconcile.Result{RequeueAfter: left}, nil
	default:
		st.synced(false, reason, msg, r.class(ctx, err))
	}
	return reconcile.Result{}, err
}

func (r *Reconciler[O, K, C]) class(ctx context.Context, err error) errclass.Class {
	return r.o.Classifier.Classify(ctx, err)
}

func (r *Reconciler[O, K, C]) setFinalizer(ctx context.Context, obj O, add bool) error {
	base := obj.DeepCopyObject().(client.Object)
	changed := false
	if add {
		changed = controllerutil.AddFinalizer(obj, r.o.Finalizer)
		if _, ok := obj.GetAnnotations()[AnnotationUID]; !ok {
			setAnnotation(obj, AnnotationUID, string(obj.GetUID()))
			changed = true
		}
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

// setUIDAnnotation ties obj to its own UID once it owns its resources.
func (r *Reconciler[O, K, C]) setUIDAnnotation(ctx context.Context, obj O) error {
	base := obj.DeepCopyObject().(client.Object)
	setAnnotation(obj, AnnotationUID, string(obj.GetUID()))
	if err := r.c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("lifecycle: set annotation %s: %w", AnnotationUID, err)
	}
	r.supersede(obj, base.GetResourceVersion())
	return nil
}

func setAnnotation(obj client.Object, k, v string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	obj.SetAnnotations(a)
}

func (r *Reconciler[O, K, C]) owner(obj O) ledger.Owner {
	return ledger.Owner{APIVersion: r.apiVersion(), Kind: r.gvk.kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
}

func (r *Reconciler[O, K, C]) apiVersion() string {
	if r.gvk.group == "" {
		return r.gvk.version
	}
	return r.gvk.group + "/" + r.gvk.version
}

// findByTag is Observe's IDs: for the build without records.
func (r *Reconciler[O, K, C]) findByTag(ctx context.Context, x remote[O, K, C], obj O, tag string) ([]string, error) {
	obs, err := x.observe(ctx, obj, tag)
	return obs.IDs, err
}

func (r *Reconciler[O, K, C]) event(obj O, typ, reason, action, note string, args ...interface{}) {
	if r.o.Recorder != nil {
		r.o.Recorder.Eventf(obj, nil, typ, reason, action, note, args...)
	}
}

func kindOf(obj client.Object, s *runtime.Scheme) string {
	if gvk, err := apiutil.GVKForObject(obj, s); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

func isTrue(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }
