package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/lifecycle"
)

// errRejected is an error only the adopter's classifier knows: Auth.
var errRejected = errors.New("the service rejected the operator's token")

func classifyRejected(_ context.Context, err error) (errclass.Class, bool) {
	if errors.Is(err, errRejected) {
		return errclass.Auth, true
	}
	return "", false
}

// The classifier is given once, to the pool: the reconciler takes the
// pool's, and refuses another, which would report as Unknown what the pool
// evicts as Auth (an adopter gave it to the pool and forgot the reconciler,
// and nothing said so).
func TestReconcilerUsesThePoolsClassifier(t *testing.T) {
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	own := errclass.New(classifyRejected)
	pool, err := clientpool.New(clientpool.Options[string, int]{
		Name: "lifecycle-classifier", Classifier: own,
		Dial: clientpool.DialFn[string, int](func(context.Context, string) (int, error) { return 0, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	adapter := lifecycle.AdapterFuncs[*Widget, string, int]{
		ConnectFn: func(context.Context, *Widget) (lifecycle.Connection[string], error) {
			return lifecycle.Connection[string]{}, errRejected
		},
	}
	opts := func(c *errclass.Classifier) lifecycle.Options {
		return lifecycle.Options{Finalizer: "x/y", Scheme: s, Skip: lifecycle.Unprotected, Classifier: c}
	}

	t.Run("another is refused", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(s).Build()
		_, err := lifecycle.New(c, func() *Widget { return &Widget{} }, adapter, pool, opts(errclass.New()))
		if !errors.Is(err, lifecycle.ErrConfig) || !strings.Contains(err.Error(), "Options.Classifier differs from the pool's") {
			t.Fatalf("New = %v, want ErrConfig saying the classifier differs from the pool's", err)
		}
	})
	for name, given := range map[string]*errclass.Classifier{"none given": nil, "the same given": own} {
		t.Run(name, func(t *testing.T) {
			w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "uid-w"}}
			c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&Widget{}).WithObjects(w).Build()
			r, err := lifecycle.New(c, func() *Widget { return &Widget{} }, adapter, pool, opts(given))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)}); !errors.Is(err, errRejected) {
				t.Fatalf("Reconcile = %v, want the Connect error", err)
			}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(w), w); err != nil {
				t.Fatal(err)
			}
			synced := meta.FindStatusCondition(w.Status.Conditions, lifecycle.ConditionSynced)
			if synced == nil || !strings.HasPrefix(synced.Message, string(errclass.Auth)+" error") {
				t.Errorf("Synced = %+v, want the message to name the class the pool's classifier gives (Auth)", synced)
			}
		})
	}
}
