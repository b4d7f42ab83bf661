package hold

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDoomed(t *testing.T) {
	deleted := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(deleted.Add(d)) }
	for _, tc := range []struct {
		name     string
		created  metav1.Time
		deleting *metav1.Time
		want     bool
	}{
		{name: "created before the namespace's deletion", created: at(-time.Hour), want: true},
		{name: "created in the same second", created: at(0), want: true},
		{name: "created after: a namespace created since, under the same name", created: at(time.Second), want: false},
		{name: "being deleted already", created: at(-time.Hour), deleting: ptr.To(at(time.Second)), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: tc.created, DeletionTimestamp: tc.deleting}}
			if got := doomed(deleted, o); got != tc.want {
				t.Errorf("doomed = %v, want %v", got, tc.want)
			}
		})
	}
}
