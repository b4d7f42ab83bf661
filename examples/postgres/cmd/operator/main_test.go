package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
)

// asOperator makes the test binary act as the operator binary, so the test
// runs the real main against a kubeconfig without a separate build.
const asOperator = "FINALE_TEST_RUN_OPERATOR"

// cachingSecrets, with asOperator, runs the operator as it was before
// Secrets were cached as metadata only (a typed informer of every Secret, no cache options): the
// baseline of BenchmarkOperatorMemoryWithSecrets.
const cachingSecrets = "FINALE_TEST_OPERATOR_CACHES_SECRETS"

func TestMain(m *testing.M) {
	if os.Getenv(asOperator) == "1" {
		if os.Getenv(cachingSecrets) == "1" {
			if err := runCachingSecrets(flagsAfterDashes()); err != nil {
				fmt.Fprintln(os.Stderr, "operator:", err)
				os.Exit(1)
			}
			return
		}
		os.Args = append([]string{os.Args[0]}, flagsAfterDashes()...)
		main()
		return
	}
	testenv.Main(m)
}

func flagsAfterDashes() []string {
	for i, a := range os.Args {
		if a == "--" {
			return os.Args[i+1:]
		}
	}
	return nil
}

// stack is the real stack the operator binary runs on: the control plane
// with the reference operator's CRDs, PostgreSQL, and an admin client.
func stack(tb testing.TB) (*controlplane.ControlPlane, *pgserver.Server, client.Client) {
	tb.Helper()
	cp := testenv.ControlPlane(tb)
	pg := testenv.Postgres(tb)
	s := testenv.Scheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	c := testenv.Client(tb, s)
	crds, err := crd.CRDs()
	if err != nil {
		tb.Fatal(err)
	}
	if err := controlplane.InstallCRDs(tb.Context(), c, crds...); err != nil {
		tb.Fatal(err)
	}
	return cp, pg, c
}

// The operator binary, given only a kubeconfig file and POD_NAMESPACE,
// creates a Role in PostgreSQL with its tag and a record, and drops it on
// delete.
func TestOperatorBinaryAgainstKubeconfig(t *testing.T) {
	cp, pg, c := stack(t)
	recNS := testenv.Namespace(t, c)

	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "--kubeconfig", cp.Kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = append(os.Environ(), asOperator+"=1", ledger.NamespaceEnv+"="+recNS)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})

	ns := testenv.Namespace(t, c)
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"}, Data: map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(pg.Password)}},
		&v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, Spec: v1alpha1.ServerSpec{Host: pg.Host, Port: int32(pg.Port), SSLMode: v1alpha1.SSLModeDisable, CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "admin"}}},
	} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	r := &v1alpha1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: v1alpha1.RoleSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: pgtarget.RandomName("bin_")}}
	if err := c.Create(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	err := controlplane.WaitFor(t.Context(), 90*time.Second, "Role Ready", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("%v; conditions %+v", err, r.Status.Conditions)
	}
	admin, err := pgx.Connect(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	got, ok, err := catalog.ObserveRole(t.Context(), admin, r.Spec.RoleName)
	if err != nil || !ok || got.Tag != ledger.TagPrefix+"role:"+string(r.UID) {
		t.Fatalf("role %s: %+v exists %v err %v", r.Spec.RoleName, got, ok, err)
	}
	var cms corev1.ConfigMapList
	if err := c.List(t.Context(), &cms, client.InNamespace(recNS)); err != nil || len(cms.Items) != 1 {
		t.Fatalf("records in %s: %d (err %v), want 1", recNS, len(cms.Items), err)
	}

	if err := c.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(t.Context(), c, r, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := catalog.ObserveRole(t.Context(), admin, r.Spec.RoleName); err != nil || ok {
		t.Fatalf("role %s still exists (err %v)", r.Spec.RoleName, err)
	}
}
