package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DatabaseSpec is the wanted state of a database.
type DatabaseSpec struct {
	Name string
	// Owner is the owning role; empty means the connected user.
	Owner string
}

// Database is a database as observed.
type Database struct {
	Name  string
	Owner string
	// Tag is the database's comment: its ownership tag when finale created
	// it.
	Tag string
}

// PendingPrefix starts the name a database has while it is being created.
const PendingPrefix = "finale_pending_"

// PendingDatabaseName is the name a database with ownership tag tag has
// between CREATE DATABASE and its rename to the name asked for. It is derived
// from the tag alone, so a create interrupted at any step is found again,
// and finished or dropped, by whoever knows the tag.
func PendingDatabaseName(tag string) string {
	sum := sha256.Sum256([]byte(tag))
	return PendingPrefix + hex.EncodeToString(sum[:8])
}

// ObserveDatabase reads the database called name; ok is false when there is
// none.
func ObserveDatabase(ctx context.Context, q Querier, name string) (d Database, ok bool, err error) {
	if err := validName(KindDatabase, name); err != nil {
		return Database{}, false, err
	}
	d.Name = name
	err = q.QueryRow(ctx,
		"SELECT pg_get_userbyid(datdba), coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = $1",
		name).Scan(&d.Owner, &d.Tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return Database{}, false, nil
	}
	if err != nil {
		return Database{}, false, fmt.Errorf("observe database %q: %w", name, err)
	}
	return d, true, nil
}

// FindDatabasesByTag lists the databases whose ownership tag is tag, by
// name. A create interrupted before its rename shows under
// PendingDatabaseName(tag).
func FindDatabasesByTag(ctx context.Context, q Querier, tag string) ([]string, error) {
	return names(ctx, q, KindDatabase,
		"SELECT d.datname FROM pg_database d JOIN pg_shdescription s ON s.objoid = d.oid AND s.classoid = 'pg_database'::regclass WHERE s.description = $1 ORDER BY 1",
		tag)
}

// CreateDatabase creates the database with its ownership tag as its comment.
//
// PostgreSQL cannot run CREATE DATABASE in a transaction, so the create and
// the comment cannot be one step. Instead the database is created under
// PendingDatabaseName(tag), tagged, then renamed: a crash at any point leaves
// either nothing, or a database whose name or comment says it is this tag's,
// and calling CreateDatabase again finishes the job. No untagged database of
// the wanted name is ever ours, so one that exists is a ReasonNotOwned
// *Error and is left alone; one that carries tag is success.
func CreateDatabase(ctx context.Context, q Querier, spec DatabaseSpec, tag string) error {
	id, err := ident(KindDatabase, spec.Name)
	if err != nil {
		return err
	}
	if err := validTag(KindDatabase, spec.Name, tag); err != nil {
		return err
	}
	if done, err := existingDatabase(ctx, q, spec.Name, tag); done || err != nil {
		return err
	}
	pendingName := PendingDatabaseName(tag)
	pending := pgx.Identifier{pendingName}.Sanitize()
	p, ok, err := ObserveDatabase(ctx, q, pendingName)
	if err != nil {
		return err
	}
	if ok && p.Tag != "" && p.Tag != tag {
		return &Error{Reason: ReasonNotOwned, Kind: KindDatabase, Name: pendingName, Detail: p.Tag, Expected: tag}
	}
	if !ok {
		sql := "CREATE DATABASE " + pending
		if spec.Owner != "" {
			owner, err := ident(KindRole, spec.Owner)
			if err != nil {
				return err
			}
			sql += " OWNER " + owner
		}
		_, err := q.Exec(ctx, sql)
		switch code, _ := sqlstate(err); {
		case err == nil, code == sqlstateDuplicateDatabase: // a concurrent attempt of ours got there first
		case code == sqlstateUndefinedObject:
			return &Error{Reason: ReasonOwnerMissing, Kind: KindDatabase, Name: spec.Name, Expected: spec.Owner, Err: err}
		default:
			// A transport error too: the tag would go nowhere, and the
			// error must say which statement's outcome is unknown.
			return fmt.Errorf("create database %q: %w", spec.Name, err)
		}
	}
	if _, err := q.Exec(ctx, "COMMENT ON DATABASE "+pending+" IS "+literal(tag)); err != nil {
		return fmt.Errorf("create database %q: tag %q: %w", spec.Name, pendingName, err)
	}
	if _, err := q.Exec(ctx, "ALTER DATABASE "+pending+" RENAME TO "+id); err != nil {
		if code, _ := sqlstate(err); code == sqlstateDuplicateDatabase {
			if done, err := existingDatabase(ctx, q, spec.Name, tag); done || err != nil {
				return err
			}
		}
		return fmt.Errorf("create database %q: rename from %q: %w", spec.Name, pendingName, err)
	}
	return nil
}

// existingDatabase reports done when name exists with tag, and a
// ReasonNotOwned *Error when it exists without.
func existingDatabase(ctx context.Context, q Querier, name, tag string) (done bool, err error) {
	d, ok, err := ObserveDatabase(ctx, q, name)
	switch {
	case err != nil:
		return false, err
	case !ok:
		return false, nil
	case d.Tag != tag:
		return false, &Error{Reason: ReasonNotOwned, Kind: KindDatabase, Name: name, Detail: d.Tag, Expected: tag}
	}
	return true, nil
}

// AlterDatabaseOwner makes owner the owner of the database, if it carries
// tag.
func AlterDatabaseOwner(ctx context.Context, q Querier, name, owner, tag string) error {
	id, err := ident(KindDatabase, name)
	if err != nil {
		return err
	}
	ownerID, err := ident(KindRole, owner)
	if err != nil {
		return err
	}
	if err := validTag(KindDatabase, name, tag); err != nil {
		return err
	}
	done, err := existingDatabase(ctx, q, name, tag)
	if err != nil {
		return err
	}
	if !done {
		return &Error{Reason: ReasonNotFound, Kind: KindDatabase, Name: name}
	}
	_, err = q.Exec(ctx, "ALTER DATABASE "+id+" OWNER TO "+ownerID)
	switch code, _ := sqlstate(err); code {
	case "":
	case sqlstateUndefinedObject:
		return &Error{Reason: ReasonOwnerMissing, Kind: KindDatabase, Name: name, Expected: owner, Err: err}
	case sqlstateInvalidCatalog:
		return &Error{Reason: ReasonNotFound, Kind: KindDatabase, Name: name, Err: err}
	}
	if err != nil {
		return fmt.Errorf("alter database %q owner: %w", name, err)
	}
	return nil
}

// DropDatabase drops the database name if it carries tag, and any
// interrupted create of it (PendingDatabaseName(tag), which only a create
// with this tag makes, tagged or not yet). A database that does not exist
// is success, and so is one of that name carrying another tag or none: it
// is not this tag's, it is left alone, and there is nothing of this tag to
// drop under that name. One with other sessions connected is a ReasonInUse
// *Error (class Conflict): sessions are never terminated (no WITH
// (FORCE)), because they are someone's work.
//
// The pending database goes first: a create whose tagging statement failed
// left it untagged, and it must not outlive an owner whose name is taken.
//
// q must not be connected to the database being dropped.
func DropDatabase(ctx context.Context, q Querier, name, tag string) error {
	if _, err := ident(KindDatabase, name); err != nil {
		return err
	}
	if err := validTag(KindDatabase, name, tag); err != nil {
		return err
	}
	pendingName := PendingDatabaseName(tag)
	p, pendingExists, err := ObserveDatabase(ctx, q, pendingName)
	if err != nil {
		return err
	}
	if pendingExists && (p.Tag == "" || p.Tag == tag) {
		if err := dropDatabase(ctx, q, pendingName); err != nil {
			return err
		}
	}
	if name == pendingName {
		return nil
	}
	d, ok, err := ObserveDatabase(ctx, q, name)
	if err != nil || !ok || d.Tag != tag {
		return err
	}
	return dropDatabase(ctx, q, name)
}

// RetagDatabase moves database name from ownership tag from to tag to; see
// RetagRole. An interrupted create under the previous tag's pending name
// (PendingDatabaseName(from)) is half made and is not moved: drop it with
// DropDatabase under the previous tag.
func RetagDatabase(ctx context.Context, q Querier, name, from, to string) error {
	return retag(ctx, q, KindDatabase, "DATABASE", name, from, to, func(ctx context.Context) (string, bool, error) {
		d, ok, err := ObserveDatabase(ctx, q, name)
		return d.Tag, ok, err
	})
}

func dropDatabase(ctx context.Context, q Querier, name string) error {
	_, err := q.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	switch code, pe := sqlstate(err); code {
	case "":
	case sqlstateObjectInUse:
		return &Error{Reason: ReasonInUse, Kind: KindDatabase, Name: name, Detail: detail(pe), Err: err}
	}
	if err != nil {
		return fmt.Errorf("drop database %q: %w", name, err)
	}
	return nil
}
