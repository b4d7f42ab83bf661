package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// roleAdapter is the Role kind's lifecycle adapter: everything else (the
// finalizer, the record, adoption, the hold, the watchdog, status) is
// lifecycle's. A role's ID is its name; every statement that changes or
// drops it first checks that it carries the tag.
type roleAdapter struct {
	servers
	passwords passwords
}

func (a roleAdapter) Connect(ctx context.Context, r *v1alpha1.Role) (lifecycle.Connection[Key], error) {
	return a.connect(ctx, r.Namespace, r.Spec.ServerRef.Name)
}

func (a roleAdapter) ConnectParent(ctx context.Context, p client.Object) (Key, error) {
	return a.key(ctx, p.(*v1alpha1.Server))
}

func (roleAdapter) Prove(ctx context.Context, c *Conn, q ledger.Question) (ledger.Answer, error) {
	a, err := catalog.Prove(ctx, c, roleSentinel, q)
	return a, actionable(err)
}

// Observe compares what PostgreSQL shows (login, connection limit) and, for
// a generated password, whether its Secret's password is the one applied
// (PostgreSQL cannot show a password; the Secret carries the mark of the
// last one applied): a deleted Secret or an edited password is not up to
// date, and Update applies it.
func (a roleAdapter) Observe(ctx context.Context, c *Conn, r *v1alpha1.Role, tag string) (lifecycle.Observation, error) {
	ids, err := catalog.FindRolesByTag(ctx, c, tag)
	if err != nil || len(ids) == 0 {
		return lifecycle.Observation{}, actionable(err)
	}
	got, _, err := catalog.ObserveRole(ctx, c, r.Spec.RoleName)
	upToDate := got.Login == r.Spec.Login && got.ConnectionLimit == connLimit(r)
	if err == nil && upToDate {
		upToDate, err = a.passwords.applied(ctx, r)
	}
	return lifecycle.Observation{IDs: ids, UpToDate: upToDate}, actionable(err)
}

func (a roleAdapter) Create(ctx context.Context, c *Conn, r *v1alpha1.Role, tag string) (string, error) {
	spec, err := a.spec(ctx, r)
	if err != nil {
		return "", err
	}
	return r.Spec.RoleName, actionable(catalog.CreateRole(ctx, c, spec, tag))
}

// Update applies the spec and the Secret's current password (never a new
// one while the Secret exists: an unrelated edit does not rotate it), then
// marks that password applied on a generated Secret.
func (a roleAdapter) Update(ctx context.Context, c *Conn, r *v1alpha1.Role, _, tag string) error {
	spec, err := a.spec(ctx, r)
	if err != nil {
		return err
	}
	if err := actionable(catalog.AlterRole(ctx, c, spec, tag)); err != nil {
		return err
	}
	return a.passwords.markApplied(ctx, r, spec.Password)
}

func (roleAdapter) Delete(ctx context.Context, c *Conn, id, tag string) error {
	return actionable(dropRole(ctx, c, id, tag))
}

func (roleAdapter) Retag(ctx context.Context, c *Conn, id, from, to string) error {
	return actionable(catalog.RetagRole(ctx, c, id, from, to))
}

func (a roleAdapter) spec(ctx context.Context, r *v1alpha1.Role) (catalog.RoleSpec, error) {
	pw, err := a.passwords.of(ctx, r)
	return catalog.RoleSpec{Name: r.Spec.RoleName, Login: r.Spec.Login, ConnectionLimit: connLimit(r), Password: pw}, err
}

func connLimit(r *v1alpha1.Role) int32 {
	if r.Spec.ConnectionLimit == nil {
		return -1
	}
	return *r.Spec.ConnectionLimit
}

// DeclareID lets the record hold the role's name before the create, saving
// the record write after it: a drop by ID checks the tag (dropRole), so a
// recorded name whose create failed, because it is someone else's say,
// neither touches their role nor blocks the deletion.
func (roleAdapter) DeclareID(r *v1alpha1.Role, _ string) (string, bool) {
	return r.Spec.RoleName, true
}
