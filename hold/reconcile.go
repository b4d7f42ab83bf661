package hold

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/internal/eventrec"
)

// secretMeta is an empty Secret in metadata-only form. The hold reads and
// patches only a Secret's finalizers, so it never asks for (or caches) a
// Secret's data: its watch is metadata-only (builder.OnlyMetadata) and every
// read and patch goes through a PartialObjectMetadata.
func secretMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// SetupWithManager registers the field indexes and three controllers: one
// for parents (woken by dependent changes), one for Secrets (woken by
// parent changes) and one for terminating namespaces
// (NamespaceReconciler). Reads go through the manager's cache, writes
// through its client. The Secret and Namespace watches are metadata-only,
// so the cache holds no Secret's data on the hold's account. A nil
// Recorder becomes an events.k8s.io recorder named "finale-hold" that
// sends nothing into a terminating namespace (internal/eventrec).
func (h *Hold) SetupWithManager(mgr ctrl.Manager) error {
	h.mu.Lock()
	done := h.setUp
	h.setUp = true
	h.mu.Unlock()
	if done {
		return nil
	}
	if err := h.Index(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if h.cfg.Recorder == nil {
		rec, err := eventrec.For(mgr, "finale-hold")
		if err != nil {
			return fmt.Errorf("hold: %w", err)
		}
		h.cfg.Recorder = rec
	}
	if h.cfg.Live == nil {
		h.cfg.Live = mgr.GetAPIReader()
	}
	name := "hold-" + strings.ToLower(h.cfg.ParentKind)
	b := ctrl.NewControllerManagedBy(mgr).Named(name).For(newObject(h.cfg.Parent))
	for _, d := range h.dependents {
		b = b.Watches(newObject(d.Object), h.wake(mgr.GetCache(), d))
	}
	if err := b.Complete(h.ParentReconciler(mgr.GetCache(), mgr.GetClient())); err != nil {
		return fmt.Errorf("hold: parent controller: %w", err)
	}
	secretName := h.cfg.SecretName
	err := ctrl.NewControllerManagedBy(mgr).Named(name+"-secret").For(secretMeta(), builder.OnlyMetadata).
		Watches(newObject(h.cfg.Parent), handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if n := secretName(o); n != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
			}
			return nil
		})).
		Complete(h.SecretReconciler(mgr.GetCache(), mgr.GetClient()))
	if err != nil {
		return fmt.Errorf("hold: secret controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named(name+"-namespace").
		For(namespaceMeta(), builder.OnlyMetadata, builder.WithPredicates(predicate.NewPredicateFuncs(deleting))).
		Complete(h.NamespaceReconciler(mgr.GetCache(), h.cfg.Live, mgr.GetClient()))
	if err != nil {
		return fmt.Errorf("hold: namespace controller: %w", err)
	}
	return nil
}

// dropDelay is how soon a dependent that stops counting (Dependents)
// wakes its parent. The most that can change there is that the parent is
// let go (an alive parent's hold dropped, a deleting parent released once
// its last dependent is done), which may wait a moment: N dependents
// deleted at once then make a pass or two instead of N, each a count of
// the dependents left (alive) or a proof of access through the service's
// connection, shared with the dependents' own deletes (deleting). Letting
// go later only keeps longer; the parent's own changes wake it at once.
const dropDelay = time.Second

// wake enqueues a dependent's parent when the dependent's change can change
// the parent's verdict. The one change that cannot is a dependent that
// counts (Dependents) before and after, or a new one that counts, while the
// parent carries the hold: alive, the verdict stays "keep"; deleting, it
// stays "hold" until the last dependent stops counting or the hold's end,
// which the pass that first saw the deletion already waits for. Skipping
// those spares a parent of N dependents N passes over N dependents as they
// are created, their status written and their deletions started. A
// dependent that stops counting, or is gone, wakes the parent after
// dropDelay. A stale cached parent is safe to trust here because the
// parent's own changes wake it regardless (For).
func (h *Hold) wake(r client.Reader, d dependentKind) handler.EventHandler {
	parentKey := func(o client.Object) (types.NamespacedName, bool) {
		n := d.ParentName(o)
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: n}, n != ""
	}
	counts := func(o client.Object) bool { return hasFinalizer(o, d.CleanupFinalizer) || !deleting(o) }
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
		if k, ok := parentKey(o); ok {
			q.Add(reconcile.Request{NamespacedName: k})
		}
	}
	enqueueSoon := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
		if k, ok := parentKey(o); ok {
			q.AddAfter(reconcile.Request{NamespacedName: k}, dropDelay)
		}
	}
	settled := func(ctx context.Context, o client.Object) bool {
		k, ok := parentKey(o)
		if !ok {
			return true // no parent to wake
		}
		p := newObject(h.cfg.Parent)
		if r.Get(ctx, k, p) != nil || !hasFinalizer(p, h.cfg.Finalizer) {
			return false
		}
		if deleting(p) {
			return true
		}
		// A held parent whose Secret lost its hold is not settled: the
		// parent's pass puts it back.
		name := h.cfg.SecretName(p)
		if name == "" {
			return true
		}
		s := secretMeta()
		return r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: name}, s) == nil && hasFinalizer(s, h.cfg.Finalizer)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if !counts(e.Object) || !settled(ctx, e.Object) {
				enqueue(q, e.Object)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			oldKey, _ := parentKey(e.ObjectOld)
			newKey, _ := parentKey(e.ObjectNew)
			if oldKey != newKey {
				enqueue(q, e.ObjectOld)
				enqueue(q, e.ObjectNew)
				return
			}
			switch {
			case !counts(e.ObjectNew):
				enqueueSoon(q, e.ObjectNew)
			case !counts(e.ObjectOld) || !settled(ctx, e.ObjectNew):
				enqueue(q, e.ObjectNew)
			}
		},
		// A dependent that is gone counts no more, whatever its last version
		// says: the one a deletion event carries is the version stored
		// before the delete, so a dependent whose cleanup finalizer went in
		// the write that deleted it still shows the finalizer.
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueSoon(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}
}

// ParentReconciler reconciles parents: r must have the field indexes
// (a manager's cache), w writes finalizers.
func (h *Hold) ParentReconciler(r client.Reader, w client.Writer) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return h.reconcileParent(ctx, r, w, req.NamespacedName)
	})
}

// SecretReconciler keeps the hold finalizer on a Secret exactly while some
// parent naming it needs it. It reads Secrets as PartialObjectMetadata: r
// must serve that form (a manager's cache with a metadata-only Secret
// watch, or any client).
func (h *Hold) SecretReconciler(r client.Reader, w client.Writer) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, h.reconcileSecret(ctx, r, w, req.NamespacedName)
	})
}

func (h *Hold) reconcileParent(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (reconcile.Result, error) {
	parent := newObject(h.cfg.Parent)
	if err := r.Get(ctx, key, parent); err != nil {
		if apierrors.IsNotFound(err) {
			h.setActive(key, false)
			h.forget(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("hold: get %s %s: %w", h.cfg.ParentKind, key, err)
	}
	counts, err := h.Dependents(ctx, r, parent)
	if err != nil {
		return reconcile.Result{}, err
	}
	o := observation{Deleting: deleting(parent), Dependents: total(counts)}
	var accessErr error
	if o.Deleting {
		o.Now = h.cfg.Clock.Now()
		// The hold's bound needs no write: its start is fixed in memory on
		// this first look, from the deletionTimestamp and the injected
		// clock only (startOf).
		o.End = h.end(parent, o.Now)
		o.ForegroundMarker = hasFinalizer(parent, foregroundFinalizer)
		if o.Dependents > 0 && h.cfg.Owned != nil && !o.ForegroundMarker {
			exists, err := h.cfg.Owned.Exists(ctx, parent)
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("hold: does what %s %s owns exist: %w", h.cfg.ParentKind, key, err)
			}
			o.OwnedChecked, o.OwnedExists = true, exists
		}
		if o.Dependents > 0 && h.cfg.Access != nil {
			o.AccessChecked = true
			o.AccessReady, accessErr = h.cfg.Access.Ready(ctx, parent)
			if accessErr != nil {
				o.AccessReady = false
			}
		}
	}
	v := decide(o, h.cfg.AccessPolicy, h.cfg.Recheck)
	if (v.Action == actDrop || (v.Action == actRelease && v.Reason == ReleasedDependentsDone)) && hasFinalizer(parent, h.cfg.Finalizer) && h.cfg.Live != nil {
		// Nothing needs the parent, says the cache: ask the API server.
		n, err := h.liveDependents(ctx, parent)
		if err != nil {
			return reconcile.Result{}, err
		}
		if n > 0 {
			logf.FromContext(ctx).Info("hold: the cache missed dependents; keeping the hold", "parent", key, "dependents", n)
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
	}
	switch v.Action {
	case actKeep:
		if err := h.holdSecret(ctx, r, w, parent); err != nil {
			return reconcile.Result{}, err
		}
		_, err := setFinalizer(ctx, w, parent, h.cfg.Finalizer, true)
		return reconcile.Result{}, err
	case actDrop:
		_, err := setFinalizer(ctx, w, parent, h.cfg.Finalizer, false)
		return reconcile.Result{}, err
	case actHold:
		if !hasFinalizer(parent, h.cfg.Finalizer) {
			// Never held (it had no dependents until it was already being
			// deleted); a finalizer cannot be added now.
			return reconcile.Result{}, nil
		}
		if h.setActive(key, true) {
			h.event(parent, corev1.EventTypeNormal, ReasonHolding, actionHold, noteHolding, o.Dependents, counts, o.End.UTC().Format("15:04:05Z"))
		}
		if o.AccessChecked && !o.AccessReady {
			// The Event says the class only: its readers are the parent's
			// users, and the error's text (connection refused, i/o timeout)
			// would tell them what the operator's network position sees.
			class := errclass.Unknown
			if accessErr != nil {
				class = h.cfg.Classifier.Classify(ctx, accessErr)
				logf.FromContext(ctx).Info("hold: access to the external service is not ready", "parent", key, "class", class, "error", accessErr.Error())
			}
			h.event(parent, corev1.EventTypeWarning, ReasonAccessNotReady, actionHold, noteAccessNotReady, class)
		}
		return reconcile.Result{RequeueAfter: v.After}, nil
	default: // actRelease
		changed, err := setFinalizer(ctx, w, parent, h.cfg.Finalizer, false)
		if err != nil {
			return reconcile.Result{}, err
		}
		h.setActive(key, false)
		if changed {
			held := max(h.cfg.Clock.Since(parent.GetDeletionTimestamp().Time), 0) // a clock behind the API server's
			releasesTotal.WithLabelValues(h.cfg.ParentKind, string(v.Reason)).Inc()
			holdDuration.WithLabelValues(h.cfg.ParentKind).Observe(held.Seconds())
			typ := corev1.EventTypeNormal
			if v.Reason != ReleasedDependentsDone {
				typ = corev1.EventTypeWarning
			}
			h.event(parent, typ, ReasonReleased, actionRelease, noteReleased, v.Reason, held.Round(1e6))
		}
		return reconcile.Result{}, nil
	}
}

// holdSecret puts the finalizer on parent's Secret before the parent's
// own. A Secret the cache shows held is left as it is, without a live
// read: this runs on every pass over a held parent, and each dependent's
// change brings one. The cache may still show a hold the Secret reconciler
// has just taken off; that leaves a held parent with an unheld Secret,
// which a held parent never proves anyway (the Secret reconciler can take
// the hold off right after this write too): a dependent confirms the
// Secret's hold live before it creates (lifecycle's confirmLive) and waits
// until the Secret reconciler, woken by its own write, puts it back for
// the held parent. A Secret the cache shows unheld is read live before
// the write, so that the write is not refused for a stale version.
func (h *Hold) holdSecret(ctx context.Context, r client.Reader, w client.Writer, parent client.Object) error {
	name := h.cfg.SecretName(parent)
	if name == "" {
		return nil
	}
	s := secretMeta()
	key := types.NamespacedName{Namespace: parent.GetNamespace(), Name: name}
	err := r.Get(ctx, key, s)
	if err == nil && hasFinalizer(s, h.cfg.Finalizer) {
		return nil
	}
	if h.cfg.Live != nil {
		s = secretMeta()
		err = h.cfg.Live.Get(ctx, key, s)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil // nothing to hold yet; the Secret's creation wakes the Secret controller
		}
		return fmt.Errorf("hold: get Secret %s/%s: %w", parent.GetNamespace(), name, err)
	}
	_, err = setFinalizer(ctx, w, s, h.cfg.Finalizer, true)
	return err
}

func (h *Hold) reconcileSecret(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) error {
	s := secretMeta()
	if err := r.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("hold: get Secret %s: %w", key, err)
	}
	list, err := listFactory(h.cfg.Scheme, h.cfg.Parent)
	if err != nil {
		return err
	}
	parents, err := list()
	if err != nil {
		return err
	}
	if err := r.List(ctx, parents, client.InNamespace(key.Namespace), client.MatchingFields{SecretIndex: key.Name}); err != nil {
		return fmt.Errorf("hold: list %s using Secret %s: %w", h.cfg.ParentKind, key, err)
	}
	needed, err := h.needsSecret(parents, key.Name, func(p client.Object) (int, error) {
		counts, err := h.Dependents(ctx, r, p)
		return total(counts), err
	})
	if err != nil {
		return err
	}
	if !needed && hasFinalizer(s, h.cfg.Finalizer) && h.cfg.Live != nil {
		// About to let the Secret go on the cache's word: a parent's hold
		// written a moment ago, or a dependent the cache has not seen, must
		// keep it.
		if needed, err = h.liveNeedsSecret(ctx, key); err != nil {
			return err
		}
	}
	_, err = setFinalizer(ctx, w, s, h.cfg.Finalizer, needed)
	return err
}

// liveNeedsSecret is reconcileSecret's verdict read from the API server.
func (h *Hold) liveNeedsSecret(ctx context.Context, key types.NamespacedName) (bool, error) {
	list, err := listFactory(h.cfg.Scheme, h.cfg.Parent)
	if err != nil {
		return false, err
	}
	parents, err := list()
	if err != nil {
		return false, err
	}
	if err := h.cfg.Live.List(ctx, parents, client.InNamespace(key.Namespace)); err != nil {
		return false, fmt.Errorf("hold: list %s live: %w", h.cfg.ParentKind, err)
	}
	return h.needsSecret(parents, key.Name, func(p client.Object) (int, error) { return h.liveDependents(ctx, p) })
}

// needsSecret reports whether any of parents that uses the Secret named
// secret needs it: it carries the hold, or (the parent controller holds the
// Secret before the parent) it is alive and dependents counts some.
func (h *Hold) needsSecret(parents client.ObjectList, secret string, dependents func(client.Object) (int, error)) (bool, error) {
	needed := false
	err := forEach(parents, func(p client.Object) error {
		if needed || h.cfg.SecretName(p) != secret {
			return nil
		}
		if hasFinalizer(p, h.cfg.Finalizer) {
			needed = true
			return nil
		}
		if deleting(p) {
			return nil
		}
		n, err := dependents(p)
		needed = err == nil && n > 0
		return err
	})
	return needed, err
}

// liveDependents counts parent's dependents as Dependents does, read from
// the API server (no field index there: the namespace is listed and
// filtered by ParentName).
func (h *Hold) liveDependents(ctx context.Context, parent client.Object) (int, error) {
	n := 0
	parentDeleting := deleting(parent)
	for _, d := range h.dependents {
		list, err := d.newList()
		if err != nil {
			return 0, fmt.Errorf("hold: list %s: %w", d.Kind, err)
		}
		if err := h.cfg.Live.List(ctx, list, client.InNamespace(parent.GetNamespace())); err != nil {
			return 0, fmt.Errorf("hold: list %s live: %w", d.Kind, err)
		}
		err = forEach(list, func(o client.Object) error {
			if d.ParentName(o) != parent.GetName() {
				return nil
			}
			cleaning := hasFinalizer(o, d.CleanupFinalizer)
			if cleaning || (!parentDeleting && !deleting(o)) {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// setActive records whether the parent at key is held while deleting and
// reports whether that changed.
func (h *Hold) setActive(key types.NamespacedName, on bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active[key] == on {
		return false
	}
	if on {
		h.active[key] = true
		activeHolds.WithLabelValues(h.cfg.ParentKind).Inc()
	} else {
		delete(h.active, key)
		activeHolds.WithLabelValues(h.cfg.ParentKind).Dec()
	}
	return true
}

// event emits an Event and logs it: a hold's transitions happen while the
// parent's namespace is terminating, which refuses new Events (a guarded
// recorder, internal/eventrec, sends the important ones elsewhere or drops
// them), so the log is where they are sure to be seen.
func (h *Hold) event(obj client.Object, typ, reason, action, note string, args ...interface{}) {
	logf.Log.WithName("hold").Info(fmt.Sprintf(note, args...), "reason", reason, "kind", kindName(h.cfg.Scheme, obj),
		"namespace", obj.GetNamespace(), "name", obj.GetName())
	if h.cfg.Recorder != nil {
		h.cfg.Recorder.Eventf(obj, nil, typ, reason, action, note, args...)
	}
}
