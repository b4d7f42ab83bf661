package controller

import (
	"context"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// databaseAdapter is the Database kind's lifecycle adapter.
type databaseAdapter struct {
	servers
}

func (a databaseAdapter) Connect(ctx context.Context, d *v1alpha1.Database) (lifecycle.Connection[Key], error) {
	return a.connect(ctx, d.Namespace, d.Spec.ServerRef.Name)
}

func (databaseAdapter) Identify(ctx context.Context, c *Conn) (ledger.Identity, error) {
	return c.Identify(ctx)
}

func (databaseAdapter) Observe(ctx context.Context, c *Conn, d *v1alpha1.Database, tag string) (lifecycle.Observation, error) {
	ids, err := catalog.FindDatabasesByTag(ctx, c, tag)
	if err != nil || len(ids) == 0 {
		return lifecycle.Observation{}, actionable(err)
	}
	got, ok, err := catalog.ObserveDatabase(ctx, c, d.Spec.DatabaseName)
	// A create interrupted before its rename is found by tag under its
	// pending name; it is not up to date until CreateDatabase finishes it.
	upToDate := ok && (d.Spec.Owner == "" || got.Owner == d.Spec.Owner)
	return lifecycle.Observation{IDs: externalIDs(ids, tag), UpToDate: upToDate}, actionable(err)
}

func (databaseAdapter) Create(ctx context.Context, c *Conn, d *v1alpha1.Database, tag string) (string, error) {
	spec := catalog.DatabaseSpec{Name: d.Spec.DatabaseName, Owner: d.Spec.Owner}
	return externalID(d.Spec.DatabaseName, tag), actionable(catalog.CreateDatabase(ctx, c, spec, tag))
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

// Delete drops the database by its spec name whatever id it was found
// under: DropDatabase also drops the pending name of an interrupted create.
func (databaseAdapter) Delete(ctx context.Context, c *Conn, d *v1alpha1.Database, _, tag string) error {
	return actionable(catalog.DropDatabase(ctx, c, d.Spec.DatabaseName, tag))
}
