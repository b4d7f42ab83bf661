package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/watchdog"
)

// memStore is a Store that is never reached: for construction tests.
type memStore struct{ ledger.Store }

// Bad configuration is refused at construction with ErrConfig and a message
// that names what to fix.
func TestNewRejectsBadOptions(t *testing.T) {
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	_ = corev1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
	adapter := lifecycle.AdapterFuncs[*Widget, string, int]{}
	pool := poolOf[int]{}
	ok := lifecycle.Options{Finalizer: "x/y", Scheme: s, Skip: lifecycle.Unprotected}
	with := func(f func(o *lifecycle.Options)) lifecycle.Options {
		o := ok
		f(&o)
		return o
	}
	mkHold := func(fin string) *hold.Hold {
		h, err := hold.New(hold.Config{
			Parent: &corev1.ConfigMap{}, Scheme: s, SecretName: func(client.Object) string { return "" },
			Dependents: []hold.Dependent{{Object: &Widget{}, CleanupFinalizer: fin, ParentName: func(client.Object) string { return "" }}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	led, err := ledger.New(&memStore{}, ledger.Options{Key: ledger.GenerateKey()})
	if err != nil {
		t.Fatal(err)
	}
	wd := watchdog.New(watchdog.Options{Scheme: s})
	cases := map[string]struct {
		o       lifecycle.Options
		newObj  func() *Widget
		wantErr string
	}{
		"valid, every guarantee skipped by name": {o: ok},
		"valid, every guarantee given": {o: with(func(o *lifecycle.Options) {
			o.Skip, o.Ledger, o.Hold, o.Watchdog = 0, led, mkHold("x/y"), wd
		})},
		"no finalizer":       {o: with(func(o *lifecycle.Options) { o.Finalizer = "" }), wantErr: "Finalizer is required"},
		"no scheme":          {o: with(func(o *lifecycle.Options) { o.Scheme = nil }), wantErr: "Scheme is required"},
		"negative retry":     {o: with(func(o *lifecycle.Options) { o.RetryInterval = -1 }), wantErr: "negative"},
		"unknown policy":     {o: with(func(o *lifecycle.Options) { o.DefaultPolicy = "Orphan" }), wantErr: "Orphan"},
		"kind not in scheme": {o: with(func(o *lifecycle.Options) { o.Scheme = runtime.NewScheme() }), wantErr: "no kind"},
		"nil object factory": {o: ok, newObj: func() *Widget { return nil }, wantErr: "not a pointer"},
		"ledger nil, not skipped": {o: with(func(o *lifecycle.Options) { o.Skip = lifecycle.SkipHold | lifecycle.SkipWatchdog }),
			wantErr: "Options.Ledger is nil"},
		"hold nil, not skipped": {o: with(func(o *lifecycle.Options) { o.Skip = lifecycle.SkipLedger | lifecycle.SkipWatchdog }),
			wantErr: "Options.Hold is nil"},
		"watchdog nil, not skipped": {o: with(func(o *lifecycle.Options) { o.Skip = lifecycle.SkipLedger | lifecycle.SkipHold }),
			wantErr: "Options.Watchdog is nil"},
		"ledger given and skipped": {o: with(func(o *lifecycle.Options) { o.Ledger = led }), wantErr: "choose one"},
		"hold waits for another finalizer": {o: with(func(o *lifecycle.Options) {
			o.Skip, o.Hold = lifecycle.SkipLedger|lifecycle.SkipWatchdog, mkHold("x/other")
		}),
			wantErr: `waits for finalizer "x/other"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			newObj := tc.newObj
			if newObj == nil {
				newObj = func() *Widget { return &Widget{} }
			}
			_, err := lifecycle.New(c, newObj, adapter, pool, tc.o)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, lifecycle.ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want ErrConfig saying %q", err, tc.wantErr)
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
		lifecycle.AdapterFuncs[*corev1.ConfigMap, string, int]{}, poolOf[int]{}, lifecycle.Options{Finalizer: "x/y", Scheme: s, Skip: lifecycle.Unprotected})
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
