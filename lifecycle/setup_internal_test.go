package lifecycle

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/hold"
)

// Every update of a parent or its Secret wakes the dependents but the one
// a delete makes: it changes nothing they read, and a namespace deletion
// makes one for each parent and Secret while every dependent is Ready.
func TestWakesDependents(t *testing.T) {
	now := metav1.Now()
	held := func(edit func(*corev1.Secret)) client.Object {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Generation: 1, ResourceVersion: "1", Finalizers: []string{hold.Finalizer}}}
		if edit != nil {
			edit(s)
		}
		return s
	}
	deleting := func(s *corev1.Secret) { s.DeletionTimestamp, s.ResourceVersion = &now, "2" }
	cases := map[string]struct {
		old, updated client.Object
		want         bool
	}{
		"deletion started":                          {held(nil), held(deleting), false},
		"deletion started, generation bumped":       {held(nil), held(func(s *corev1.Secret) { deleting(s); s.Generation = 2 }), false},
		"the hold put on":                           {held(func(s *corev1.Secret) { s.Finalizers = nil }), held(nil), true},
		"the hold taken off a deleting one":         {held(deleting), held(func(s *corev1.Secret) { deleting(s); s.Finalizers = nil }), true},
		"deletion started, foreground marker added": {held(nil), held(func(s *corev1.Secret) { deleting(s); s.Finalizers = append(s.Finalizers, "foregroundDeletion") }), true},
		"spec changed":                              {held(nil), held(func(s *corev1.Secret) { s.Generation = 2 }), true},
		"anything else (data, status)":              {held(nil), held(func(s *corev1.Secret) { s.ResourceVersion = "2" }), true},
		"deleting, anything else":                   {held(deleting), held(func(s *corev1.Secret) { deleting(s); s.ResourceVersion = "3" }), true},
	}
	got, want := map[string]bool{}, map[string]bool{}
	for name, c := range cases {
		got[name], want[name] = wakesDependents(c.old, c.updated), c.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("wakesDependents (-want +got):\n%s", diff)
	}
}
