package operator_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/scenarios/internal/operator"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// prepare returns the operator's scheme and a fresh records namespace,
// the operator's CRDs installed.
func prepare(t *testing.T) (*runtime.Scheme, string) {
	t.Helper()
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
	return s, testenv.Namespace(t, c)
}

// The operator starts, its cache fills, and a Crash fault stops it: Stop
// then returns at once, and again on a second call.
func TestStartCrashStop(t *testing.T) {
	s, recNS := prepare(t)
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
	if _, err := operator.Start(t.Context(), operator.Options{Scheme: testenv.Scheme()}); err == nil {
		t.Fatal("started without a Config")
	}
}

// Stop closes the connections the operator opened, as its process's exit
// would, so that a restarted operator dials afresh: in campaign seeds 328
// and 477 three starts after the heal each failed on the same dead pooled
// connection ("write: broken pipe"), as no new pod ever would.
func TestStopClosesConnections(t *testing.T) {
	s, recNS := prepare(t)
	cp := testenv.ControlPlane(t)
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The front counts the operator's connections to the apiserver.
	front, err := faultinject.NewLagProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Close() })
	cfg := rest.CopyConfig(cp.Config)
	cfg.Host = "https://" + front.Addr()
	for i := range 2 {
		r, err := operator.Start(t.Context(), operator.Options{
			Config: cfg, Scheme: s, Namespaces: []string{recNS},
			Operator: controller.Options{RecordsNamespace: recNS, PoolName: fmt.Sprintf("operator-test-%d", i)},
		})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if err := r.WaitForCacheSync(t.Context()); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if front.Active() == 0 {
			t.Fatalf("start %d: the operator's cache synced with no connection through the front", i)
		}
		if err := r.Stop(); err != nil {
			t.Fatalf("start %d: stop: %v", i, err)
		}
		// Well under client-go's 90 s idle timeout, which would close
		// them too, too late for a restart.
		if err := controlplane.WaitFor(t.Context(), 10*time.Second, "the stopped operator's connections closed", func(context.Context) (bool, error) {
			return front.Active() == 0, nil
		}); err != nil {
			t.Fatalf("start %d: %v (%d still open)", i, err, front.Active())
		}
	}
}
