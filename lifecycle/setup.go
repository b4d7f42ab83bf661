package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// DefaultWorkers is SetupOptions.Workers when unset.
const DefaultWorkers = 4

// SetupOptions tune SetupWithManager. The zero value is usable.
type SetupOptions struct {
	// Name is the controller's name; "" is the lower-case kind.
	Name string
	// Workers bounds concurrent reconciles; zero is DefaultWorkers.
	Workers int
	// RateLimiter spaces the retries of failed reconciles per object; nil
	// is DefaultRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// SkipNameValidation lets several managers in one process register the
	// same name (tests).
	SkipNameValidation bool
	// WrapReconciler, when set, wraps the reconciler (a harness pausing
	// this controller's workers, say). It must return a non-nil one.
	WrapReconciler func(reconcile.Reconciler) reconcile.Reconciler
	// WrapEventHandler, when set, wraps the handler of the kind's own
	// watch (a harness delaying its events). It must return a non-nil one.
	WrapEventHandler func(handler.EventHandler) handler.EventHandler
	// Extend, when set, adds watches of the adopter's own to the
	// controller's builder (b.Owns(&corev1.Secret{}) for Secrets the kind
	// generates, say) and returns it.
	Extend func(b *builder.Builder) *builder.Builder
}

// DefaultRateLimiter is the retry spacing of failed reconciles: per object,
// one second doubling to five minutes, and at most 10 retries a second
// (bursts of 100) overall. controller-runtime's own default starts at 5 ms,
// which lets a hundred dependents of a server that is down, or that
// refuses their credentials, try a thousand logins in seconds.
func DefaultRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// SetupWithManager registers the reconciler with mgr, with every watch its
// guarantees need: the kind itself; with a Hold, the hold's own
// controllers (once, whichever kind registers first), the parent kind
// (a parent that appears, becomes held or changes wakes its dependents at
// once instead of at their next retry) and the parent's credential Secret
// (metadata only: a Secret that appears or changes wakes the dependents of
// every parent naming it). The start of a parent's or Secret's deletion
// alone wakes no dependent (wakesDependents).
func (r *Reconciler[O, K, C]) SetupWithManager(mgr ctrl.Manager, o SetupOptions) error {
	if o.Name == "" {
		o.Name = strings.ToLower(r.gvk.kind)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Workers < 0 {
		return fmt.Errorf("%w: SetupOptions.Workers %d is negative", ErrConfig, o.Workers)
	}
	if o.RateLimiter == nil {
		o.RateLimiter = DefaultRateLimiter()
	}
	copts := controller.Options{MaxConcurrentReconciles: o.Workers, RateLimiter: o.RateLimiter}
	if o.SkipNameValidation {
		copts.SkipNameValidation = &o.SkipNameValidation
	}
	b := ctrl.NewControllerManagedBy(mgr).Named(o.Name).WithOptions(copts)
	if o.WrapEventHandler == nil {
		b = b.For(r.newObj())
	} else {
		b = b.Watches(r.newObj(), o.WrapEventHandler(&handler.EnqueueRequestForObject{}))
	}
	if h := r.o.Hold; h != nil {
		if err := h.SetupWithManager(mgr); err != nil {
			return err
		}
		list, err := listOf(r.o.Scheme, r.newObj())
		if err != nil {
			return err
		}
		parentList, err := listOf(r.o.Scheme, h.Parent())
		if err != nil {
			return err
		}
		rd := mgr.GetClient()
		wakes := builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return wakesDependents(e.ObjectOld, e.ObjectNew) }})
		b = b.Watches(h.Parent(), handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, p client.Object) []reconcile.Request {
			return r.dependents(ctx, rd, list, p.GetNamespace(), p.GetName())
		}), wakes)
		secret := &corev1.Secret{}
		b = b.WatchesMetadata(secret, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, s client.Object) []reconcile.Request {
			parents := parentList()
			if err := rd.List(ctx, parents, client.InNamespace(s.GetNamespace()), client.MatchingFields{hold.SecretIndex: s.GetName()}); err != nil {
				return nil
			}
			var out []reconcile.Request
			for _, p := range items(parents) {
				out = append(out, r.dependents(ctx, rd, list, p.GetNamespace(), p.GetName())...)
			}
			return out
		}), wakes)
	}
	if o.Extend != nil {
		b = o.Extend(b)
	}
	var rec reconcile.Reconciler = r
	if o.WrapReconciler != nil {
		rec = o.WrapReconciler(rec)
	}
	if err := b.Complete(rec); err != nil {
		return fmt.Errorf("lifecycle: %s controller: %w", o.Name, err)
	}
	return nil
}

// wakesDependents reports whether an update of a parent or of its
// credential Secret wakes the parent's dependents. Every update does but
// the one a delete makes of an object with finalizers: it sets the
// deletionTimestamp (and bumps a custom resource's generation) and changes
// nothing a dependent reads (a delete cannot change the spec, and the
// finalizers, and with them the hold, are as they were). A
// dependent not being deleted has nothing to do then (it creates nothing
// through a parent that is not Held, and what it has is cleaned up when it
// is deleted itself); one being deleted retries on its own backoff, which
// the hold bounds (Hold.RetryAfter), and the hold's end is a finalizer
// change, which wakes it. A namespace deletion starts the deletion of the
// parent and its Secret while their dependents are still Ready: waking
// them all twice sent each one through an observe of its external
// resource, on the parent's one connection, ahead of its own deletion.
func wakesDependents(old, updated client.Object) bool {
	started := old.GetDeletionTimestamp().IsZero() && !updated.GetDeletionTimestamp().IsZero()
	return !started || !slices.Equal(old.GetFinalizers(), updated.GetFinalizers())
}

// listOf returns a function making an empty list of obj's kind.
func listOf(s *runtime.Scheme, obj client.Object) (func() client.ObjectList, error) {
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	gvk.Kind += "List"
	if _, err := s.New(gvk); err != nil {
		return nil, fmt.Errorf("%w: the scheme has no %s: %w", ErrConfig, gvk.Kind, err)
	}
	return func() client.ObjectList {
		o, _ := s.New(gvk) // checked above
		return o.(client.ObjectList)
	}, nil
}

func items(l client.ObjectList) []client.Object {
	var out []client.Object
	_ = meta.EachListItem(l, func(o runtime.Object) error { // the callback never fails
		if co, ok := o.(client.Object); ok {
			out = append(out, co)
		}
		return nil
	})
	return out
}

// dependents are the objects of this kind that reference the parent
// namespace/name, found by the hold's field index.
func (r *Reconciler[O, K, C]) dependents(ctx context.Context, rd client.Reader, list func() client.ObjectList, ns, parent string) []reconcile.Request {
	l := list()
	if err := rd.List(ctx, l, client.InNamespace(ns), client.MatchingFields{hold.ParentIndex: parent}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, o := range items(l) {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
	}
	return out
}

// Designated lists the connection objects an admin designated for
// sweeping (those in the operator's own namespace, say, where tenants
// cannot create any).
type Designated func(ctx context.Context) ([]client.Object, error)

// SweepTargets gives the sweeper, for a record of this kind, the
// connections it may use, in this order: the connection object the record
// names (ledger.Record.Via), read live, if it still exists with the
// recorded UID; then designated ones (nil: none). Never any other
// connection, however well it proves the deployment: a tenant's connection
// to a copy of the deployment proves it too. It needs the adapter's
// ParentConnector (AdapterFuncs: ConnectParentFn) and the Hold (for the
// parent kind). Each connection's Authentication is the adapter's
// Authenticator's word on its key; an adapter without one offers only
// unauthenticated connections, which the sweeper never uses.
func (r *Reconciler[O, K, C]) SweepTargets(designated Designated) (sweep.Targets, error) {
	if r.o.Hold == nil {
		return nil, fmt.Errorf("%w: SweepTargets needs the Hold, which names the parent kind", ErrConfig)
	}
	return r.sweepTargets(designated, r.o.Hold.Parent)
}

// sweepTargets is SweepTargets with the parent kind made by newParent.
func (r *Reconciler[O, K, C]) sweepTargets(designated Designated, newParent func() client.Object) (sweep.Targets, error) {
	pc, ok := parentConnector[K](r.adapter)
	if !ok {
		return nil, fmt.Errorf("%w: sweeping needs an adapter that implements ParentConnector (ConnectParent; with AdapterFuncs, ConnectParentFn): the sweeper has only the parent to connect from", ErrConfig)
	}
	return sweep.TargetsFn(func(ctx context.Context, rec *ledger.Record) ([]sweep.Candidate, error) {
		var out []sweep.Candidate
		seen := map[types.UID]bool{}
		if v := rec.Via; v != nil {
			p := newParent()
			err := r.o.APIReader.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.Name}, p)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("lifecycle: read the record's connection %s: %w", v, err)
			case p.GetUID() == v.UID && kindOf(p, r.o.Scheme) == v.Kind:
				c, err := r.candidate(ctx, pc, p, "the record's connection")
				if err != nil {
					return nil, err
				}
				out = append(out, c)
				seen[p.GetUID()] = true
			}
		}
		if designated == nil {
			return out, nil
		}
		ds, err := designated(ctx)
		if err != nil {
			return out, fmt.Errorf("lifecycle: list designated sweep connections: %w", err)
		}
		// In name order, so that every pass tries them alike: the sweeper
		// stops at the first connection that fails other than by not
		// proving the deployment, and a cache lists in no set order.
		sort.Slice(ds, func(i, j int) bool {
			return ds[i].GetNamespace()+"/"+ds[i].GetName() < ds[j].GetNamespace()+"/"+ds[j].GetName()
		})
		for _, p := range ds {
			if seen[p.GetUID()] {
				continue
			}
			c, err := r.candidate(ctx, pc, p, "designated")
			if err != nil {
				continue // a designated connection without credentials is no candidate
			}
			out = append(out, c)
		}
		return out, nil
	}), nil
}

func (r *Reconciler[O, K, C]) candidate(ctx context.Context, pc ParentConnector[K], p client.Object, role string) (sweep.Candidate, error) {
	key, err := pc.ConnectParent(ctx, p)
	if err != nil {
		return sweep.Candidate{}, fmt.Errorf("lifecycle: connect through %s %s/%s: %w", kindOf(p, r.o.Scheme), p.GetNamespace(), p.GetName(), err)
	}
	name := fmt.Sprintf("%s %s %s/%s (uid %s)", role, kindOf(p, r.o.Scheme), p.GetNamespace(), p.GetName(), p.GetUID())
	c := sweep.Candidate{Name: name, Target: r.remote(key)}
	if a, ok := r.adapter.(Authenticator[K]); ok {
		c.Authentication = a.Authentication(key)
	}
	return c, nil
}
