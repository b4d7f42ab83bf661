package hold_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/hold"
)

// Example configures a hold for a "Connection" parent whose credentials are
// in spec.secretRef, used by "Key" dependents through spec.connection, and
// shows the calls a Key reconciler makes on deletion.
func Example() {
	kind := func(k string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.dev", Version: "v1", Kind: k})
		return u
	}
	field := func(name string) func(client.Object) string {
		return func(o client.Object) string {
			s, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "spec", name)
			return s
		}
	}
	h, err := hold.New(hold.Config{
		Parent:     kind("Connection"),
		SecretName: field("secretRef"),
		Dependents: []hold.Dependent{{
			Object:           kind("Key"),
			ParentName:       field("connection"),
			CleanupFinalizer: "example.dev/delete-key",
		}},
		Scheme: clientgoscheme.Scheme,
		Clock:  clock.RealClock{},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.Finalizer(), h.Timeout())

	// In main: h.SetupWithManager(mgr) registers the field indexes and the
	// Connection and Secret controllers.
	_ = func(mgr ctrl.Manager) error { return h.SetupWithManager(mgr) }

	// In the Key reconciler, once the Key is being deleted and its parent
	// (nil when gone) has been read:
	_ = func(ctx context.Context, c client.Client, key, parent client.Object) (reconcile.Result, error) {
		if h.ShouldReleaseWithoutDelete(parent) {
			// The ledger record stays for the sweeper.
			return reconcile.Result{}, h.ReleaseWithoutDelete(ctx, c, key, field("connection")(key))
		}
		pass, cancel := h.PassContext(ctx, parent)
		err := deleteExternalKey(pass)
		cancel()
		if err != nil {
			// Counted from now, the end of the pass; never past the hold end.
			return reconcile.Result{RequeueAfter: h.RetryAfter(parent, 10*time.Second)}, nil
		}
		return reconcile.Result{}, nil // then remove the cleanup finalizer
	}
	// Output: hold.finale.dev/hold 10m0s
}

func deleteExternalKey(context.Context) error { return nil }
