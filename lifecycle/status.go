package lifecycle

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
)

// DeletionPolicy says what happens to the external resource when its object
// is deleted. It matches the field Spec.DeletionPolicy of a managed kind (a
// string, a string type, or a pointer to either), and travels with the
// cleanup record, so the sweeper honours it too.
type DeletionPolicy = ledger.Policy

// Deletion policies.
const (
	// PolicyDelete deletes the external resource, then lets the object go.
	PolicyDelete = ledger.PolicyDelete
	// PolicyRetain lets the object go and leaves the external resource (and
	// its ownership tag), and removes the cleanup record; the sweeper never
	// deletes a Retain owner's resources either.
	PolicyRetain = ledger.PolicyRetain
)

// statusFields are pointers into a managed object's status. The reconciler
// finds them by convention (Status.Conditions []metav1.Condition,
// Status.ObservedGeneration int64, Spec.DeletionPolicy string), the layout
// kubebuilder projects use, so that an adapter needs no accessors.
type statusFields struct {
	conditions *[]metav1.Condition
	observed   *int64
	policy     *reflect.Value
}

var conditionsType = reflect.TypeFor[[]metav1.Condition]()

// fieldsOf checks the convention on obj; a kind that does not follow it is
// a programming error reported at construction (see New).
func fieldsOf(obj client.Object) (statusFields, error) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return statusFields{}, fmt.Errorf("lifecycle: %T is not a pointer to a struct", obj)
	}
	v = v.Elem()
	st := v.FieldByName("Status")
	if !st.IsValid() || st.Kind() != reflect.Struct {
		return statusFields{}, fmt.Errorf("lifecycle: %T has no Status struct field; a managed kind needs Status.Conditions and Status.ObservedGeneration", obj)
	}
	conds := st.FieldByName("Conditions")
	if !conds.IsValid() || conds.Type() != conditionsType {
		return statusFields{}, fmt.Errorf("lifecycle: %T.Status has no Conditions []metav1.Condition field", obj)
	}
	gen := st.FieldByName("ObservedGeneration")
	if !gen.IsValid() || gen.Kind() != reflect.Int64 {
		return statusFields{}, fmt.Errorf("lifecycle: %T.Status has no ObservedGeneration int64 field", obj)
	}
	f := statusFields{
		conditions: conds.Addr().Interface().(*[]metav1.Condition),
		observed:   gen.Addr().Interface().(*int64),
	}
	if spec := v.FieldByName("Spec"); spec.IsValid() && spec.Kind() == reflect.Struct {
		if p := spec.FieldByName("DeletionPolicy"); p.IsValid() {
			k := p.Kind()
			if k == reflect.Pointer {
				k = p.Type().Elem().Kind()
			}
			if k != reflect.String {
				return statusFields{}, fmt.Errorf("lifecycle: %T.Spec.DeletionPolicy is a %s; it must be a string, a string type or a pointer to one", obj, p.Type())
			}
			f.policy = &p
		}
	}
	return f, nil
}

// policyOf is obj's deletion policy; def when the kind has no such field or
// it is empty or nil (the API server normally defaults it).
func policyOf(f statusFields, def DeletionPolicy) DeletionPolicy {
	if f.policy == nil {
		return def
	}
	v := *f.policy
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return def
		}
		v = v.Elem()
	}
	if v.String() == "" {
		return def
	}
	return DeletionPolicy(v.String())
}

// policy is obj's deletion policy.
func (r *Reconciler[O, K, C]) policy(obj O) DeletionPolicy {
	f, _ := fieldsOf(obj) // checked in New
	return policyOf(f, r.o.DefaultPolicy)
}

// status collects condition changes during one reconcile and writes them
// in one patch, with an Event per transition (a changed status or reason),
// never per reconcile.
type status[O client.Object, K comparable, C any] struct {
	r    *Reconciler[O, K, C]
	obj  O
	base client.Object
	f    statusFields
	// before are the conditions as read, to tell transitions from the
	// states a reconcile passes through on its way.
	before []metav1.Condition
	// discarded: this reconcile's changes are not worth a write.
	discarded bool
	// changed are the types of the conditions this reconcile set, to set
	// again on a fresh copy when the patch meets a concurrent writer.
	changed []string
}

func newStatus[O client.Object, K comparable, C any](r *Reconciler[O, K, C], obj O) *status[O, K, C] {
	f, _ := fieldsOf(obj) // checked in New
	s := &status[O, K, C]{r: r, obj: obj, base: obj.DeepCopyObject().(client.Object), f: f}
	for _, c := range *f.conditions {
		s.before = append(s.before, *c.DeepCopy())
	}
	return s
}

func (s *status[O, K, C]) get(t string) *metav1.Condition {
	return meta.FindStatusCondition(*s.f.conditions, t)
}

func (s *status[O, K, C]) synced(ok bool, reason, msg string, args ...any) {
	s.set(ConditionSynced, ok, reason, msg, args...)
}

func (s *status[O, K, C]) ready(ok bool, reason, msg string, args ...any) {
	s.set(ConditionReady, ok, reason, msg, args...)
}

func (s *status[O, K, C]) set(t string, ok bool, reason, msg string, args ...any) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	if len(args) > 0 {
		msg = fmt.Sprintf(msg, args...)
	}
	c := metav1.Condition{
		Type: t, Status: st, Reason: reason, Message: msg,
		ObservedGeneration: s.obj.GetGeneration(),
		LastTransitionTime: metav1.NewTime(s.r.o.Clock.Now()),
	}
	meta.SetStatusCondition(s.f.conditions, c)
	*s.f.observed = s.obj.GetGeneration()
	if !slices.Contains(s.changed, t) {
		s.changed = append(s.changed, t)
	}
}

// needsActionMessage is what a NeedsAction puts in the Synced condition:
// its Action, or when it has none the text of its Err, which the adapter
// wrote for the object's users. Never the chain around it: a NeedsAction
// returned by a dial comes back wrapped by the pool ("clientpool NAME:
// dial KEY: ...", the key naming the server's address), and a caller's
// wrapping says what the operator was doing, not what the user must do.
// The whole error goes to the operator's log.
func needsActionMessage(na *NeedsAction) string {
	switch {
	case na.Action != "":
		return na.Action
	case na.Err != nil:
		return na.Err.Error()
	}
	return messageNeedsActionNone
}

// quiet are the reasons of states an object passes through on its way, not
// failures.
var quiet = map[string]bool{ReasonCreating: true, ReasonDeleting: true}

// statusRetries bounds flush's re-reads after conflicts: the status has few
// writers (this reconciler and the watchdog), so more means the caller
// should requeue.
const statusRetries = 3

// discard drops the changes made so far and makes flush write nothing.
func (s *status[O, K, C]) discard() { s.discarded = true }

// flush patches the status if anything changed and announces transitions.
func (s *status[O, K, C]) flush(ctx context.Context) error {
	if s.discarded || reflect.DeepEqual(s.base, client.Object(s.obj)) {
		return nil
	}
	// An empty patch is no change at all (Cluster API's patch helper skips
	// it too): nothing to write, nothing to announce.
	if data, err := client.MergeFrom(s.base).Data(s.obj); err == nil && string(data) == "{}" {
		return nil
	}
	// The conditions list is replaced whole by a merge patch, so the patch
	// is conditional on the version read: another writer's condition (the
	// watchdog's CleanupBlocked, say) is never dropped by a stale copy.
	// After a conflict this reconcile's conditions are set again on a
	// fresh read.
	obj, base := client.Object(s.obj), s.base
	for attempt := 0; ; attempt++ {
		err := s.r.c.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			break
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == statusRetries {
			return fmt.Errorf("lifecycle: patch status: %w", err)
		}
		fresh, ok, err := s.readLive(ctx)
		if err != nil || !ok {
			return err
		}
		obj, base = fresh, fresh.DeepCopyObject().(client.Object)
		if err := s.copyConditions(fresh); err != nil {
			return err
		}
	}
	s.r.supersede(obj, base.GetResourceVersion())
	s.base = s.obj.DeepCopyObject().(client.Object)
	// One Warning Event per transition into a failure (a condition's
	// status or reason differs from what was read): a transition, never a
	// repeat, never an intermediate state. Transitions to True are not
	// evented: the Created (or Adopted) Event already says it, and each
	// Event is an API write.
	for _, t := range []string{ConditionSynced, ConditionReady} {
		c, old := s.get(t), meta.FindStatusCondition(s.before, t)
		if c == nil || c.Status == metav1.ConditionTrue || quiet[c.Reason] || (old != nil && old.Status == c.Status && old.Reason == c.Reason) {
			continue
		}
		s.r.event(s.obj, corev1.EventTypeWarning, c.Reason, actionReconcile, "%s=%s: %s", c.Type, c.Status, c.Message)
	}
	s.before = nil
	for _, c := range *s.f.conditions {
		s.before = append(s.before, *c.DeepCopy())
	}
	return nil
}

// readLive reads the object live; ok is false when it is gone (or is
// another object of the same name).
func (s *status[O, K, C]) readLive(ctx context.Context) (O, bool, error) {
	fresh := s.r.newObj()
	if err := s.r.o.APIReader.Get(ctx, client.ObjectKeyFromObject(s.obj), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return fresh, false, nil
		}
		return fresh, false, fmt.Errorf("lifecycle: read %s after a status conflict: %w", client.ObjectKeyFromObject(s.obj), err)
	}
	return fresh, fresh.GetUID() == s.obj.GetUID(), nil
}

// copyConditions sets this reconcile's conditions and observed generation
// on fresh, leaving everyone else's as fresh has them.
func (s *status[O, K, C]) copyConditions(fresh O) error {
	f, err := fieldsOf(fresh)
	if err != nil {
		return err
	}
	for _, t := range s.changed {
		if c := s.get(t); c != nil {
			meta.SetStatusCondition(f.conditions, *c)
		}
	}
	*f.observed = s.obj.GetGeneration()
	return nil
}
