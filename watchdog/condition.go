package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrObjectGone reports that the object a condition was meant for no longer
// exists (or exists under another UID). The watchdog does not count it as a
// write failure: a finished deletion needs no condition.
var ErrObjectGone = errors.New("object is gone")

// ErrNoKind reports an object whose GroupVersionKind is unknown, so its
// status cannot be addressed. Pass Options.Scheme with the object's type.
var ErrNoKind = errors.New("object has no GroupVersionKind; set watchdog.Options.Scheme to a scheme that knows its type")

// ConditionWriter sets one condition on an object's status. obj carries the
// GroupVersionKind, namespace, name, UID and generation of the object.
type ConditionWriter interface {
	WriteCondition(ctx context.Context, obj client.Object, cond metav1.Condition) error
}

// ConditionWriterFn adapts a function to ConditionWriter.
type ConditionWriterFn func(ctx context.Context, obj client.Object, cond metav1.Condition) error

// WriteCondition implements ConditionWriter.
func (f ConditionWriterFn) WriteCondition(ctx context.Context, obj client.Object, cond metav1.Condition) error {
	return f(ctx, obj, cond)
}

// StatusConditions writes a condition into status.conditions through the
// status subresource of any kind whose schema has status.conditions as a
// list of metav1.Condition-shaped items. It reads the object fresh, replaces
// or appends the one condition of cond.Type (other conditions are kept
// byte for byte), and sends a JSON merge patch carrying the resourceVersion
// it read, so a concurrent writer makes the patch fail with a conflict
// instead of being overwritten; conflicts are retried.
type StatusConditions struct {
	// Reader reads the object. Use an uncached reader (the manager's
	// APIReader): a cached client would start an informer per kind, and a
	// stale read only costs a conflict retry anyway.
	Reader client.Reader
	// Status patches the status subresource (a client.Client is one).
	Status client.StatusClient
}

// WriteCondition implements ConditionWriter.
func (s StatusConditions) WriteCondition(ctx context.Context, obj client.Object, cond metav1.Condition) error {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		return fmt.Errorf("write condition %s on %s: %w", cond.Type, client.ObjectKeyFromObject(obj), ErrNoKind)
	}
	key := client.ObjectKeyFromObject(obj)
	what := fmt.Sprintf("%s %s", gvk.Kind, key)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		if err := s.Reader.Get(ctx, key, u); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("write condition %s on %s: %w", cond.Type, what, ErrObjectGone)
			}
			return fmt.Errorf("read %s for condition %s: %w", what, cond.Type, err)
		}
		if obj.GetUID() != "" && u.GetUID() != obj.GetUID() {
			return fmt.Errorf("write condition %s on %s (uid %s, found %s): %w", cond.Type, what, obj.GetUID(), u.GetUID(), ErrObjectGone)
		}
		conds, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
		if err != nil {
			return fmt.Errorf("%s: status.conditions is not a list of conditions: %w", what, err)
		}
		next, changed := setCondition(conds, cond)
		if !changed {
			return nil
		}
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
			"status":   map[string]any{"conditions": next},
		})
		if err != nil {
			return fmt.Errorf("encode condition %s for %s: %w", cond.Type, what, err)
		}
		// A NotFound here, after a successful read, usually means the kind
		// has no status subresource: an error, not ErrObjectGone.
		if err := s.Status.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, body)); err != nil {
			return fmt.Errorf("patch status of %s with condition %s (does the kind have a status subresource with conditions?): %w", what, cond.Type, err)
		}
		return nil
	})
}

// setCondition returns conds with cond in place of the item of the same
// type, and whether anything changed. lastTransitionTime moves only when
// the status does, as metav1.Condition requires.
func setCondition(conds []any, cond metav1.Condition) ([]any, bool) {
	item := map[string]any{
		"type":               cond.Type,
		"status":             string(cond.Status),
		"reason":             cond.Reason,
		"message":            cond.Message,
		"lastTransitionTime": cond.LastTransitionTime.UTC().Format(time.RFC3339),
	}
	if cond.ObservedGeneration > 0 {
		item["observedGeneration"] = cond.ObservedGeneration
	}
	out := make([]any, 0, len(conds)+1)
	found, changed := false, false
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != cond.Type || found {
			out = append(out, c)
			continue
		}
		found = true
		if m["status"] == item["status"] {
			if t, ok := m["lastTransitionTime"]; ok {
				item["lastTransitionTime"] = t
			}
		}
		changed = !sameCondition(m, item)
		out = append(out, item)
	}
	if !found {
		out = append(out, item)
		changed = true
	}
	return out, changed
}

func sameCondition(a, b map[string]any) bool {
	for _, k := range []string{"type", "status", "reason", "message", "lastTransitionTime"} {
		if a[k] != b[k] {
			return false
		}
	}
	return fmt.Sprint(a["observedGeneration"]) == fmt.Sprint(b["observedGeneration"])
}
