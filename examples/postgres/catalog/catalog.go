package catalog

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is the part of a pgx connection the catalog uses. *pgx.Conn,
// *pgxpool.Pool and pgx.Tx satisfy it. A Querier must not be inside a
// transaction for CreateDatabase and DropDatabase: PostgreSQL runs those
// statements only outside one.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// MaxNameLen is PostgreSQL's limit on identifiers, in bytes (NAMEDATALEN-1).
// PostgreSQL silently truncates longer names, so they are refused here: the
// object created would not carry the name asked for.
const MaxNameLen = 63

// MaxTagLen bounds an ownership tag; tags are short identities, not data.
const MaxTagLen = 1024

// Identity is the deployment identity of the server behind q: its
// system_identifier, fixed when the cluster was initialised (initdb) and kept
// by physical replicas, as a decimal string. It is what cleanup records are
// matched against, never the host name.
//
// pg_control_system() is executable by every role in PostgreSQL 15, so the
// operator's login needs no extra grant (the test proves it with a plain
// login role).
func Identity(ctx context.Context, q Querier) (string, error) {
	var id string
	if err := q.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&id); err != nil {
		return "", fmt.Errorf("read system_identifier: %w", err)
	}
	return id, nil
}

// ident quotes name as one identifier, after checking it can be one.
func ident(kind Kind, name string) (string, error) {
	if err := validName(kind, name); err != nil {
		return "", err
	}
	return pgx.Identifier{name}.Sanitize(), nil
}

func validName(kind Kind, name string) error {
	switch {
	case name == "":
		return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Detail: "the name is empty"}
	case len(name) > MaxNameLen:
		return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Detail: fmt.Sprintf("the name is %d bytes long; PostgreSQL allows at most %d and would silently truncate it", len(name), MaxNameLen)}
	case strings.ContainsRune(name, 0):
		return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Detail: "the name contains a NUL byte"}
	}
	return nil
}

func validTag(kind Kind, name, tag string) error {
	switch {
	case tag == "":
		return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Detail: "the ownership tag is empty; finale creates and drops only objects it tags"}
	case len(tag) > MaxTagLen:
		return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Detail: fmt.Sprintf("the ownership tag is %d bytes long; at most %d", len(tag), MaxTagLen)}
	case strings.ContainsRune(tag, 0):
		return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Detail: "the ownership tag contains a NUL byte"}
	}
	return nil
}

// literal quotes s as a string constant for the statements that take no
// parameters (COMMENT, CREATE/ALTER ROLE ... PASSWORD). It is correct whatever
// standard_conforming_strings is: a string with a backslash is sent as an
// escape string with the backslashes doubled, as libpq's PQescapeLiteral
// does. s must not contain NUL (checked by the callers).
func literal(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		return " E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}
