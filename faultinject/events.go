package faultinject

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// EventFault makes a controller's view stale or incomplete, as Sieve does:
// watch events are delayed before they reach the work queue, or dropped so
// that an intermediate state is never observed. Set the fields before use or
// change them with the setters; safe for concurrent use.
type EventFault struct {
	mu    sync.Mutex // guards delay, drop and dropped
	delay time.Duration
	drop  func(client.Object) bool

	dropped int
}

// SetDelay delays every event by d (0 delivers at once).
func (f *EventFault) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// SetDrop drops events for objects that match (nil drops none).
func (f *EventFault) SetDrop(match func(client.Object) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop = match
}

// Dropped counts the events dropped so far.
func (f *EventFault) Dropped() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

func (f *EventFault) route(obj client.Object) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drop != nil && f.drop(obj) {
		f.dropped++
		return 0, false
	}
	return f.delay, true
}

// Handler wraps an event handler (handler.EnqueueRequestForObject, say)
// with the fault.
func (f *EventFault) Handler(inner handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if d, ok := f.route(e.Object); ok {
				inner.Create(ctx, e, delayed{q, d})
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if d, ok := f.route(e.ObjectNew); ok {
				inner.Update(ctx, e, delayed{q, d})
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if d, ok := f.route(e.Object); ok {
				inner.Delete(ctx, e, delayed{q, d})
			}
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if d, ok := f.route(e.Object); ok {
				inner.Generic(ctx, e, delayed{q, d})
			}
		},
	}
}

// delayed turns the handler's Add into AddAfter.
type delayed struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	d time.Duration
}

func (q delayed) Add(r reconcile.Request) {
	if q.d <= 0 {
		q.TypedRateLimitingInterface.Add(r)
		return
	}
	q.AddAfter(r, q.d)
}
