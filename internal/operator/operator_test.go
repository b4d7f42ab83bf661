package operator_test

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/operator"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The operator starts, its cache fills, and a Crash fault stops it: Stop
// then returns at once, and again on a second call.
func TestStartCrashStop(t *testing.T) {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	c := testenv.Client(t, testenv.Scheme())
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.InstallCRDs(t.Context(), c, crds...); err != nil {
		t.Fatal(err)
	}
	recNS := testenv.Namespace(t, c)
	script := faultinject.NewScript()
	r, err := operator.Start(t.Context(), operator.Options{
		Config: testenv.ControlPlane(t).Config, Scheme: s, Script: script, Namespaces: []string{recNS},
		Operator: controller.Options{RecordsNamespace: recNS, PoolName: "operator-test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitForCacheSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	var roles v1alpha1.RoleList
	if err := r.Cache.List(t.Context(), &roles, client.InNamespace(recNS)); err != nil {
		t.Fatalf("the synced cache cannot list Roles: %v", err)
	}
	if script.OnCrash == nil {
		t.Fatal("a Crash fault would not stop the operator: Script.OnCrash unset")
	}
	script.OnCrash()
	first := r.Stop()
	if second := r.Stop(); !errors.Is(second, first) && second != first {
		t.Fatalf("Stop returned %v, then %v", first, second)
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	if _, err := operator.Start(t.Context(), operator.Options{Config: testenv.ControlPlane(t).Config, Scheme: testenv.Scheme()}); err == nil {
		t.Fatal("started without a records namespace ($POD_NAMESPACE unset)")
	}
}
