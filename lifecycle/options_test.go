package lifecycle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/finale-dev/finale/lifecycle"
)

// Bad configuration is refused at construction with ErrConfig and a message
// that names what to fix.
func TestNewRejectsBadOptions(t *testing.T) {
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	c := fake.NewClientBuilder().WithScheme(s).Build()
	adapter := lifecycle.AdapterFuncs[*Widget, string, int]{}
	pool := poolOf[int]{}
	ok := lifecycle.Options{Finalizer: "x/y", Scheme: s}
	cases := map[string]struct {
		o       lifecycle.Options
		newObj  func() *Widget
		wantErr bool
	}{
		"valid":              {o: ok},
		"no finalizer":       {o: lifecycle.Options{Scheme: s}, wantErr: true},
		"no scheme":          {o: lifecycle.Options{Finalizer: "x/y"}, wantErr: true},
		"negative retry":     {o: lifecycle.Options{Finalizer: "x/y", Scheme: s, RetryInterval: -1}, wantErr: true},
		"unknown policy":     {o: lifecycle.Options{Finalizer: "x/y", Scheme: s, DefaultPolicy: "Orphan"}, wantErr: true},
		"kind not in scheme": {o: lifecycle.Options{Finalizer: "x/y", Scheme: runtime.NewScheme()}, wantErr: true},
		"nil object factory": {o: ok, newObj: func() *Widget { return nil }, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			newObj := tc.newObj
			if newObj == nil {
				newObj = func() *Widget { return &Widget{} }
			}
			_, err := lifecycle.New(c, newObj, adapter, pool, tc.o)
			if diff := cmp.Diff(tc.wantErr, errors.Is(err, lifecycle.ErrConfig)); diff != "" {
				t.Errorf("error %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

// A kind without the status convention is refused at construction.
func TestNewRejectsKindWithoutStatus(t *testing.T) {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
	_, err := lifecycle.New(c, func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		lifecycle.AdapterFuncs[*corev1.ConfigMap, string, int]{}, poolOf[int]{}, lifecycle.Options{Finalizer: "x/y", Scheme: s})
	if !errors.Is(err, lifecycle.ErrConfig) {
		t.Fatalf("got %v, want ErrConfig", err)
	}
}

// NeedsAction keeps its cause visible to errors.Is and says what to do.
func TestNeedsAction(t *testing.T) {
	cause := context.DeadlineExceeded
	cases := map[string]struct {
		err  *lifecycle.NeedsAction
		want string
	}{
		"with action":    {err: &lifecycle.NeedsAction{Reason: "InUse", Action: "disconnect", Err: cause}, want: "context deadline exceeded: disconnect"},
		"cause explains": {err: &lifecycle.NeedsAction{Reason: "InUse", Err: cause}, want: "context deadline exceeded"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !errors.Is(tc.err, cause) {
				t.Error("cause lost")
			}
		})
	}
}
