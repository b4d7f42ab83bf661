package controller_test

import (
	"context"
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
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
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
			case "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy":
				u.SetName(u.GetName() + "-" + ns)
				u.SetLabels(nil) // keep the test's user role out of edit/admin
			case "ValidatingAdmissionPolicyBinding":
				u.SetName(u.GetName() + "-" + ns)
				name, _, _ := unstructured.NestedString(u.Object, "spec", "policyName")
				_ = unstructured.SetNestedField(u.Object, name+"-"+ns, "spec", "policyName")
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
	// A generated password: the operator creates its Secret, under the
	// admission policy that allows it only such Secrets.
	r.Spec.Login = true
	r.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}}
	d := database(ns, "d", pgtarget.RandomName("rbac_"), r.Spec.RoleName)
	for _, o := range []client.Object{r, d} {
		w.create(o)
	}
	w.ready(r)
	w.ready(d)
	var nsNow corev1.Namespace
	if err := admin.Get(t.Context(), client.ObjectKey{Name: ns}, &nsNow); err != nil {
		t.Fatal(err)
	}
	if rec := w.record(string(r.UID)); rec == nil {
		t.Error("no record written under the operator's RBAC")
	} else if rec.NamespaceUID != nsNow.UID {
		t.Errorf("the record names namespace uid %q, want %q: the operator could not read its namespace, and every restore would need an admin", rec.NamespaceUID, nsNow.UID)
	}

	early := counter(t, "finale_hold_namespace_deletes_total", "", "")
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)
	if l := w.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}
	// The hold started the Role's and the Database's deletion itself, which
	// needs its RBAC to list Pods and delete them.
	if got := counter(t, "finale_hold_namespace_deletes_total", "", "") - early; got != 2 {
		t.Errorf("the hold started %v deletions in the terminating namespace, want 2 (the Role and the Database)", got)
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

// The operator's rights on Secrets are what it uses and no more: no update
// or delete (RBAC), and under the admission policy its patches change only
// finalizers and its creates make only a Role's basic-auth password
// Secret; never a service-account token Secret.
func TestOperatorSecretRightsAreNarrow(t *testing.T) {
	s := scheme()
	admin := testenv.Client(t, s)
	cp := testenv.ControlPlane(t)
	recNS := testenv.Namespace(t, admin)
	applyRBAC(t, admin, recNS)
	op, err := client.New(cp.AsServiceAccount(recNS, operatorSA), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, admin)
	userSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "credentials"}, Data: map[string][]byte{"password": []byte("s3cret")}}
	if err := admin.Create(t.Context(), userSecret); err != nil {
		t.Fatal(err)
	}
	owner := &v1alpha1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"},
		Spec:       v1alpha1.RoleSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: pgtarget.RandomName("own_")},
	}
	if err := admin.Create(t.Context(), owner); err != nil {
		t.Fatal(err)
	}
	patchData := func(ctx context.Context) error {
		var cur corev1.Secret
		if err := op.Get(ctx, client.ObjectKeyFromObject(userSecret), &cur); err != nil {
			return err
		}
		base := cur.DeepCopy()
		cur.Data["password"] = []byte("stolen")
		return op.Patch(ctx, &cur, client.MergeFrom(base))
	}
	// The policy takes effect a moment after it is created: wait until the
	// apiserver enforces it (the patch is refused) before the table.
	err = controlplane.WaitFor(t.Context(), wait, "admission policy in force", func(ctx context.Context) (bool, error) {
		err := patchData(ctx)
		if err != nil {
			return apierrors.IsForbidden(err), nil
		}
		var cur corev1.Secret // not yet: undo, and try again
		if err := admin.Get(ctx, client.ObjectKeyFromObject(userSecret), &cur); err != nil {
			return false, err
		}
		cur.Data["password"] = []byte("s3cret")
		return false, admin.Update(ctx, &cur)
	})
	if err != nil {
		t.Fatal(err)
	}

	keySecret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "record-key", Labels: map[string]string{"app.kubernetes.io/managed-by": "finale"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"key": []byte("k")}}
	}
	basicAuth := func(name string, owned bool) *corev1.Secret {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeBasicAuth,
			Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}}
		if owned {
			if err := controllerutil.SetControllerReference(owner, sec, s); err != nil {
				t.Fatal(err)
			}
		}
		return sec
	}
	ownedSecret := basicAuth("role-password", true)
	if err := admin.Create(t.Context(), ownedSecret); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		do      func(ctx context.Context) error
		allowed bool
	}{
		"patch a Secret's data": {do: patchData},
		"patch a Secret's labels": {do: func(ctx context.Context) error {
			var cur corev1.Secret
			if err := op.Get(ctx, client.ObjectKeyFromObject(userSecret), &cur); err != nil {
				return err
			}
			base := cur.DeepCopy()
			cur.Labels = map[string]string{"x": "y"}
			return op.Patch(ctx, &cur, client.MergeFrom(base))
		}},
		"patch a Secret's finalizers (the hold)": {allowed: true, do: func(ctx context.Context) error {
			var cur corev1.Secret
			if err := op.Get(ctx, client.ObjectKeyFromObject(userSecret), &cur); err != nil {
				return err
			}
			base := cur.DeepCopy()
			cur.Finalizers = append(cur.Finalizers, "hold.finale.dev/hold")
			if err := op.Patch(ctx, &cur, client.MergeFrom(base)); err != nil {
				return err
			}
			base = cur.DeepCopy()
			cur.Finalizers = nil
			return op.Patch(ctx, &cur, client.MergeFrom(base))
		}},
		"mark a Role's Secret's password applied": {allowed: true, do: func(ctx context.Context) error {
			return markApplied(ctx, op, ownedSecret)
		}},
		"mark a user's Secret's password applied": {do: func(ctx context.Context) error {
			return markApplied(ctx, op, userSecret)
		}},
		"update a Secret": {do: func(ctx context.Context) error {
			var cur corev1.Secret
			if err := op.Get(ctx, client.ObjectKeyFromObject(userSecret), &cur); err != nil {
				return err
			}
			return op.Update(ctx, &cur)
		}},
		"delete a Secret": {do: func(ctx context.Context) error { return op.Delete(ctx, userSecret.DeepCopy()) }},
		"create an Opaque Secret": {do: func(ctx context.Context) error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"}, Data: map[string][]byte{"k": []byte("v")}})
		}},
		"create a service-account token Secret": {do: func(ctx context.Context) error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken})
		}},
		"create a basic-auth Secret no Role controls": {do: func(ctx context.Context) error { return op.Create(ctx, basicAuth("unowned", false)) }},
		"create a finale-labelled Opaque Secret outside its namespace": {do: func(ctx context.Context) error {
			return op.Create(ctx, keySecret(ns))
		}},
		"create its record key in its own namespace": {allowed: true, do: func(ctx context.Context) error { return op.Create(ctx, keySecret(recNS)) }},
		"create a Role's password Secret":            {allowed: true, do: func(ctx context.Context) error { return op.Create(ctx, basicAuth("owned", true)) }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.do(t.Context())
			switch {
			case tc.allowed && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.allowed && !apierrors.IsForbidden(err):
				t.Errorf("got %v, want Forbidden", err)
			}
		})
	}
	var got corev1.Secret
	if err := admin.Get(t.Context(), client.ObjectKeyFromObject(userSecret), &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Data["password"]) != "s3cret" {
		t.Errorf("the user's Secret was changed: password %q", got.Data["password"])
	}
}

// markApplied patches the applied-password mark onto Secret s, as the Role
// adapter does once PostgreSQL has the password.
func markApplied(ctx context.Context, c client.Client, s *corev1.Secret) error {
	var cur corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		return err
	}
	base := cur.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[v1alpha1.AppliedPasswordAnnotation] = "mark"
	return c.Patch(ctx, &cur, client.MergeFrom(base))
}
