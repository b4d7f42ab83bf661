package hold

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// podsWait is how soon a terminating namespace that still has Pods is
// looked at again. Kubernetes deletes a namespace's Pods before the rest
// of its content and waits for them to be gone; the hold waits the same.
const podsWait = 2 * time.Second

// namespaceMeta is an empty Namespace in metadata-only form: the hold needs
// only its UID and deletionTimestamp.
func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// NamespaceReconciler starts the deletion of a terminating namespace's
// dependents, of every kind in Config.Dependents, once the namespace has
// no Pods left. Kubernetes' namespace controller deletes them too, but
// only after a grace period and in an order of its own, and it lets the
// namespace go only in a pass that finds nothing left. The hold keeps the
// parent until its dependents' cleanup is done, so a pass that comes to
// the parent before then finds it, and the namespace waits for the next
// pass (seconds later). Deleting the dependents as soon as the namespace
// terminates lets their cleanup, through the parent still held, run
// during the namespace controller's first pass instead of after it.
//
// Only what the namespace's deletion already dooms is deleted: the
// namespace is read live (a cached Namespace may be a deleted one whose
// name now belongs to a new namespace), a dependent created after the
// namespace's deletion began is left to the namespace controller, and
// each delete names the dependent's UID. Without the RBAC to list Pods or
// to delete a dependent kind, the hold deletes nothing more and the
// namespace controller deletes the rest, later. r lists dependents (a
// manager's cache); live reads from the API server itself; w deletes.
func (h *Hold) NamespaceReconciler(r, live client.Reader, w client.Writer) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := h.startDeletions(ctx, r, live, w, req.Name)
		if apierrors.IsForbidden(err) {
			logf.FromContext(ctx).Info(noteNoEarlyDelete, "namespace", req.Name, "reason", err.Error())
			return reconcile.Result{}, nil
		}
		return res, err
	})
}

// startDeletions is NamespaceReconciler's pass over the namespace name.
func (h *Hold) startDeletions(ctx context.Context, r, live client.Reader, w client.Writer, name string) (reconcile.Result, error) {
	ns := namespaceMeta()
	if err := live.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil || !deleting(ns) {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := live.List(ctx, pods, client.InNamespace(name), client.Limit(1)); err != nil {
		return reconcile.Result{}, fmt.Errorf("hold: list Pods in terminating namespace %s: %w", name, err)
	}
	if len(pods.Items) > 0 {
		return reconcile.Result{RequeueAfter: podsWait}, nil
	}
	deleted := ns.GetDeletionTimestamp().Time
	for _, d := range h.dependents {
		list, err := d.newList()
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("hold: list %s: %w", d.Kind, err)
		}
		if err := r.List(ctx, list, client.InNamespace(name), client.UnsafeDisableDeepCopy); err != nil {
			return reconcile.Result{}, fmt.Errorf("hold: list %s in terminating namespace %s: %w", d.Kind, name, err)
		}
		err = forEach(list, func(o client.Object) error {
			if !doomed(deleted, o) {
				return nil
			}
			return deleteByUID(ctx, w, d, o)
		})
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// deleteByUID deletes the dependent o of kind d only if it is still the
// object of o's UID; gone already, or another object under its name, is
// not an error.
func deleteByUID(ctx context.Context, w client.Writer, d dependentKind, o client.Object) error {
	obj := newObject(d.Object)
	obj.SetNamespace(o.GetNamespace())
	obj.SetName(o.GetName())
	uid := o.GetUID()
	err := w.Delete(ctx, obj, client.Preconditions{UID: &uid})
	switch {
	case err == nil:
		earlyDeletesTotal.WithLabelValues(d.Kind).Inc()
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	}
	return fmt.Errorf("hold: delete %s %s/%s in terminating namespace: %w", d.Kind, o.GetNamespace(), o.GetName(), err)
}

// noteNoEarlyDelete is logged when RBAC keeps the hold from starting a
// terminating namespace's deletions itself.
const noteNoEarlyDelete = "hold: not allowed to start the deletion of a terminating namespace's dependents; the namespace controller will, later"

// doomed says whether o is doomed by a namespace deletion that began at
// deleted and nobody has deleted it yet: created no later than that (an
// object created after is in a namespace created after, under the same
// name) and not being deleted.
func doomed(deleted time.Time, o client.Object) bool {
	return !deleting(o) && !o.GetCreationTimestamp().After(deleted)
}
