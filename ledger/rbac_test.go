package ledger_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
)

// TestMain shares one control plane among the package's tests.
func TestMain(m *testing.M) { testenv.Main(m) }

// manifests reads the shipped RBAC manifests, moved into namespace ns.
func manifests(t *testing.T, ns string) []client.Object {
	t.Helper()
	files, err := filepath.Glob("../config/rbac/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in ../config/rbac: %v", err)
	}
	var objs []client.Object
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj client.Object
			switch meta.Kind {
			case "ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "Role":
				obj = &rbacv1.Role{}
			case "RoleBinding":
				obj = &rbacv1.RoleBinding{}
			case "ClusterRole":
				obj = &rbacv1.ClusterRole{}
			default:
				t.Fatalf("%s: unexpected kind %q", f, meta.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj.GetNamespace() != "" {
				obj.SetNamespace(ns)
			}
			if rb, ok := obj.(*rbacv1.RoleBinding); ok {
				for i := range rb.Subjects {
					rb.Subjects[i].Namespace = ns
				}
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

func TestOnlyTheOperatorWritesRecords(t *testing.T) {
	cp := testenv.ControlPlane(t)
	admin := testenv.Client(t, testenv.Scheme())
	opNS := testenv.Namespace(t, admin)
	userNS := testenv.Namespace(t, admin)
	var operatorSA string
	for _, obj := range manifests(t, opNS) {
		if sa, ok := obj.(*corev1.ServiceAccount); ok {
			operatorSA = sa.Name
		}
		if err := admin.Create(t.Context(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if operatorSA == "" {
		t.Fatal("manifests ship no ServiceAccount")
	}
	// The worst case for users: the user-facing role bound cluster-wide,
	// and additionally inside the operator's namespace.
	const user = "alice"
	bindings := []client.Object{
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "finale-user-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "finale-user"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: user, Namespace: userNS}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: "finale-user"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "finale-user"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: user, Namespace: userNS}},
		},
	}
	for _, b := range bindings {
		if err := admin.Create(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	asOperator, err := client.New(cp.AsServiceAccount(opNS, operatorSA), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	asUser, err := client.New(cp.AsServiceAccount(userNS, user), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	// The operator can write a record (waiting out RBAC propagation, which
	// also covers the user's bindings, created first).
	store, err := ledger.NewConfigMapStore(asOperator, opNS)
	if err != nil {
		t.Fatal(err)
	}
	owner := ledger.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: userNS, Name: "o", UID: "aaaaaaaa-0000-0000-0000-000000000001"}
	// A consistent record for the store alone (never signed).
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rec := &ledger.Record{Schema: ledger.SchemaVersion, Owner: owner, Policy: ledger.PolicyDelete, Deployment: "dep", Salt: "salt",
		Tag: ledger.Tag(owner), CreatedAt: t0, LastCreateAttempt: t0}
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "operator to create a record", func(ctx context.Context) (bool, error) {
		err := store.Put(ctx, rec)
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}

	// The user can neither create, update, patch nor delete records.
	name := ledger.ConfigMapName(owner.UID)
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: ledger.ConfigMapName("bbbbbbbb-0000-0000-0000-000000000002"),
		Labels: map[string]string{ledger.LabelRecord: ledger.LabelRecordValue}}}
	var existing corev1.ConfigMap
	if err := admin.Get(t.Context(), client.ObjectKey{Namespace: opNS, Name: name}, &existing); err != nil {
		t.Fatal(err)
	}
	edited := existing.DeepCopy()
	edited.Data["deployment"] = "attacker"
	for what, call := range map[string]func() error{
		"create": func() error { return asUser.Create(t.Context(), forged) },
		"update": func() error { return asUser.Update(t.Context(), edited.DeepCopy()) },
		"patch": func() error {
			return asUser.Patch(t.Context(), existing.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"deployment":"attacker"}}`)))
		},
		"delete":     func() error { return asUser.Delete(t.Context(), existing.DeepCopy()) },
		"delete all": func() error { return asUser.DeleteAllOf(t.Context(), &corev1.ConfigMap{}, client.InNamespace(opNS)) },
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("user %s of a record: %v, want Forbidden", what, err)
		}
	}
	got, err := store.Get(t.Context(), owner.UID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Deployment != "dep" {
		t.Errorf("record deployment = %q after the user's attempts", got.Deployment)
	}
	// And the operator can update and delete it.
	got.ExternalIDs = []string{"x"}
	if err := store.Put(t.Context(), got); err != nil {
		t.Fatalf("operator update: %v", err)
	}
	if err := store.Delete(t.Context(), got); err != nil {
		t.Fatalf("operator delete: %v", err)
	}
}
