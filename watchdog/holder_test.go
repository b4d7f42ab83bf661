package watchdog_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/finale-dev/finale/watchdog"
)

func TestHolderLease(t *testing.T) {
	renewed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	holder := func(labels, annotations map[string]string, renew *time.Time, seconds *int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}}
		if renew != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renew}
		}
		l.Spec.LeaseDurationSeconds = seconds
		return l
	}
	label := map[string]string{watchdog.LabelFinalizerHolder: "true"}
	for name, tc := range map[string]struct {
		lease      *coordinationv1.Lease
		finalizers []string
		expiry     time.Time
		ok         bool
	}{
		"a holder": {
			lease:      holder(label, map[string]string{watchdog.AnnotationHeldFinalizers: "a.example/x, b.example/y"}, &renewed, ptr.To(int32(60))),
			finalizers: []string{"a.example/x", "b.example/y"}, expiry: renewed.Add(time.Minute), ok: true,
		},
		"not labelled: claims nothing": {
			lease:  holder(nil, map[string]string{watchdog.AnnotationHeldFinalizers: "a.example/x"}, &renewed, ptr.To(int32(60))),
			expiry: renewed.Add(time.Minute), ok: true,
		},
		"never renewed: vouches for nothing": {lease: holder(label, nil, nil, ptr.To(int32(60)))},
		"no duration":                        {lease: holder(label, nil, &renewed, nil)},
		"zero duration":                      {lease: holder(label, nil, &renewed, ptr.To(int32(0)))},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.finalizers, watchdog.HeldFinalizers(tc.lease)); diff != "" {
				t.Errorf("HeldFinalizers (-want +got):\n%s", diff)
			}
			expiry, ok := watchdog.HolderExpiry(tc.lease)
			if ok != tc.ok || !expiry.Equal(tc.expiry) {
				t.Errorf("HolderExpiry = %v, %v; want %v, %v", expiry, ok, tc.expiry, tc.ok)
			}
		})
	}
}
