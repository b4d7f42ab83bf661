package hold

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IndexSpec is one field index the hold needs: Field on objects of Object's
// kind, extracted by Func.
type IndexSpec struct {
	Object client.Object
	Field  string
	Func   client.IndexerFunc
}

// Indexes lists the field indexes: ParentIndex on every dependent kind and
// SecretIndex on the parent kind. SetupWithManager registers them; a test
// with controller-runtime's fake client passes them to WithIndex.
func (h *Hold) Indexes() []IndexSpec {
	var out []IndexSpec
	for _, d := range h.dependents {
		parentName := d.ParentName
		out = append(out, IndexSpec{Object: newObject(d.Object), Field: ParentIndex, Func: func(o client.Object) []string {
			if n := parentName(o); n != "" {
				return []string{n}
			}
			return nil
		}})
	}
	secretName := h.cfg.SecretName
	out = append(out, IndexSpec{Object: newObject(h.cfg.Parent), Field: SecretIndex, Func: func(o client.Object) []string {
		if n := secretName(o); n != "" {
			return []string{n}
		}
		return nil
	}})
	return out
}

// Index registers Indexes on fi (a manager's GetFieldIndexer()).
func (h *Hold) Index(ctx context.Context, fi client.FieldIndexer) error {
	for _, ix := range h.Indexes() {
		if err := fi.IndexField(ctx, ix.Object, ix.Field, ix.Func); err != nil {
			return fmt.Errorf("hold: index %s on %T: %w", ix.Field, ix.Object, err)
		}
	}
	return nil
}

// Dependents counts, per dependent kind, the dependents that still need
// parent, through the ParentIndex field index (never a full List):
//
//   - while the parent is alive, every dependent that references it,
//     except a terminating one whose cleanup finalizer is already gone;
//   - while the parent is being deleted, only dependents that still carry
//     their cleanup finalizer (terminating or not): a dependent with some
//     other finalizer left has nothing to delete through the parent.
//
// Every configured kind appears in the result, zero or not.
func (h *Hold) Dependents(ctx context.Context, r client.Reader, parent client.Object) (map[string]int, error) {
	out := make(map[string]int, len(h.dependents))
	parentDeleting := deleting(parent)
	for _, d := range h.dependents {
		list, err := d.newList()
		if err != nil {
			return nil, fmt.Errorf("hold: list %s: %w", d.Kind, err)
		}
		// Counting reads only; without the deep copy a parent with N
		// dependents costs O(N) pointer walks per pass instead of N object
		// copies, and a pass runs on every dependent's change. Readers other
		// than a cache ignore the option.
		if err := r.List(ctx, list, client.InNamespace(parent.GetNamespace()), client.MatchingFields{ParentIndex: parent.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("hold: list %s referencing %s: %w", d.Kind, client.ObjectKeyFromObject(parent), err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, fmt.Errorf("hold: list %s: %w", d.Kind, err)
		}
		n := 0
		for _, it := range items {
			o, ok := it.(client.Object)
			if !ok || d.ParentName(o) != parent.GetName() {
				continue
			}
			cleaning := hasFinalizer(o, d.CleanupFinalizer)
			if parentDeleting {
				if cleaning {
					n++
				}
				continue
			}
			if cleaning || !deleting(o) {
				n++
			}
		}
		out[d.Kind] = n
	}
	return out, nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
