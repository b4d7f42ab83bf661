package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RoleSpec is the wanted state of a role.
type RoleSpec struct {
	Name  string
	Login bool
	// ConnectionLimit is -1 for no limit.
	ConnectionLimit int32
	// Password is set when not empty. On create an empty Password means the
	// role has none; on alter it means "leave it as it is".
	Password Password
}

// Role is a role as observed.
type Role struct {
	Name            string
	Login           bool
	ConnectionLimit int32
	// Tag is the role's comment: its ownership tag when finale created it.
	Tag string
}

// ObserveRole reads the role called name; ok is false when there is none.
func ObserveRole(ctx context.Context, q Querier, name string) (r Role, ok bool, err error) {
	if err := validName(KindRole, name); err != nil {
		return Role{}, false, err
	}
	r.Name = name
	err = q.QueryRow(ctx,
		"SELECT rolcanlogin, rolconnlimit, coalesce(shobj_description(oid, 'pg_authid'), '') FROM pg_roles WHERE rolname = $1",
		name).Scan(&r.Login, &r.ConnectionLimit, &r.Tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return Role{}, false, nil
	}
	if err != nil {
		return Role{}, false, fmt.Errorf("observe role %q: %w", name, err)
	}
	return r, true, nil
}

// FindRolesByTag lists the roles whose ownership tag is tag, by name.
func FindRolesByTag(ctx context.Context, q Querier, tag string) ([]string, error) {
	return names(ctx, q, KindRole,
		"SELECT r.rolname FROM pg_roles r JOIN pg_shdescription d ON d.objoid = r.oid AND d.classoid = 'pg_authid'::regclass WHERE d.description = $1 ORDER BY 1",
		tag)
}

func names(ctx context.Context, q Querier, kind Kind, sql, tag string) ([]string, error) {
	if err := validTag(kind, "", tag); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, sql, tag)
	if err != nil {
		return nil, fmt.Errorf("find %ss by tag: %w", kind, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find %ss by tag: %w", kind, err)
	}
	return out, nil
}

// roleOptions renders the options of CREATE/ALTER ROLE. The password goes as
// a SCRAM verifier, never in clear.
func roleOptions(spec RoleSpec) (string, error) {
	if spec.ConnectionLimit < -1 {
		return "", &Error{Reason: ReasonInvalid, Kind: KindRole, Name: spec.Name, Detail: fmt.Sprintf("connection limit %d is below -1 (no limit)", spec.ConnectionLimit)}
	}
	opts := "NOLOGIN"
	if spec.Login {
		opts = "LOGIN"
	}
	opts += fmt.Sprintf(" CONNECTION LIMIT %d", spec.ConnectionLimit)
	if spec.Password != "" {
		if err := spec.Password.validate(spec.Name); err != nil {
			return "", err
		}
		v, err := spec.Password.verifier()
		if err != nil {
			return "", err
		}
		opts += " PASSWORD " + literal(v)
	}
	return opts, nil
}

// CreateRole creates the role with its ownership tag as its comment, in one
// implicit transaction: a role either exists with its tag or not at all, so
// a create whose answer was lost is always found again by FindRolesByTag.
//
// A role of that name that already carries tag is success (the earlier
// attempt went through); one without it is a ReasonNotOwned *Error and is
// left alone.
func CreateRole(ctx context.Context, q Querier, spec RoleSpec, tag string) error {
	id, err := ident(KindRole, spec.Name)
	if err != nil {
		return err
	}
	if err := validTag(KindRole, spec.Name, tag); err != nil {
		return err
	}
	opts, err := roleOptions(spec)
	if err != nil {
		return err
	}
	// No arguments: pgx sends this as one simple query, which PostgreSQL runs
	// as one transaction.
	_, err = q.Exec(ctx, "CREATE ROLE "+id+" WITH "+opts+"; COMMENT ON ROLE "+id+" IS "+literal(tag))
	if code, _ := sqlstate(err); code == sqlstateDuplicateObject {
		return adoptOrRefuse(ctx, q, spec.Name, tag)
	}
	if err != nil {
		return fmt.Errorf("create role %q: %w", spec.Name, err)
	}
	return nil
}

func adoptOrRefuse(ctx context.Context, q Querier, name, tag string) error {
	r, ok, err := ObserveRole(ctx, q, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("create role %q: it existed a moment ago and is gone now; retry", name)
	}
	if r.Tag != tag {
		return &Error{Reason: ReasonNotOwned, Kind: KindRole, Name: name, Detail: r.Tag, Expected: tag}
	}
	return nil
}

// AlterRole sets login, connection limit and, when spec.Password is not
// empty, the password. It alters only a role that carries tag.
func AlterRole(ctx context.Context, q Querier, spec RoleSpec, tag string) error {
	id, err := ident(KindRole, spec.Name)
	if err != nil {
		return err
	}
	if err := validTag(KindRole, spec.Name, tag); err != nil {
		return err
	}
	opts, err := roleOptions(spec)
	if err != nil {
		return err
	}
	if err := ownedRole(ctx, q, spec.Name, tag, false); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, "ALTER ROLE "+id+" WITH "+opts); err != nil {
		if code, _ := sqlstate(err); code == sqlstateUndefinedObject {
			return &Error{Reason: ReasonNotFound, Kind: KindRole, Name: spec.Name, Err: err}
		}
		return fmt.Errorf("alter role %q: %w", spec.Name, err)
	}
	return nil
}

// ownedRole checks that name carries tag. A missing role is an error unless
// missingOK.
func ownedRole(ctx context.Context, q Querier, name, tag string, missingOK bool) error {
	r, ok, err := ObserveRole(ctx, q, name)
	switch {
	case err != nil:
		return err
	case !ok && missingOK:
		return nil
	case !ok:
		return &Error{Reason: ReasonNotFound, Kind: KindRole, Name: name}
	case r.Tag != tag:
		return &Error{Reason: ReasonNotOwned, Kind: KindRole, Name: name, Detail: r.Tag, Expected: tag}
	}
	return nil
}

// DropRole drops the role if it carries tag. A role that does not exist is
// success. One that still owns objects or holds privileges is a
// ReasonOwnsObjects *Error (class Conflict): nothing is reassigned or dropped
// on the user's behalf. One without tag is a ReasonNotOwned *Error and stays.
func DropRole(ctx context.Context, q Querier, name, tag string) error {
	id, err := ident(KindRole, name)
	if err != nil {
		return err
	}
	if err := validTag(KindRole, name, tag); err != nil {
		return err
	}
	if err := ownedRole(ctx, q, name, tag, true); err != nil {
		return err
	}
	_, err = q.Exec(ctx, "DROP ROLE IF EXISTS "+id)
	switch code, pe := sqlstate(err); code {
	case "":
	case sqlstateDependentObjects:
		return &Error{Reason: ReasonOwnsObjects, Kind: KindRole, Name: name, Detail: detail(pe), Err: err}
	case sqlstateObjectInUse:
		return &Error{Reason: ReasonInUse, Kind: KindRole, Name: name, Detail: detail(pe), Err: err}
	}
	if err != nil {
		return fmt.Errorf("drop role %q: %w", name, err)
	}
	return nil
}

// RetagRole moves role name from ownership tag from to tag to: for an
// object that adopts the role of the previous object with its kind,
// namespace and name. A role that already carries to, or that does not
// exist, is success; one carrying any other tag is a ReasonNotOwned *Error
// and is left alone.
func RetagRole(ctx context.Context, q Querier, name, from, to string) error {
	return retag(ctx, q, KindRole, "ROLE", name, from, to, func(ctx context.Context) (string, bool, error) {
		r, ok, err := ObserveRole(ctx, q, name)
		return r.Tag, ok, err
	})
}

// retag sets the comment of one object from from to to, after checking it
// carries from.
func retag(ctx context.Context, q Querier, kind Kind, what, name, from, to string, current func(context.Context) (string, bool, error)) error {
	id, err := ident(kind, name)
	if err != nil {
		return err
	}
	if err := validTag(kind, name, from); err != nil {
		return err
	}
	if err := validTag(kind, name, to); err != nil {
		return err
	}
	tag, ok, err := current(ctx)
	switch {
	case err != nil:
		return err
	case !ok || tag == to:
		return nil
	case tag != from:
		return &Error{Reason: ReasonNotOwned, Kind: kind, Name: name, Detail: tag, Expected: from}
	}
	if _, err := q.Exec(ctx, "COMMENT ON "+what+" "+id+" IS "+literal(to)); err != nil {
		return fmt.Errorf("retag %s %q: %w", kind, name, err)
	}
	return nil
}
