package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
)

// secretWake puts the Role that controls a Secret into the Role
// controller's queue when that Secret is created, changed or deleted, so a
// deleted or edited generated password is applied at once rather than at
// the Role's next reconcile for another reason (which, for a Ready Role,
// may be never). It is what Owns(&corev1.Secret{}) would be on the Role
// controller's builder.
//
// lifecycle.SetupWithManager builds that controller and offers no option
// for another watch, so the queue is taken from the Role controller's own
// event handler (SetupOptions.WrapEventHandler), which controller-runtime
// calls with the controller's queue on every Role event. Until the first
// Role event no queue is known and Secret events are dropped; that loses
// nothing, because every Role's first event (its creation, or the initial
// list at start) reconciles it, and the reconcile reads the Secret.
type secretWake struct {
	mu sync.Mutex
	// q is the Role controller's queue, once seen; guarded by mu.
	q workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// capture wraps the Role controller's primary event handler (after inner,
// the harness's wrapper, if any) so that it records the queue it is given.
func (w *secretWake) capture(inner func(handler.EventHandler) handler.EventHandler) func(handler.EventHandler) handler.EventHandler {
	return func(h handler.EventHandler) handler.EventHandler {
		var out handler.EventHandler = queueTap{w: w, h: h}
		if inner != nil {
			out = inner(out)
		}
		return out
	}
}

func (w *secretWake) seen(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	w.mu.Lock()
	w.q = q
	w.mu.Unlock()
}

// enqueue adds the Role that controls obj, if any and if the queue is known.
func (w *secretWake) enqueue(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	req, ok := controllingRole(s)
	if !ok {
		return
	}
	w.mu.Lock()
	q := w.q
	w.mu.Unlock()
	if q != nil {
		q.Add(req)
	}
}

// controllingRole is the Role that controls s, as its controller reference
// names it.
func controllingRole(s metav1.Object) (reconcile.Request, bool) {
	ref := metav1.GetControllerOf(s)
	if ref == nil || ref.Kind != "Role" {
		return reconcile.Request{}, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != v1alpha1.GroupVersion.Group {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.GetNamespace(), Name: ref.Name}}, true
}

// runnable registers the Secret handler on the manager's Secret informer
// (the one the operator's cached reads of Secrets use) once the manager
// starts, and removes it when it stops.
func (w *secretWake) runnable(c cache.Cache) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		inf, err := c.GetInformer(ctx, &corev1.Secret{})
		if err != nil {
			return fmt.Errorf("watch generated password Secrets: %w", err)
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    w.enqueue,
			UpdateFunc: func(_, obj any) { w.enqueue(obj) },
			DeleteFunc: w.enqueue,
		})
		if err != nil {
			return fmt.Errorf("watch generated password Secrets: %w", err)
		}
		<-ctx.Done()
		_ = inf.RemoveEventHandler(reg) // the manager is stopping; nothing to tell
		return nil
	})
}

// queueTap passes every event on to h, noting the queue it came with.
type queueTap struct {
	w *secretWake
	h handler.EventHandler
}

var _ handler.EventHandler = queueTap{}

func (t queueTap) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.w.seen(q)
	t.h.Create(ctx, e, q)
}

func (t queueTap) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.w.seen(q)
	t.h.Update(ctx, e, q)
}

func (t queueTap) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.w.seen(q)
	t.h.Delete(ctx, e, q)
}

func (t queueTap) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.w.seen(q)
	t.h.Generic(ctx, e, q)
}
