package hold

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

func kindName(s *runtime.Scheme, obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, s); err == nil && gvk.Kind != "" {
		return gvk.Kind
	}
	return reflect.TypeOf(obj).Elem().Name()
}

// listFactory returns a constructor for the list kind of obj: Unstructured
// prototypes get an UnstructuredList, typed ones the scheme's <Kind>List.
func listFactory(s *runtime.Scheme, obj client.Object) (func() (client.ObjectList, error), error) {
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		return nil, fmt.Errorf("kind of %T: %w", obj, err)
	}
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if _, ok := obj.(runtime.Unstructured); ok {
		return func() (client.ObjectList, error) {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			return l, nil
		}, nil
	}
	if _, err := s.New(listGVK); err != nil {
		return nil, fmt.Errorf("list kind %s is not in the scheme: %w", listGVK, err)
	}
	return func() (client.ObjectList, error) {
		o, err := s.New(listGVK)
		if err != nil {
			return nil, err
		}
		return o.(client.ObjectList), nil
	}, nil
}

// newObject returns an empty copy of the prototype (keeping an
// Unstructured's kind).
func newObject(proto client.Object) client.Object {
	if u, ok := proto.(*unstructured.Unstructured); ok {
		n := &unstructured.Unstructured{}
		n.SetGroupVersionKind(u.GroupVersionKind())
		return n
	}
	return reflect.New(reflect.TypeOf(proto).Elem()).Interface().(client.Object)
}

func hasFinalizer(obj client.Object, f string) bool { return slices.Contains(obj.GetFinalizers(), f) }

func deleting(obj client.Object) bool { return obj != nil && !obj.GetDeletionTimestamp().IsZero() }

// setFinalizer adds or removes f with an optimistic-lock merge patch, so a
// finalizer another controller adds at the same time is never dropped (the
// patch fails with a conflict and the caller retries). A missing object is
// not an error. Adding to an object already being deleted is refused by
// the API server; that is reported as added=false, err=nil.
func setFinalizer(ctx context.Context, w client.Writer, obj client.Object, f string, want bool) (changed bool, err error) {
	if hasFinalizer(obj, f) == want {
		return false, nil
	}
	if want && deleting(obj) {
		return false, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	fs := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(s string) bool { return s == f })
	if want {
		fs = append(fs, f)
	}
	obj.SetFinalizers(fs)
	if err := w.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("%s finalizer %s on %s: %w", verb(want), f, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

func verb(add bool) string {
	if add {
		return "add"
	}
	return "remove"
}

func forEach(list client.ObjectList, f func(client.Object) error) error {
	return meta.EachListItem(list, func(o runtime.Object) error {
		co, ok := o.(client.Object)
		if !ok {
			return nil
		}
		return f(co)
	})
}
