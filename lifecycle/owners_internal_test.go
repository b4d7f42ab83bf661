package lifecycle

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// formReader answers a Get of the object named "app" in any form with one
// ObjectMeta, NotFound for any other name, and records the form asked.
type formReader struct {
	client.Reader
	asked []string
}

var ownerMeta = metav1.ObjectMeta{Namespace: "team-a", Name: "app", UID: "uid-1", Annotations: map[string]string{AnnotationUID: "uid-0"}}

func (r *formReader) Get(_ context.Context, k client.ObjectKey, o client.Object, _ ...client.GetOption) error {
	r.asked = append(r.asked, fmt.Sprintf("%T", o))
	if k.Name != ownerMeta.Name {
		return apierrors.NewNotFound(corev1.Resource("configmaps"), k.Name)
	}
	m, ok := objectMeta(o)
	if !ok {
		return fmt.Errorf("no ObjectMeta in %T", o)
	}
	*m = *ownerMeta.DeepCopy()
	return nil
}

// The sweeper's owner lookups of a kind the Setup reconciles are served by
// that kind's typed informer, never by a metadata-only one of their own
// (which would be a second watch on every object of the kind); other kinds
// are read as asked.
func TestOwnerCacheReadsTypedKinds(t *testing.T) {
	configMaps := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	for name, tc := range map[string]struct {
		gvk       k8sschema.GroupVersionKind
		key       string
		wantAsked []string
		wantMeta  metav1.ObjectMeta
		notFound  bool
	}{
		"a reconciled kind":                  {gvk: configMaps, key: "app", wantAsked: []string{"*v1.ConfigMap"}, wantMeta: ownerMeta},
		"a reconciled kind, another version": {gvk: k8sschema.GroupVersionKind{Version: "v2", Kind: "ConfigMap"}, key: "app", wantAsked: []string{"*v1.ConfigMap"}, wantMeta: ownerMeta},
		"a reconciled kind, gone":            {gvk: configMaps, key: "gone", wantAsked: []string{"*v1.ConfigMap"}, notFound: true},
		"another kind":                       {gvk: corev1.SchemeGroupVersion.WithKind("Secret"), key: "app", wantAsked: []string{"*v1.PartialObjectMetadata"}, wantMeta: ownerMeta},
	} {
		t.Run(name, func(t *testing.T) {
			r := &formReader{}
			c := ownerCache{Reader: r, typed: map[k8sschema.GroupKind]func() client.Object{
				configMaps.GroupKind(): func() client.Object { return &corev1.ConfigMap{} },
			}}
			pm := &metav1.PartialObjectMetadata{}
			pm.SetGroupVersionKind(tc.gvk)
			err := c.Get(t.Context(), client.ObjectKey{Namespace: "team-a", Name: tc.key}, pm)
			if got := apierrors.IsNotFound(err); got != tc.notFound || (err != nil && !tc.notFound) {
				t.Fatalf("Get: %v, want NotFound %v", err, tc.notFound)
			}
			if diff := cmp.Diff(tc.wantAsked, r.asked); diff != "" {
				t.Errorf("forms read (-want +got):\n%s", diff)
			}
			if tc.notFound {
				return
			}
			if diff := cmp.Diff(tc.wantMeta, pm.ObjectMeta); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
			if pm.GroupVersionKind() != tc.gvk {
				t.Errorf("kind %v, want %v", pm.GroupVersionKind(), tc.gvk)
			}
		})
	}
}
