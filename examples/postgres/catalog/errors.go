package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/errclass"
)

// Reason says why an operation was refused. Reasons are CamelCase so a
// reconciler can use them as condition reasons as they are.
type Reason string

// The reasons.
const (
	// ReasonInUse: a database has other sessions, or a role is the current
	// session's user. PostgreSQL refuses the drop; finale never forces it.
	ReasonInUse Reason = "InUse"
	// ReasonOwnsObjects: a role still owns objects or holds privileges.
	ReasonOwnsObjects Reason = "OwnsObjects"
	// ReasonNotOwned: an object of that name exists, but without this
	// object's ownership tag. It is never adopted, altered or dropped.
	ReasonNotOwned Reason = "NotOwned"
	// ReasonOwnerMissing: a database's owner role does not exist (yet).
	ReasonOwnerMissing Reason = "OwnerMissing"
	// ReasonNotFound: the object to alter does not exist.
	ReasonNotFound Reason = "NotFound"
	// ReasonInvalid: the input cannot be sent to PostgreSQL as it is.
	ReasonInvalid Reason = "Invalid"
	// ReasonSentinelRefused: the login may not create the deployment
	// sentinel table in the Server's database.
	ReasonSentinelRefused Reason = "SentinelRefused"
)

// Messages, one per reason, formatted by Error.Error. They say what the user
// must do, because they end up in the object's condition.
const (
	// MessageInUse takes the kind, the name and PostgreSQL's detail.
	MessageInUse = "%s %q is in use (%s): disconnect the sessions using it (stop or repoint the applications connected to it); the drop is retried and finale never terminates sessions"
	// MessageOwnsObjects takes the role name and PostgreSQL's detail.
	MessageOwnsObjects = "role %q still owns objects or holds privileges (%s): in each database, reassign or drop them (REASSIGN OWNED BY the role TO another role, then DROP OWNED BY the role), or delete the Databases it owns first; the drop is retried"
	// MessageNotOwned takes the kind, the name, the tag found and the tag
	// expected.
	MessageNotOwned = "%s %q exists but was not created for this object (its ownership tag is %q, expected %q): choose another name, or rename or drop the existing one by hand"
	// MessageNotOwnedUntagged takes the kind, the name and the tag expected.
	MessageNotOwnedUntagged = "%s %q exists but was not created for this object (it has no ownership tag, expected %q): choose another name, or rename or drop the existing one by hand"
	// MessageOwnerMissing takes the database name and the owner.
	MessageOwnerMissing = "database %q: owner role %q does not exist: create it first (for example a Role with that roleName); this is retried"
	// MessageNotFound takes the kind and the name.
	MessageNotFound = "%s %q does not exist"
	// MessageInvalid takes the kind, the name and what is wrong.
	MessageInvalid = "invalid %s %q: %s"
	// MessageSentinelRefused takes the table name.
	MessageSentinelRefused = "the login may not create the deployment sentinel table %q in the Server's database: grant it CREATE on schema public there (GRANT CREATE ON SCHEMA public TO the login), or point spec.database at a database it owns; nothing is created until it can"
)

// Kind is the kind of PostgreSQL object an Error is about.
type Kind string

// The kinds.
const (
	KindRole     Kind = "role"
	KindDatabase Kind = "database"
)

// Sentinels for errors.Is; every *Error matches the one of its class.
var (
	ErrConflict = errors.New("conflict")
	ErrNotFound = errors.New("not found")
	ErrInvalid  = errors.New("invalid")
)

// Error is a refusal the user can act on. Err, when set, is PostgreSQL's
// error (*pgconn.PgError).
type Error struct {
	Reason Reason
	Kind   Kind
	Name   string
	// Detail is PostgreSQL's detail (which sessions, which objects), or for
	// ReasonNotOwned the tag found, or for ReasonInvalid what is wrong.
	Detail string
	// Expected is the ownership tag that was expected (ReasonNotOwned), or
	// the owner role (ReasonOwnerMissing).
	Expected string
	Err      error
}

func (e *Error) Error() string {
	switch e.Reason {
	case ReasonInUse:
		return fmt.Sprintf(MessageInUse, e.Kind, e.Name, e.Detail)
	case ReasonOwnsObjects:
		return fmt.Sprintf(MessageOwnsObjects, e.Name, e.Detail)
	case ReasonNotOwned:
		if e.Detail == "" {
			return fmt.Sprintf(MessageNotOwnedUntagged, e.Kind, e.Name, e.Expected)
		}
		return fmt.Sprintf(MessageNotOwned, e.Kind, e.Name, e.Detail, e.Expected)
	case ReasonOwnerMissing:
		return fmt.Sprintf(MessageOwnerMissing, e.Name, e.Expected)
	case ReasonNotFound:
		return fmt.Sprintf(MessageNotFound, e.Kind, e.Name)
	case ReasonInvalid:
		return fmt.Sprintf(MessageInvalid, e.Kind, e.Name, e.Detail)
	case ReasonSentinelRefused:
		return fmt.Sprintf(MessageSentinelRefused, e.Name)
	}
	return fmt.Sprintf("%s %q: %s: %v", e.Kind, e.Name, e.Reason, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of e's class.
func (e *Error) Is(target error) bool {
	switch e.Class() {
	case errclass.Conflict:
		return target == ErrConflict
	case errclass.NotFound:
		return target == ErrNotFound
	case errclass.Invalid:
		return target == ErrInvalid
	}
	return false
}

// Class is e's errclass: Conflict for refusals that a person resolves (and
// that are retried meanwhile), NotFound, Invalid.
func (e *Error) Class() errclass.Class {
	switch e.Reason {
	case ReasonNotFound:
		return errclass.NotFound
	case ReasonInvalid:
		return errclass.Invalid
	}
	return errclass.Conflict
}

// Classify is an errclass.Func for errclass.New: it classifies an *Error
// anywhere in err's chain by its Class, and leaves everything else (network,
// authentication, other SQLSTATEs) to the other rules.
func Classify(_ context.Context, err error) (errclass.Class, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Class(), true
	}
	return "", false
}

var _ errclass.Func = Classify

// SQLSTATEs this package turns into an *Error.
const (
	sqlstateObjectInUse           = "55006"
	sqlstateUndefinedTable        = "42P01"
	sqlstateInsufficientPrivilege = "42501"
	sqlstateDependentObjects      = "2BP01"
	sqlstateDuplicateObject       = "42710"
	sqlstateDuplicateDatabase     = "42P04"
	sqlstateUndefinedObject       = "42704"
	sqlstateInvalidCatalog        = "3D000"
)

func sqlstate(err error) (string, *pgconn.PgError) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe
	}
	return "", nil
}

// detail is PostgreSQL's detail on one line, or its message when it has none.
func detail(pe *pgconn.PgError) string {
	d := pe.Detail
	if d == "" {
		d = pe.Message
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(d, "\n", "; ")), " ")
}
