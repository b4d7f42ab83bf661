package lifecycle

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// namespaceReader answers every namespace with uid, or NotFound when uid
// is empty, and counts its reads.
type namespaceReader struct {
	client.Reader
	uid   types.UID
	reads int
}

func (r *namespaceReader) Get(_ context.Context, k client.ObjectKey, o client.Object, _ ...client.GetOption) error {
	r.reads++
	if r.uid == "" {
		return apierrors.NewNotFound(corev1.Resource("namespaces"), k.Name)
	}
	o.SetUID(r.uid)
	return nil
}

// A record's namespace UID comes from the namespace informer when there is
// one (a live read per object saved), and from the API server when the
// informer has not seen the namespace; a claimant's, which decides an
// adoption, always from the API server, since a lagging cache could give
// it the UID of the namespace the claimed record was written in.
func TestNamespaceUIDReader(t *testing.T) {
	const live, cached = types.UID("live-uid"), types.UID("cached-uid")
	type reads struct{ Live, Cache int }
	for name, tc := range map[string]struct {
		cache     types.UID // "" with noCache: no informer; "" otherwise: not in it
		noCache   bool
		claimant  bool
		want      types.UID
		wantReads reads
	}{
		"a record, with the informer":            {cache: cached, want: cached, wantReads: reads{Cache: 1}},
		"a record, the informer has not seen it": {want: live, wantReads: reads{Live: 1, Cache: 1}},
		"a record, without the informer":         {noCache: true, want: live, wantReads: reads{Live: 1}},
		"a claimant, with the informer":          {cache: cached, claimant: true, want: live, wantReads: reads{Live: 1}},
		"a claimant, without the informer":       {noCache: true, claimant: true, want: live, wantReads: reads{Live: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			apiReader, cache := &namespaceReader{uid: live}, &namespaceReader{uid: tc.cache}
			r := &Reconciler[*corev1.ConfigMap, string, any]{o: Options{APIReader: apiReader}}
			if !tc.noCache {
				r.namespaceCache = cache
			}
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app", UID: "obj-uid"}}
			got, err := r.namespaceUID(t.Context(), obj, tc.claimant)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("namespace uid %q, want %q", got, tc.want)
			}
			if diff := cmp.Diff(tc.wantReads, reads{Live: apiReader.reads, Cache: cache.reads}); diff != "" {
				t.Errorf("reads (-want +got):\n%s", diff)
			}
		})
	}
}
