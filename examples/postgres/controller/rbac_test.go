package controller_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/internal/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
)

const operatorSA = "finale-postgres-operator"

// applyRBAC applies config/rbac with the operator in namespace ns; the
// cluster-scoped names get ns as a suffix so tests do not collide.
func applyRBAC(t testing.TB, c client.Client, ns string) {
	t.Helper()
	files, err := filepath.Glob("../config/rbac/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("rbac manifests: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch u.GetKind() {
			case "ClusterRole", "ClusterRoleBinding":
				u.SetName(u.GetName() + "-" + ns)
				u.SetLabels(nil) // keep the test's user role out of edit/admin
			default:
				u.SetNamespace(ns)
			}
			if ref, ok, _ := unstructured.NestedString(u.Object, "roleRef", "kind"); ok && ref == "ClusterRole" {
				name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
				_ = unstructured.SetNestedField(u.Object, name+"-"+ns, "roleRef", "name")
			}
			if subs, ok, _ := unstructured.NestedSlice(u.Object, "subjects"); ok {
				for _, s := range subs {
					s.(map[string]any)["namespace"] = ns
				}
				_ = unstructured.SetNestedSlice(u.Object, subs, "subjects")
			}
			if err := c.Create(t.Context(), u); err != nil {
				t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// The operator runs with nothing but the RBAC it ships: creates, deletes
// and a namespace deletion work; and the records are its alone (a user of
// the kinds cannot write them, and the operator cannot write ConfigMaps
// outside its namespace).
func TestOperatorRunsWithItsOwnRBAC(t *testing.T) {
	s := scheme()
	admin := testenv.Client(t, s)
	cp := testenv.ControlPlane(t)
	w := startAs(t, controller.Options{}, func(recNS string) *rest.Config {
		applyRBAC(t, admin, recNS)
		return cp.AsServiceAccount(recNS, operatorSA)
	})
	ns := w.server()
	r := role(ns, "r", pgtarget.RandomName("rbac_"))
	d := database(ns, "d", pgtarget.RandomName("rbac_"), r.Spec.RoleName)
	for _, o := range []client.Object{r, d} {
		w.create(o)
	}
	w.ready(r)
	w.ready(d)
	if w.record(string(r.UID)) == nil {
		t.Error("no record written under the operator's RBAC")
	}

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)
	if l := w.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}

	// Records are writable only by the operator.
	userNS := testenv.Namespace(t, admin)
	bind := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": map[string]any{"name": "alice-postgres", "namespace": w.recNS},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "finale-postgres-user-" + w.recNS},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "alice", "namespace": userNS}},
	}}
	if err := admin.Create(t.Context(), bind); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		cfg *rest.Config
		ns  string
	}{
		"user of the kinds, in the records namespace": {cfg: cp.AsServiceAccount(userNS, "alice"), ns: w.recNS},
		"operator, outside its namespace":             {cfg: cp.AsServiceAccount(w.recNS, operatorSA), ns: userNS},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := client.New(tc.cfg, client.Options{Scheme: s})
			if err != nil {
				t.Fatal(err)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tc.ns, Name: "finale-cleanup-forged"}}
			if err := c.Create(t.Context(), cm); !apierrors.IsForbidden(err) {
				t.Errorf("create ConfigMap in %s: %v, want Forbidden", tc.ns, err)
			}
		})
	}
	// The user can still use the kinds it was given (the binding works).
	alice, err := client.New(cp.AsServiceAccount(userNS, "alice"), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.List(t.Context(), &v1alpha1.RoleList{}, client.InNamespace(w.recNS)); err != nil {
		t.Errorf("alice lists Roles in %s: %v", w.recNS, err)
	}
}
