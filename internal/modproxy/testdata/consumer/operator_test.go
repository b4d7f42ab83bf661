package main

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/config/crd"
	"github.com/finale-dev/finale/examples/keys/controller"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the manager's log is not what this test reads
	crds, err := crd.CRDs()
	if err != nil {
		panic(err)
	}
	// testenv's scheme knows CustomResourceDefinitions, which it installs.
	s := testenv.Scheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	testenv.Main(m, testenv.Options{CRDs: crds, Scheme: s},
		func(e *testenv.Env) error { env = e; return nil })
}

const token = "consumer-token-0123456789"

// TestNamespaceDeletionLeaksNothing: the keys made for a namespace's
// APIKeys are gone from the key service, with their cleanup records, once
// the namespace (its KeyServer and token Secret with it) is.
func TestNamespaceDeletionLeaksNothing(t *testing.T) {
	ctx := t.Context()
	svc, err := service.Start("", service.Options{Token: token, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	c := env.Client

	system := testenv.Namespace(t, c)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, mgr, system, true); err != nil {
		t.Fatal(err)
	}
	env.GoFor(t, mgr.Start)

	tenant := testenv.Namespace(t, c)
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "keys-token"}, StringData: map[string]string{"token": token}},
		&v1alpha1.KeyServer{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "keys"}, Spec: v1alpha1.KeyServerSpec{
			URL: svc.URL, TokenSecretRef: v1alpha1.TokenSecretReference{Name: "keys-token"}}},
	}
	const n = 3
	for i := range n {
		objs = append(objs, &v1alpha1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "key-" + strconv.Itoa(i)},
			Spec: v1alpha1.APIKeySpec{KeyServerRef: v1alpha1.KeyServerReference{Name: "keys"}, Name: "ci-" + strconv.Itoa(i), Scopes: []string{"read"}}})
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	store, err := ledger.NewConfigMapStore(c, system)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, "every APIKey to have its key, its finalizer and its record", func(ctx context.Context) (bool, error) {
		var keys v1alpha1.APIKeyList
		if err := c.List(ctx, &keys, client.InNamespace(tenant)); err != nil {
			return false, err
		}
		for _, k := range keys.Items {
			if !slices.Contains(k.Finalizers, controller.Finalizer) {
				return false, nil
			}
		}
		page, err := store.List(ctx, 0, "")
		return len(svc.Keys()) == n && len(page.Records) == n, err
	})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}
	if err := controlplane.DeleteAndWait(ctx, c, ns, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	page, err := store.List(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if left := svc.Keys(); len(left) != 0 || len(page.Records) != 0 {
		t.Fatalf("namespace gone, but %d key(s) left in the service (%v) and %d cleanup record(s) left", len(left), left, len(page.Records))
	}
}

func wait(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := controlplane.WaitFor(t.Context(), time.Minute, what, cond); err != nil {
		t.Fatal(err)
	}
}
