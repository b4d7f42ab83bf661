package crd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	tv1 "github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
	"github.com/finale-dev/finale/examples/temporal/config/crd"
	"github.com/finale-dev/finale/internal/crdfile/crdfiletest"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestGeneratedFilesUpToDate fails when the deepcopy code or the CRD YAML
// no longer match what controller-gen makes of the types.
func TestGeneratedFilesUpToDate(t *testing.T) {
	names, err := crd.Files()
	if err != nil {
		t.Fatal(err)
	}
	crdfiletest.CheckGenerated(t, ".", names)
}

func setup(t *testing.T) (client.Client, string) {
	t.Helper()
	s := testenv.Scheme()
	utilruntime.Must(tv1.AddToScheme(s))
	c := testenv.Client(t, s)
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.InstallCRDs(t.Context(), c, crds...); err != nil {
		t.Fatal(err)
	}
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "temporal.finale.dev kinds to be served", func(ctx context.Context) (bool, error) {
		for _, l := range []client.ObjectList{&tv1.ConnectionList{}, &tv1.WorkerDeploymentList{}} {
			if err := c.List(ctx, l); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, testenv.Namespace(t, c)
}

func connection(ns, hostPort string) *tv1.Connection {
	return &tv1.Connection{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "conn-"},
		Spec:       tv1.ConnectionSpec{HostPort: hostPort, APIKeySecretRef: tv1.SecretKeySelector{Name: "key"}},
	}
}

func deployment(ns, name string) *tv1.WorkerDeployment {
	return &tv1.WorkerDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "wd-"},
		Spec: tv1.WorkerDeploymentSpec{
			ConnectionRef: tv1.ConnectionReference{Name: "main"}, TemporalNamespace: "default", DeploymentName: name,
		},
	}
}

// TestSchema: defaults are filled in, bad specs are refused at admission
// with a message that says what to do, and the names are immutable.
func TestSchema(t *testing.T) {
	c, ns := setup(t)
	good := connection(ns, "temporal.example.com:7233")
	if err := c.Create(t.Context(), good); err != nil {
		t.Fatalf("valid Connection refused: %v", err)
	}
	if got := good.Spec.APIKeySecretRef.Key; got != tv1.DefaultAPIKeySecretKey {
		t.Errorf("apiKeySecretRef.key defaulted to %q, want %q", got, tv1.DefaultAPIKeySecretKey)
	}
	refused := map[string]struct {
		obj  client.Object
		want string
	}{
		"hostPort with a scheme":  {obj: connection(ns, "https://temporal.example.com:7233"), want: "hostPort must be host:port"},
		"hostPort without port":   {obj: connection(ns, "temporal.example.com"), want: "hostPort must be host:port"},
		"deployment without name": {obj: deployment(ns, ""), want: "spec.deploymentName"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			err := c.Create(t.Context(), tc.obj)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want refused with %q", err, tc.want)
			}
		})
	}
	d := deployment(ns, "orders")
	if err := c.Create(t.Context(), d); err != nil {
		t.Fatalf("valid WorkerDeployment refused: %v", err)
	}
	for field, mutate := range map[string]func(*tv1.WorkerDeployment){
		"deploymentName is immutable":    func(w *tv1.WorkerDeployment) { w.Spec.DeploymentName = "other" },
		"temporalNamespace is immutable": func(w *tv1.WorkerDeployment) { w.Spec.TemporalNamespace = "other" },
		"connectionRef is immutable":     func(w *tv1.WorkerDeployment) { w.Spec.ConnectionRef.Name = "other" },
	} {
		t.Run(field, func(t *testing.T) {
			w := d.DeepCopy()
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(w), w); err != nil {
				t.Fatal(err)
			}
			mutate(w)
			if err := c.Update(t.Context(), w); err == nil || !strings.Contains(err.Error(), field) {
				t.Fatalf("got %v, want refused with %q", err, field)
			}
		})
	}
}
