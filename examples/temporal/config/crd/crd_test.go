package crd_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	tv1 "github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
	"github.com/finale-dev/finale/examples/temporal/config/crd"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestGeneratedFilesUpToDate fails when the deepcopy code or the CRD YAML no
// longer match what controller-gen makes of the types.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := filepath.Dir(goEnv(t, "GOMOD"))
	tmp := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "run", crd.ControllerGen,
		"object", "paths=./examples/temporal/api/...",
		"crd:crdVersions=v1",
		"output:object:dir="+filepath.Join(tmp, "object"),
		"output:crd:dir="+filepath.Join(tmp, "crd"))
	cmd.Dir = root
	// Tests reach no network but loopback: controller-gen comes from the
	// module cache, served as a file proxy (as in examples/postgres).
	cmd.Env = append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(goEnv(t, "GOMODCACHE"))+"/cache/download", "GOSUMDB=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run %s from the module cache: %v\n%s\nIf it is not in the cache, run `make generate` once with network access.", crd.ControllerGen, err, out)
	}
	pairs := map[string]string{
		filepath.Join(tmp, "object", "zz_generated.deepcopy.go"): filepath.Join(root, "examples/temporal/api/v1alpha1/zz_generated.deepcopy.go"),
	}
	names, err := crd.Files()
	if err != nil {
		t.Fatal(err)
	}
	generated, err := filepath.Glob(filepath.Join(tmp, "crd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var genNames []string
	for _, g := range generated {
		genNames = append(genNames, filepath.Base(g))
		pairs[g] = filepath.Join(root, "examples/temporal/config/crd", filepath.Base(g))
	}
	if diff := cmp.Diff(genNames, names); diff != "" {
		t.Errorf("CRD files differ from what controller-gen generates; run make generate (-want +got):\n%s", diff)
	}
	for gen, committed := range pairs {
		want, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Errorf("%s: %v; run make generate", committed, err)
			continue
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s is stale; run make generate (-want +got):\n%s", committed, cmp.Diff(string(want), string(got)))
		}
	}
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
