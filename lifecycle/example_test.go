package lifecycle_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// A store of "buckets" in memory, standing in for an external service.
type buckets map[string]string // name -> ownership tag

// poolOf is the simplest Pool: one client for every key. Use a
// *clientpool.Pool in an operator, so that broken clients are evicted.
type poolOf[C any] struct{ c C }

func (p poolOf[C]) Do(ctx context.Context, _ string, fn func(context.Context, C) error) error {
	return fn(ctx, p.c)
}

// An adapter is the external service's verbs; the reconciler owns their
// order. This one manages a bucket per Widget.
func Example() {
	store := buckets{}
	adapter := lifecycle.AdapterFuncs[*Widget, string, buckets]{
		ConnectFn: func(_ context.Context, w *Widget) (lifecycle.Connection[string], error) {
			return lifecycle.Connection[string]{Key: "default", Parent: &corev1.ConfigMap{}}, nil
		},
		// A service computes the answer where it keeps its sentinel token;
		// this one keeps it in memory (see ledger.Respond).
		ProveFn: func(_ context.Context, b buckets, q ledger.Question) (ledger.Answer, error) {
			if q.Enroll != nil && b["sentinel"] == "" {
				b["sentinel"], b["salt"] = q.Enroll.Token, q.Enroll.Salt
			}
			a := ledger.Answer{Deployment: "example", Salt: b["salt"]}
			for name, t := range b {
				if q.Tag != "" && t == q.Tag {
					a.Tagged = append(a.Tagged, name)
				}
			}
			a.Response = ledger.Respond(b["sentinel"], q, a.Deployment, a.Salt, a.Tagged)
			return a, nil
		},
		ObserveFn: func(_ context.Context, b buckets, _ *Widget, tag string) (lifecycle.Observation, error) {
			var ids []string
			for name, t := range b {
				if t == tag {
					ids = append(ids, name)
				}
			}
			return lifecycle.Observation{IDs: ids, UpToDate: true}, nil
		},
		CreateFn: func(_ context.Context, b buckets, w *Widget, tag string) (string, error) {
			b[w.Spec.RoleName] = tag
			return w.Spec.RoleName, nil
		},
		UpdateFn: func(context.Context, buckets, *Widget, string, string) error { return nil },
		DeleteFn: func(_ context.Context, b buckets, id, tag string) error {
			if b[id] == tag { // only what carries the tag
				delete(b, id)
			}
			return nil
		},
	}
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&Widget{}).Build()
	_, err := lifecycle.New(c, func() *Widget { return &Widget{} }, adapter, poolOf[buckets]{store}, lifecycle.Options{
		Finalizer: "example.com/cleanup",
		Scheme:    s,
		// In an operator, pass Ledger, Hold and Watchdog (see the reference
		// operator in examples/postgres/controller). Leaving one out is a
		// choice New wants named.
		Skip: lifecycle.Unprotected,
	})
	fmt.Println(err)
	// Output: <nil>
}
