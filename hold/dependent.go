package hold

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// minRetry keeps a retry scheduled at the hold end from becoming "no
// requeue" (RequeueAfter 0).
const minRetry = time.Millisecond

// SecretHeld reports whether secret, parent's credential Secret as read
// (metadata is enough), carries the hold and is not being deleted: with
// Held(parent), what a dependent confirms live before it creates.
func (h *Hold) SecretHeld(secret client.Object) bool {
	return secret != nil && !deleting(secret) && hasFinalizer(secret, h.cfg.Finalizer)
}

// Held reports whether parent is usable by a dependent that is about to
// create something external: it carries the hold finalizer (so it and its
// Secret will outlive the dependent's cleanup) and is not being deleted.
// A dependent's reconciler creates nothing until Held is true.
func (h *Hold) Held(parent client.Object) bool {
	return parent != nil && !deleting(parent) && hasFinalizer(parent, h.cfg.Finalizer)
}

// DependentDeadline tells a dependent's delete pass how long the hold lasts.
// parent is the dependent's parent, or nil when it is gone.
//
// release is true when the hold is over: the parent is gone, or is being
// deleted and either its hold finalizer is already removed or the hold end
// has passed on the injected clock. The dependent then calls
// ReleaseWithoutDelete instead of deleting.
//
// Otherwise deadline is the hold end (zero while the parent is not being
// deleted: no bound), on the injected clock. The first question about a
// deletion, from here or from the parent's reconciler, is the hold's first
// look at it and starts the hold (Started): a dependent asking before the
// parent's reconciler has seen the deletion (the operator has just come
// back, say) gets Timeout from now, not a hold already over.
func (h *Hold) DependentDeadline(parent client.Object) (deadline time.Time, release bool) {
	if parent == nil {
		return time.Time{}, true
	}
	if !deleting(parent) {
		return time.Time{}, false
	}
	if !hasFinalizer(parent, h.cfg.Finalizer) {
		return time.Time{}, true
	}
	now := h.cfg.Clock.Now()
	end := h.end(parent, now)
	return end, !now.Before(end)
}

// end is the hold end of a deleting parent: Timeout after its start, which
// this call fixes if it is the hold's first look at the deletion.
func (h *Hold) end(parent client.Object, now time.Time) time.Time {
	return h.startOf(parent, now).Add(h.cfg.Timeout)
}

// startOf returns the start of the hold on a deleting parent, fixing it at
// now (clamped by holdStart) on the first look at this deletion. Only the
// deletionTimestamp (the API server's, immutable), the UID and this
// process's clock go in: nothing the parent's users can write, and no write
// that could fail. An operator restart forgets the starts; the next look
// starts the hold again, still never later than MaxStartDelay after the
// deletion, so the bound survives any number of restarts.
func (h *Hold) startOf(parent client.Object, now time.Time) time.Time {
	key := client.ObjectKeyFromObject(parent)
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.starts[key]; ok && s.uid == parent.GetUID() {
		return s.at
	}
	at := holdStart(parent.GetDeletionTimestamp().Time, now, h.cfg.MaxStartDelay)
	h.starts[key] = start{uid: parent.GetUID(), at: at}
	return at
}

// Started reports when the hold on parent, being deleted, started counting
// (its end is that plus Timeout); false when this process has not looked at
// the deletion yet. It is for reports and tests: it starts nothing.
func (h *Hold) Started(parent client.Object) (time.Time, bool) {
	if !deleting(parent) {
		return time.Time{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.starts[client.ObjectKeyFromObject(parent)]
	if !ok || s.uid != parent.GetUID() {
		return time.Time{}, false
	}
	return s.at, true
}

// forget drops the start of the parent at key: it is gone.
func (h *Hold) forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.starts, key)
}

// ShouldReleaseWithoutDelete is DependentDeadline's release answer alone.
func (h *Hold) ShouldReleaseWithoutDelete(parent client.Object) bool {
	_, release := h.DependentDeadline(parent)
	return release
}

// PassContext bounds one delete pass by the hold end, so a slow pass never
// runs past it. The hold end is on the injected clock; the context's timer
// runs on real time for the remaining duration. A pass whose hold is over
// gets an already-cancelled context.
func (h *Hold) PassContext(ctx context.Context, parent client.Object) (context.Context, context.CancelFunc) {
	deadline, release := h.DependentDeadline(parent)
	if release {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx, cancel
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, deadline.Sub(h.cfg.Clock.Now()))
}

// RetryAfter is when a failed delete pass should run again. Call it at the
// END of the pass: the backoff counts from now, not from when the pass
// started, so a slow pass does not eat its own retry interval. It never
// schedules past the hold end, so the pass at the hold end is the one that
// releases.
func (h *Hold) RetryAfter(parent client.Object, backoff time.Duration) time.Duration {
	deadline, release := h.DependentDeadline(parent)
	if release {
		return minRetry
	}
	if deadline.IsZero() {
		return backoff
	}
	left := deadline.Sub(h.cfg.Clock.Now())
	if left < backoff {
		backoff = left
	}
	if backoff < minRetry {
		backoff = minRetry
	}
	return backoff
}

// ReleaseWithoutDelete removes dep's cleanup finalizer without its external
// delete, counts it in finale_released_without_delete_total{kind} and emits
// a Warning Event on dep. The dependent's cleanup record (ledger) must be
// left in place: it is how the sweeper finds what was not deleted.
// parentName is only for the message.
func (h *Hold) ReleaseWithoutDelete(ctx context.Context, w client.Writer, dep client.Object, parentName string) error {
	d, err := h.kindOf(dep)
	if err != nil {
		return err
	}
	changed, err := setFinalizer(ctx, w, dep, d.CleanupFinalizer, false)
	if err != nil {
		return err
	}
	if changed {
		releasedWithoutDeleteTotal.WithLabelValues(d.Kind).Inc()
		h.event(dep, corev1.EventTypeWarning, ReasonReleasedWithoutDelete, actionRelease, noteReleasedWithoutDelete, h.cfg.ParentKind, parentName)
	}
	return nil
}

func (h *Hold) kindOf(obj client.Object) (dependentKind, error) {
	gvk, err := apiutil.GVKForObject(obj, h.cfg.Scheme)
	if err != nil {
		return dependentKind{}, fmt.Errorf("hold: kind of %T: %w", obj, err)
	}
	for _, d := range h.dependents {
		if dg, err := apiutil.GVKForObject(d.Object, h.cfg.Scheme); err == nil && sameKind(dg, gvk) {
			return d, nil
		}
	}
	return dependentKind{}, fmt.Errorf("hold: %s is not a configured dependent kind of %s", gvk.Kind, h.cfg.ParentKind)
}

func sameKind(a, b schema.GroupVersionKind) bool { return a.Group == b.Group && a.Kind == b.Kind }
