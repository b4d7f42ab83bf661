package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// databaseAdapter is the Database kind's lifecycle adapter. A database's
// ID is its name; its create passes through a pending name derived from
// the tag (catalog.CreateDatabase), which DropDatabase also drops.
type databaseAdapter struct {
	servers
}

func (a databaseAdapter) Connect(ctx context.Context, d *v1alpha1.Database) (lifecycle.Connection[Key], error) {
	return a.connect(ctx, d.Namespace, d.Spec.ServerRef.Name)
}

func (a databaseAdapter) ConnectParent(ctx context.Context, p client.Object) (Key, error) {
	return a.key(ctx, p.(*v1alpha1.Server))
}

func (databaseAdapter) Prove(ctx context.Context, c *Conn, q ledger.Question) (ledger.Answer, error) {
	a, err := catalog.Prove(ctx, c, databaseSentinel, q)
	return a, actionable(err)
}

func (databaseAdapter) Observe(ctx context.Context, c *Conn, d *v1alpha1.Database, tag string) (lifecycle.Observation, error) {
	ids, err := catalog.FindDatabasesByTag(ctx, c, tag)
	if err != nil || len(ids) == 0 {
		return lifecycle.Observation{}, actionable(err)
	}
	got, ok, err := catalog.ObserveDatabase(ctx, c, d.Spec.DatabaseName)
	// A create interrupted before its rename is found by tag under its
	// pending name; it is not up to date until CreateDatabase finishes it.
	upToDate := ok && got.Tag == tag && (d.Spec.Owner == "" || got.Owner == d.Spec.Owner)
	return lifecycle.Observation{IDs: ids, UpToDate: upToDate}, actionable(err)
}

func (databaseAdapter) Create(ctx context.Context, c *Conn, d *v1alpha1.Database, tag string) (string, error) {
	spec := catalog.DatabaseSpec{Name: d.Spec.DatabaseName, Owner: d.Spec.Owner}
	return d.Spec.DatabaseName, actionable(catalog.CreateDatabase(ctx, c, spec, tag))
}

func (databaseAdapter) Update(ctx context.Context, c *Conn, d *v1alpha1.Database, _, tag string) error {
	spec := catalog.DatabaseSpec{Name: d.Spec.DatabaseName, Owner: d.Spec.Owner}
	if err := catalog.CreateDatabase(ctx, c, spec, tag); err != nil { // finishes a pending create
		return actionable(err)
	}
	if d.Spec.Owner == "" {
		return nil
	}
	return actionable(catalog.AlterDatabaseOwner(ctx, c, d.Spec.DatabaseName, d.Spec.Owner, tag))
}

// Delete drops the database id while it carries tag, and the pending name
// of an interrupted create under tag, tagged or not.
func (databaseAdapter) Delete(ctx context.Context, c *Conn, id, tag string) error {
	return actionable(catalog.DropDatabase(ctx, c, id, tag))
}

// Retag moves the database and drops what a create under the previous tag
// left half made.
func (databaseAdapter) Retag(ctx context.Context, c *Conn, id, from, to string) error {
	if err := catalog.RetagDatabase(ctx, c, id, from, to); err != nil {
		return actionable(err)
	}
	return actionable(catalog.DropDatabase(ctx, c, catalog.PendingDatabaseName(from), from))
}

// DeclareID puts the database's name in the record before the create: a
// create whose tagging statement failed leaves an untagged pending
// database that only this name's Delete (through the tag-derived pending
// name) finds, and that must not outlive the owner.
func (databaseAdapter) DeclareID(d *v1alpha1.Database, _ string) (string, bool) {
	return d.Spec.DatabaseName, true
}
