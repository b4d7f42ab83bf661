package controller_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/lifecycle"
)

// The generated-password contract, rule by rule on
// the real stack, each proved by logging in to PostgreSQL with the password
// the Secret holds. Before the fix a deleted Secret was not recreated while
// the Role stayed Ready, an edited password was never applied, and the next
// unrelated edit silently generated and applied a new one.
func TestGeneratedPasswordContract(t *testing.T) {
	w := start(t, controller.Options{})
	ns := w.server()
	r := role(ns, "app", pgtarget.RandomName("pw_"))
	r.Spec.Login = true
	r.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}}
	w.create(r)
	w.ready(r)

	first := w.secret(ns, r.GeneratedSecretName())
	if !metav1.IsControlledBy(first, r) {
		t.Fatalf("generated Secret's owners %+v: not controlled by the Role", first.OwnerReferences)
	}
	pw1 := string(first.Data[v1alpha1.DefaultPasswordSecretKey])
	w.waitLogin(r.Spec.RoleName, pw1)
	// The mark follows the first statement that applied the password.
	w.waitSecret(ns, r.GeneratedSecretName(), "the applied mark", func(s *corev1.Secret) bool {
		return s.Annotations[v1alpha1.AppliedPasswordAnnotation] != ""
	})

	// 1. An unrelated edit keeps the password.
	w.editRole(r, func(r *v1alpha1.Role) { r.Spec.ConnectionLimit = ptr.To[int32](5) })
	w.waitConnLimit(r.Spec.RoleName, 5)
	w.ready(r)
	if s := w.secret(ns, r.GeneratedSecretName()); s.UID != first.UID || string(s.Data[v1alpha1.DefaultPasswordSecretKey]) != pw1 {
		t.Errorf("after an unrelated edit: Secret uid %s, password kept %v; want the first Secret %s with its password",
			s.UID, string(s.Data[v1alpha1.DefaultPasswordSecretKey]) == pw1, first.UID)
	}
	w.mustLogin(r.Spec.RoleName, pw1)

	// 2. A deleted Secret is recreated, and its new password applied.
	if err := w.c.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	second := w.waitSecret(ns, r.GeneratedSecretName(), "a new generated Secret after the first was deleted", func(s *corev1.Secret) bool { return s.UID != first.UID })
	if !metav1.IsControlledBy(second, r) {
		t.Errorf("recreated Secret's owners %+v: not controlled by the Role", second.OwnerReferences)
	}
	pw2 := string(second.Data[v1alpha1.DefaultPasswordSecretKey])
	if pw2 == pw1 || len(pw2) != v1alpha1.DefaultGeneratedPasswordLength {
		t.Fatalf("recreated Secret's password: same as before %v, length %d; want a new one of %d", pw2 == pw1, len(pw2), v1alpha1.DefaultGeneratedPasswordLength)
	}
	w.waitLogin(r.Spec.RoleName, pw2)
	w.mustNotLogin(r.Spec.RoleName, pw1)
	w.ready(r)

	// 3. An edited password is applied.
	edited := "edited-" + rand.Text()
	s := w.secret(ns, r.GeneratedSecretName())
	s.Data[v1alpha1.DefaultPasswordSecretKey] = []byte(edited)
	if err := w.c.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	w.waitLogin(r.Spec.RoleName, edited)
	w.mustNotLogin(r.Spec.RoleName, pw2)
	w.ready(r)

	// 4. An unrelated edit after that keeps the edited password.
	w.editRole(r, func(r *v1alpha1.Role) { r.Spec.ConnectionLimit = ptr.To[int32](7) })
	w.waitConnLimit(r.Spec.RoleName, 7)
	if got := string(w.secret(ns, r.GeneratedSecretName()).Data[v1alpha1.DefaultPasswordSecretKey]); got != edited {
		t.Errorf("the Secret's password changed after an unrelated edit")
	}
	w.mustLogin(r.Spec.RoleName, edited)
}

// A Secret of the generated name that the Role does not control is never
// adopted, whoever created it: the Role
// reports PasswordSecretNotOwned, creates no role, and leaves the Secret
// as it was. Before the fix the Role took the planted password.
func TestGeneratedPasswordSecretNotOwnedIsRefused(t *testing.T) {
	n := &reconciles{n: map[types.NamespacedName]int{}}
	w := start(t, controller.Options{WrapReconciler: n.wrap})
	ns := w.server()
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app" + v1alpha1.GeneratedSecretSuffix},
		Data:       map[string][]byte{"username": []byte("someone"), v1alpha1.DefaultPasswordSecretKey: []byte("planted-" + rand.Text())},
	}
	w.create(planted)
	r := role(ns, "app", pgtarget.RandomName("pw_"))
	r.Spec.Login = true
	r.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{}}
	w.create(r)
	w.waitCondition(r, lifecycle.ConditionSynced, metav1.ConditionFalse, controller.ReasonPasswordSecretNotOwned)
	if _, ok := w.roleTag(r.Spec.RoleName); ok {
		t.Error("the role was created with a password from a Secret it does not own")
	}
	w.untouched(planted, client.ObjectKeyFromObject(r), n)

	// The Secret goes: the Role generates its own and is Ready.
	if err := w.c.Delete(t.Context(), planted); err != nil {
		t.Fatal(err)
	}
	w.ready(r)
	own := w.secret(ns, r.GeneratedSecretName())
	if !metav1.IsControlledBy(own, r) || own.UID == planted.UID {
		t.Fatalf("Secret %s (uid %s) after the planted one went: owners %+v; want a new Secret controlled by the Role", own.Name, own.UID, own.OwnerReferences)
	}
	pw := string(own.Data[v1alpha1.DefaultPasswordSecretKey])
	w.waitLogin(r.Spec.RoleName, pw)

	// Another Role naming that Secret is refused too: another Role's
	// Secret is not its own.
	other := role(ns, "other", pgtarget.RandomName("pw_"))
	other.Spec.Login = true
	other.Spec.Password = &v1alpha1.RolePassword{Generate: &v1alpha1.GeneratedPassword{SecretName: own.Name}}
	w.create(other)
	w.waitCondition(other, lifecycle.ConditionSynced, metav1.ConditionFalse, controller.ReasonPasswordSecretNotOwned)
	if _, ok := w.roleTag(other.Spec.RoleName); ok {
		t.Error("a second Role took the first Role's generated Secret")
	}
	w.waitSecret(ns, own.Name, "the first Role's mark", func(s *corev1.Secret) bool {
		return s.Annotations[v1alpha1.AppliedPasswordAnnotation] != ""
	})
	w.untouched(w.secret(ns, own.Name), client.ObjectKeyFromObject(other), n) // as it is now: nothing more may change
	w.mustLogin(r.Spec.RoleName, pw)
}

func (w *world) secret(ns, name string) *corev1.Secret {
	w.t.Helper()
	var s corev1.Secret
	if err := w.c.Get(w.t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		w.t.Fatalf("Secret %s/%s: %v", ns, name, err)
	}
	return &s
}

// waitSecret waits until the Secret exists and cond holds.
func (w *world) waitSecret(ns, name, what string, cond func(*corev1.Secret) bool) *corev1.Secret {
	w.t.Helper()
	var s corev1.Secret
	err := controlplane.WaitFor(w.t.Context(), wait, what, func(ctx context.Context) (bool, error) {
		err := w.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cond(&s), err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return &s
}

// untouched checks, once the refused Role was reconciled twice more (its
// NeedsAction retry), that s is exactly as written: same resourceVersion,
// so no owner, mark or data added.
func (w *world) untouched(s *corev1.Secret, refused types.NamespacedName, n *reconciles) {
	w.t.Helper()
	before := n.of(refused)
	err := controlplane.WaitFor(w.t.Context(), wait, "two further reconciles of the refused Role", func(context.Context) (bool, error) {
		return n.of(refused) >= before+2, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	now := w.secret(s.Namespace, s.Name)
	if now.ResourceVersion != s.ResourceVersion {
		w.t.Errorf("Secret %s was written by the operator: resourceVersion %s -> %s, owners %+v, mark %q",
			s.Name, s.ResourceVersion, now.ResourceVersion, now.OwnerReferences, now.Annotations[v1alpha1.AppliedPasswordAnnotation])
	}
}

// reconciles counts the Role controller's finished reconciles per object.
type reconciles struct {
	mu sync.Mutex
	// n is guarded by mu.
	n map[types.NamespacedName]int
}

func (c *reconciles) wrap(name string, r reconcile.Reconciler) reconcile.Reconciler {
	if name != controller.ControllerRole {
		return r
	}
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		c.mu.Lock()
		c.n[req.NamespacedName]++
		c.mu.Unlock()
		return res, err
	})
}

func (c *reconciles) of(k types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (w *world) editRole(r *v1alpha1.Role, edit func(*v1alpha1.Role)) {
	w.t.Helper()
	if err := w.c.Get(w.t.Context(), client.ObjectKeyFromObject(r), r); err != nil {
		w.t.Fatal(err)
	}
	edit(r)
	if err := w.c.Update(w.t.Context(), r); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) waitConnLimit(roleName string, limit int32) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, "connection limit applied", func(ctx context.Context) (bool, error) {
		var got int32
		err := w.admin.QueryRow(ctx, "SELECT rolconnlimit FROM pg_roles WHERE rolname = $1", roleName).Scan(&got)
		return got == limit, err
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// login logs in as user with password to the postgres database over TCP
// (scram-sha-256), and reports whether the server accepted it; any other
// failure fails the test.
func (w *world) login(user, password string) bool {
	w.t.Helper()
	cfg, err := pgx.ParseConfig(w.pg.DSNVia(w.pg.Addr(), "postgres"))
	if err != nil {
		w.t.Fatal(err)
	}
	cfg.User, cfg.Password = user, password
	conn, err := pgx.ConnectConfig(w.t.Context(), cfg)
	if err == nil {
		_ = conn.Close(context.Background())
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != sqlstateInvalidPassword {
		w.t.Fatalf("log in as %s: %v (want success or invalid_password)", user, err)
	}
	return false
}

// sqlstateInvalidPassword is PostgreSQL's invalid_password: the server
// refused the password (not the network, not a missing role).
const sqlstateInvalidPassword = "28P01"

func (w *world) waitLogin(user, password string) {
	w.t.Helper()
	err := controlplane.WaitFor(w.t.Context(), wait, "log in as "+user+" with the Secret's password", func(context.Context) (bool, error) {
		return w.login(user, password), nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) mustLogin(user, password string) {
	w.t.Helper()
	if !w.login(user, password) {
		w.t.Errorf("log in as %s with the Secret's password: refused", user)
	}
}

func (w *world) mustNotLogin(user, password string) {
	w.t.Helper()
	if w.login(user, password) {
		w.t.Errorf("log in as %s with the replaced password: accepted", user)
	}
}
