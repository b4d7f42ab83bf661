package capture

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ownerUIDIndex indexes children by the UID of their owner of the owner kind.
const ownerUIDIndex = "capture.finale.dev/owner-uid"

// claimedRetry is when a child that a sibling's pass was releasing is looked
// at again (usually to find it released).
const claimedRetry = time.Second

// heldError says why a finalizer stays; the watchdog sees it as the attempt's
// error.
// pendingEntry is one held capture of a child being deleted.
type pendingEntry struct {
	uid types.UID
	// warned: the overdue Warning Event was emitted (once per process).
	warned bool
}

type heldError struct{ reason Reason }

func (e heldError) Error() string { return "capture: finalizer held: " + string(e.reason) }

// SetupWithManager registers the release controller on the children. It runs
// on the manager's workers for children only, so it keeps releasing (and
// persisting) while the owner's own controller is stopped or lagging.
// Owner changes requeue the owner's children, so a result recorded, an owner
// finished or deleted, releases promptly. A namespace that starts
// terminating requeues its children being deleted (ReasonNamespaceTerminating):
// the release controller watches Namespaces' metadata, so its identity needs
// get, list and watch on namespaces.
func (r *Releaser[O]) SetupWithManager(mgr ctrl.Manager) error {
	r.cache = mgr.GetClient()
	r.indexed = true
	kind := r.opts.OwnerKind
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), r.opts.NewChild(), r.indexName(), func(o client.Object) []string {
		if ref := ownerRef(o, kind); ref != nil {
			return []string{string(ref.UID)}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("capture: index children by owner UID: %w", err)
	}
	fin := r.opts.Finalizer
	carries := func(o client.Object) bool { return controllerutil.ContainsFinalizer(o, fin) }
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.opts.Name).
		For(r.opts.NewChild(), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(e event.CreateEvent) bool { return carries(e.Object) },
			UpdateFunc: func(e event.UpdateEvent) bool { return carries(e.ObjectOld) || carries(e.ObjectNew) },
			DeleteFunc: func(e event.DeleteEvent) bool {
				return carries(e.Object) || r.knows(client.ObjectKeyFromObject(e.Object))
			},
			GenericFunc: func(e event.GenericEvent) bool { return carries(e.Object) },
		})).
		Watches(r.opts.NewOwner(), handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueueChildren(ctx, e.Object, true, q)
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueueChildren(ctx, e.ObjectNew, true, q)
			},
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueueChildren(ctx, e.Object, false, q)
			},
			GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueueChildren(ctx, e.Object, false, q)
			},
		}).
		// A child held before its namespace started terminating gets no
		// event of its own when the namespace controller deletes it again.
		Watches(namespaceMeta(), handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueueTerminating(ctx, e.Object, q)
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if e.ObjectOld.GetDeletionTimestamp() == nil {
					r.enqueueTerminating(ctx, e.ObjectNew, q)
				}
			},
			GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.enqueueTerminating(ctx, e.Object, q)
			},
		}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		Complete(r)
}

// enqueueChildren queues the owner's children that carry the finalizer.
// With onlyReleasable, only those that the owner as this event shows would
// release (recorded, finished, deleting): an owner that records one result
// among N children, or writes anything else, costs no pass over the N, each
// a live read of the owner. That is safe because every change of the owner
// arrives as an event carrying it, and each pass decides on a live read
// anyway; a deleted owner queues all of its children.
func (r *Releaser[O]) enqueueChildren(ctx context.Context, owner client.Object, onlyReleasable bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	list := r.opts.NewChildList()
	// Read only: no deep copy of every child for every owner event.
	if err := r.cache.List(ctx, list, client.InNamespace(owner.GetNamespace()), client.MatchingFields{r.indexName(): string(owner.GetUID())}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "capture: list children of owner", "owner", client.ObjectKeyFromObject(owner))
		return
	}
	typed, isO := owner.(O)
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		o, ok := obj.(client.Object)
		if !ok || !controllerutil.ContainsFinalizer(o, r.opts.Finalizer) {
			return nil
		}
		if onlyReleasable && isO && r.verdict(r.factsOf(o, typed, true)).Action != Release {
			return nil
		}
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		return nil
	})
}

// namespaceMeta is the Namespace metadata the release controller watches
// (the deletion timestamp is all it reads from the cache; the decision
// itself reads the namespace live).
func namespaceMeta() *metav1.PartialObjectMetadata {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns
}

// enqueueTerminating queues the children being deleted that carry the
// finalizer in ns, when ns is terminating. Those not deleted yet need no
// queueing: the namespace controller deletes them, which is an event.
func (r *Releaser[O]) enqueueTerminating(ctx context.Context, ns client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if ns.GetDeletionTimestamp() == nil {
		return
	}
	list := r.opts.NewChildList()
	if err := r.cache.List(ctx, list, client.InNamespace(ns.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "capture: list children in a terminating namespace", "namespace", ns.GetName())
		return
	}
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		if o, ok := obj.(client.Object); ok && o.GetDeletionTimestamp() != nil && controllerutil.ContainsFinalizer(o, r.opts.Finalizer) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
		return nil
	})
}

// Reconcile applies Release to one child and keeps the pending bookkeeping.
func (r *Releaser[O]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	child := r.opts.NewChild()
	if err := r.cache.Get(ctx, req.NamespacedName, child); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetByName(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(child, r.opts.Finalizer) || r.staleAfterRelease(child) {
		r.forget(child)
		return reconcile.Result{}, nil
	}
	// A sibling's pass may be releasing this child right now: look again
	// shortly rather than patch it twice.
	if !r.claim(req.NamespacedName) {
		return reconcile.Result{RequeueAfter: claimedRetry}, nil
	}
	d, err := r.Release(ctx, child)
	r.unclaim(req.NamespacedName)
	deleting := child.GetDeletionTimestamp() != nil
	if err != nil {
		if deleting && r.opts.Watchdog != nil {
			r.opts.Watchdog.Attempt(ctx, child, r.opts.Finalizer, err)
		}
		// The finalizer stays; controller-runtime retries with backoff.
		return reconcile.Result{}, err
	}
	if d.Action == Release || d.Action == "" {
		r.forget(child)
		if d.Action == Release && deleting && r.opts.Watchdog != nil {
			r.opts.Watchdog.Done(ctx, child, r.opts.Finalizer)
		}
		return reconcile.Result{}, nil
	}
	if !deleting {
		return reconcile.Result{}, nil
	}
	if r.opts.Watchdog != nil {
		r.opts.Watchdog.Attempt(ctx, child, r.opts.Finalizer, heldError{reason: d.Reason})
	}
	return reconcile.Result{RequeueAfter: r.observePending(ctx, child, d)}, nil
}

// observePending records a held capture of a child being deleted and, once
// it is older than the threshold, emits one Warning Event. It returns when
// to look again so the Warning is not late; age never releases anything.
func (r *Releaser[O]) observePending(ctx context.Context, child client.Object, d Decision) time.Duration {
	age := r.opts.Clock.Since(child.GetDeletionTimestamp().Time)
	overdue := age >= r.opts.PendingThreshold
	r.mu.Lock()
	key := client.ObjectKeyFromObject(child)
	e, ok := r.pending[key]
	if ok && e.uid != child.GetUID() {
		e = pendingEntry{} // another object of the same name
	}
	warn := overdue && !e.warned
	r.pending[key] = pendingEntry{uid: child.GetUID(), warned: e.warned || overdue}
	r.updateGaugesLocked()
	r.mu.Unlock()
	if warn {
		owner := ""
		if ref := ownerRef(child, r.opts.OwnerKind); ref != nil {
			owner = ref.Name
		}
		r.event(child, corev1.EventTypeWarning, EventReasonPending, messagePending, r.opts.Finalizer, age.Round(time.Second), child.GetNamespace(), owner, d.Reason)
		ctrl.LoggerFrom(ctx).Info("capture pending past threshold", "child", client.ObjectKeyFromObject(child), "age", age, "reason", d.Reason)
	}
	if overdue {
		return 0
	}
	return r.opts.PendingThreshold - age
}

// staleAfterRelease reports whether child is the very version this process
// removed the finalizer from, seen again through a cache that has not caught
// up: patching it would only fail.
func (r *Releaser[O]) staleAfterRelease(child client.Object) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := client.ObjectKeyFromObject(child)
	e, ok := r.releasedFrom[key]
	if !ok {
		return false
	}
	if e.uid == child.GetUID() && e.rv == child.GetResourceVersion() {
		return true
	}
	delete(r.releasedFrom, key)
	return false
}

func (r *Releaser[O]) forget(child client.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := client.ObjectKeyFromObject(child)
	if e, ok := r.pending[key]; ok && e.uid == child.GetUID() {
		delete(r.pending, key)
		r.updateGaugesLocked()
	}
}

// forgetByName drops what is known about a child that is gone.
func (r *Releaser[O]) forgetByName(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.releasedFrom, key)
	delete(r.byUs, key)
	if _, ok := r.pending[key]; ok {
		delete(r.pending, key)
		r.updateGaugesLocked()
	}
}

// knows reports whether anything is kept about the child of that name, so
// that its delete event is not filtered out and the entry is dropped.
func (r *Releaser[O]) knows(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, p := r.pending[key]
	_, rel := r.releasedFrom[key]
	_, mine := r.byUs[key]
	return p || rel || mine
}

func (r *Releaser[O]) updateGaugesLocked() {
	overdue := 0
	for _, e := range r.pending {
		if e.warned {
			overdue++
		}
	}
	pendingGauge.WithLabelValues(r.opts.Name).Set(float64(len(r.pending)))
	overdueGauge.WithLabelValues(r.opts.Name).Set(float64(overdue))
}
