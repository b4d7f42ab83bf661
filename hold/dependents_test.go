package hold_test

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/finale-dev/finale/hold"
)

// The unit tests below use a parent kind (Service) and three dependent
// kinds (ConfigMap, Pod, ServiceAccount) that name their parent in an
// annotation; the decision code does not care which kinds they are.
const (
	parentAnnotation = "example.finale.dev/parent"
	unitCleanup      = "example.finale.dev/cleanup"
	otherFinalizer   = "example.finale.dev/other"
)

func unitScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	return s
}

func byAnnotation(o client.Object) string { return o.GetAnnotations()[parentAnnotation] }

func unitHold(t *testing.T, clk *clocktesting.FakeClock) *hold.Hold {
	t.Helper()
	var deps []hold.Dependent
	for _, o := range []client.Object{&corev1.ConfigMap{}, &corev1.Pod{}, &corev1.ServiceAccount{}} {
		deps = append(deps, hold.Dependent{Object: o, ParentName: byAnnotation, CleanupFinalizer: unitCleanup})
	}
	h, err := hold.New(hold.Config{
		Parent:     &corev1.Service{},
		SecretName: func(o client.Object) string { return o.GetAnnotations()["secret"] },
		Dependents: deps,
		Scheme:     unitScheme(),
		Clock:      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type depSpec struct {
	kind        string // ConfigMap, Pod or ServiceAccount
	parent      string
	namespace   string // default "ns"
	cleanup     bool   // carries the cleanup finalizer
	terminating bool   // has a deletionTimestamp (then also otherFinalizer)
}

func (d depSpec) object(i int) client.Object {
	ns := d.namespace
	if ns == "" {
		ns = "ns"
	}
	meta := metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("d%d", i), Annotations: map[string]string{parentAnnotation: d.parent}}
	if d.cleanup {
		meta.Finalizers = append(meta.Finalizers, unitCleanup)
	}
	if d.terminating {
		now := metav1.Now()
		meta.DeletionTimestamp = &now
		meta.Finalizers = append(meta.Finalizers, otherFinalizer)
	}
	switch d.kind {
	case "ConfigMap":
		return &corev1.ConfigMap{ObjectMeta: meta}
	case "Pod":
		return &corev1.Pod{ObjectMeta: meta}
	default:
		return &corev1.ServiceAccount{ObjectMeta: meta}
	}
}

func many(n int, d depSpec) []depSpec {
	out := make([]depSpec, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func concat(xs ...[]depSpec) []depSpec {
	var out []depSpec
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// TestDependentsPerKind counts through the field index, with each kind in
// turn the largest (so a count that mixes kinds up, or stops at the first
// or largest kind, fails), plus the rule for terminating
// dependents.
func TestDependentsPerKind(t *testing.T) {
	alive := func(kind string) depSpec { return depSpec{kind: kind, parent: "p", cleanup: true} }
	cases := map[string]struct {
		deps           []depSpec
		parentDeleting bool
		want           map[string]int
	}{
		"ConfigMap largest": {
			deps: concat(many(5, alive("ConfigMap")), many(2, alive("Pod")), many(1, alive("ServiceAccount"))),
			want: map[string]int{"ConfigMap": 5, "Pod": 2, "ServiceAccount": 1},
		},
		"Pod largest": {
			deps: concat(many(1, alive("ConfigMap")), many(6, alive("Pod")), many(3, alive("ServiceAccount"))),
			want: map[string]int{"ConfigMap": 1, "Pod": 6, "ServiceAccount": 3},
		},
		"ServiceAccount largest": {
			deps: concat(many(2, alive("ConfigMap")), many(1, alive("Pod")), many(7, alive("ServiceAccount"))),
			want: map[string]int{"ConfigMap": 2, "Pod": 1, "ServiceAccount": 7},
		},
		"other parents and namespaces do not count": {
			deps: concat(many(2, alive("Pod")),
				many(4, depSpec{kind: "Pod", parent: "q", cleanup: true}),
				many(3, depSpec{kind: "Pod", parent: "p", namespace: "elsewhere", cleanup: true})),
			want: map[string]int{"ConfigMap": 0, "Pod": 2, "ServiceAccount": 0},
		},
		"alive parent: an alive dependent without its finalizer yet counts": {
			deps: many(3, depSpec{kind: "ConfigMap", parent: "p"}),
			want: map[string]int{"ConfigMap": 3, "Pod": 0, "ServiceAccount": 0},
		},
		"a terminating dependent counts only while its cleanup finalizer is there": {
			deps: concat(many(2, depSpec{kind: "ServiceAccount", parent: "p", terminating: true}),
				many(1, depSpec{kind: "ServiceAccount", parent: "p", terminating: true, cleanup: true})),
			want: map[string]int{"ConfigMap": 0, "Pod": 0, "ServiceAccount": 1},
		},
		"deleting parent: only dependents with their cleanup finalizer count": {
			deps: concat(many(3, depSpec{kind: "Pod", parent: "p"}),
				many(2, depSpec{kind: "Pod", parent: "p", cleanup: true}),
				many(4, depSpec{kind: "ConfigMap", parent: "p", terminating: true})),
			parentDeleting: true,
			want:           map[string]int{"ConfigMap": 0, "Pod": 2, "ServiceAccount": 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := unitHold(t, clocktesting.NewFakeClock(time.Now()))
			b := fake.NewClientBuilder().WithScheme(unitScheme())
			for _, ix := range h.Indexes() {
				b = b.WithIndex(ix.Object, ix.Field, ix.Func)
			}
			for i, d := range tc.deps {
				b = b.WithObjects(d.object(i))
			}
			c := b.Build()
			parent := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
			if tc.parentDeleting {
				now := metav1.Now()
				parent.DeletionTimestamp = &now
				parent.Finalizers = []string{hold.Finalizer}
			}
			got, err := h.Dependents(t.Context(), c, parent)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Dependents (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDependentPass covers the dependent-side helpers: when to release
// without delete, the pass deadline, and the retry counted from the end of
// a pass and capped at the hold end.
func TestDependentPass(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	deletedAt := metav1.NewTime(t0)
	end := t0.Add(hold.DefaultTimeout)
	parent := func(deleting, held bool) client.Object {
		p := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		if held {
			p.Finalizers = []string{hold.Finalizer}
		}
		if deleting {
			p.DeletionTimestamp = &deletedAt
		}
		return p
	}
	type want struct {
		Deadline time.Time
		Release  bool
		Retry    time.Duration
	}
	const backoff = time.Minute
	cases := map[string]struct {
		parent client.Object
		// firstLook is when the hold first saw the deletion (after it: nil
		// means at the deletion); passTook is how long the pass ran before
		// RetryAfter is asked.
		firstLook           *time.Duration
		passStart, passTook time.Duration
		want                want
	}{
		"parent gone: release": {
			parent: nil,
			want:   want{Release: true, Retry: time.Millisecond},
		},
		"parent alive: no bound": {
			parent: parent(false, true),
			want:   want{Retry: backoff},
		},
		"parent deleting and held: bounded by the hold end": {
			parent: parent(true, true),
			want:   want{Deadline: end, Retry: backoff},
		},
		"retry counts from the end of a slow pass": {
			parent:    parent(true, true),
			passStart: 5 * time.Minute, passTook: 4*time.Minute + 30*time.Second,
			want: want{Deadline: end, Retry: 30 * time.Second},
		},
		"retry never runs past the hold end": {
			parent:    parent(true, true),
			passStart: 9 * time.Minute, passTook: 30 * time.Second,
			want: want{Deadline: end, Retry: 30 * time.Second},
		},
		"past the hold end: release": {
			parent:    parent(true, true),
			passStart: 10 * time.Minute,
			want:      want{Deadline: end, Release: true, Retry: time.Millisecond},
		},
		"deleted while the operator was down: this first look starts the hold, so it is not over": {
			parent:    parent(true, true),
			firstLook: ptr.To(3 * hold.DefaultTimeout),
			passStart: 3 * hold.DefaultTimeout,
			want:      want{Deadline: t0.Add(4 * hold.DefaultTimeout), Retry: backoff},
		},
		"started after an outage: counted from its start": {
			parent:    parent(true, true),
			firstLook: ptr.To(3 * hold.DefaultTimeout),
			passStart: 3*hold.DefaultTimeout + 9*time.Minute,
			want:      want{Deadline: t0.Add(4 * hold.DefaultTimeout), Retry: time.Minute},
		},
		"started after an outage, and over": {
			parent:    parent(true, true),
			firstLook: ptr.To(3 * hold.DefaultTimeout),
			passStart: 4 * hold.DefaultTimeout,
			want:      want{Deadline: t0.Add(4 * hold.DefaultTimeout), Release: true, Retry: time.Millisecond},
		},
		"a first look on a clock behind the deletion counts from the deletion": {
			parent:    parent(true, true),
			firstLook: ptr.To(-time.Hour),
			passStart: hold.DefaultTimeout,
			want:      want{Deadline: t0.Add(hold.DefaultTimeout), Release: true, Retry: time.Millisecond},
		},
		"a first look past MaxStartDelay counts from MaxStartDelay: over at once": {
			parent:    parent(true, true),
			firstLook: ptr.To(hold.DefaultMaxStartDelay + hold.DefaultTimeout),
			passStart: hold.DefaultMaxStartDelay + hold.DefaultTimeout,
			want:      want{Deadline: t0.Add(hold.DefaultMaxStartDelay + hold.DefaultTimeout), Release: true, Retry: time.Millisecond},
		},
		"parent deleting and already released: release": {
			parent: parent(true, false),
			want:   want{Release: true, Retry: time.Millisecond},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0.Add(ptr.Deref(tc.firstLook, 0)))
			h := unitHold(t, clk)
			h.DependentDeadline(tc.parent) // the hold's first look
			clk.SetTime(t0.Add(tc.passStart))
			var got want
			got.Deadline, got.Release = h.DependentDeadline(tc.parent)
			if got.Release != h.ShouldReleaseWithoutDelete(tc.parent) {
				t.Errorf("ShouldReleaseWithoutDelete disagrees with DependentDeadline")
			}
			clk.Step(tc.passTook)
			got.Retry = h.RetryAfter(tc.parent, backoff)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPassContext(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	deletedAt := metav1.NewTime(t0)
	clk := clocktesting.NewFakeClock(t0.Add(hold.DefaultTimeout - 2*time.Second))
	h := unitHold(t, clk)
	p := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionTimestamp: &deletedAt, Finalizers: []string{hold.Finalizer}}}
	clk.SetTime(t0)
	h.DependentDeadline(p) // the hold's first look, at the deletion
	clk.SetTime(t0.Add(hold.DefaultTimeout - 2*time.Second))

	ctx, cancel := h.PassContext(t.Context(), p)
	defer cancel()
	dl, ok := ctx.Deadline()
	if !ok {
		t.Fatal("pass context has no deadline while the parent is held")
	}
	if left := time.Until(dl); left <= 0 || left > 2*time.Second {
		t.Errorf("pass deadline in %v, want within the 2s left of the hold", left)
	}

	clk.Step(2 * time.Second)
	ctx2, cancel2 := h.PassContext(t.Context(), p)
	defer cancel2()
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Errorf("pass context after the hold end: err %v, want canceled", ctx2.Err())
	}

	p.DeletionTimestamp = nil
	ctx3, cancel3 := h.PassContext(t.Context(), p)
	defer cancel3()
	if _, ok := ctx3.Deadline(); ok {
		t.Error("pass context has a deadline while the parent is not being deleted")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := func() hold.Config {
		return hold.Config{
			Parent:     &corev1.Service{},
			SecretName: func(client.Object) string { return "" },
			Dependents: []hold.Dependent{{Object: &corev1.Pod{}, ParentName: byAnnotation, CleanupFinalizer: unitCleanup}},
			Scheme:     unitScheme(),
		}
	}
	cases := map[string]func(*hold.Config){
		"no scheme":                   func(c *hold.Config) { c.Scheme = nil },
		"no parent":                   func(c *hold.Config) { c.Parent = nil },
		"no secret name":              func(c *hold.Config) { c.SecretName = nil },
		"no dependents":               func(c *hold.Config) { c.Dependents = nil },
		"negative timeout":            func(c *hold.Config) { c.Timeout = -time.Second },
		"dependent without finalizer": func(c *hold.Config) { c.Dependents[0].CleanupFinalizer = "" },
		"kind listed twice":           func(c *hold.Config) { c.Dependents = append(c.Dependents, c.Dependents[0]) },
		"kind not in scheme": func(c *hold.Config) {
			c.Dependents[0].Object = &apiextensionsv1.CustomResourceDefinition{}
		},
	}
	if _, err := hold.New(good()); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := good()
			mutate(&cfg)
			if _, err := hold.New(cfg); !errors.Is(err, hold.ErrConfig) {
				t.Errorf("New: err %v, want one wrapping ErrConfig", err)
			}
		})
	}
}
