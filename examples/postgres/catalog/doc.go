// Package catalog is the reference operator's PostgreSQL side: it reads a
// server's deployment identity and observes, creates, alters, finds and drops
// roles and databases, through a small Querier (a *pgx.Conn, a pool or a
// transaction). It has no Kubernetes in it; the reconcilers call it through
// clientpool.
//
// # Guarantees
//
//   - Ownership is a tag. Every create puts the caller's ownership tag in the
//     object's comment (COMMENT ON ROLE/DATABASE), and every alter or drop
//     first checks it: an object of the same name without the tag is
//     somebody else's and is never adopted, altered or dropped (a
//     ReasonNotOwned error, class Conflict). A create that meets its own tag
//     is success, so a create whose answer was lost is adopted, never
//     duplicated, and never needs a human.
//   - A create leaves nothing untagged. A role is created and commented in
//     one implicit transaction (one simple-protocol query). PostgreSQL
//     cannot create a database inside a transaction, so a database is created
//     under PendingDatabaseName(tag), tagged, and renamed; a crash at any step
//     leaves a database whose name or tag says whose it is, which the next
//     CreateDatabase finishes and DropDatabase removes.
//   - Drops never force past data. A database with sessions (SQLSTATE 55006)
//     and a role that still owns objects or holds privileges (2BP01) are
//     ReasonInUse and ReasonOwnsObjects errors of class Conflict, whose
//     messages say what the user must do; nothing is terminated, reassigned
//     or dropped on the user's behalf. A drop of something already gone is
//     success.
//   - Names are quoted, never trusted. Identifiers go through
//     pgx.Identifier.Sanitize; the statements that take no parameters
//     (COMMENT, the role's password) get string constants quoted the way
//     libpq's PQescapeLiteral quotes them. Names longer than 63 bytes are
//     refused instead of letting PostgreSQL truncate them into another name;
//     NUL bytes are refused instead of being stripped.
//   - Passwords are never logged. Password prints and marshals as
//     "[redacted]", and the server is sent a SCRAM-SHA-256 verifier computed
//     here, never the password, so even a server logging every statement
//     does not see it. Passwords are restricted to printable ASCII so the
//     verifier is exactly the one PostgreSQL would compute (SASLprep leaves
//     printable ASCII as it is).
//
// # Threat model
//
// Names and tags come from Kubernetes objects that any namespace user may
// write; the API schema already restricts names, but this package assumes
// nothing of it and is safe for any string. The tag is trusted to be unique
// per owning object (the lifecycle derives it from the object's UID); a tag
// someone else can write into a comment lets them make finale adopt or drop
// their object, so only roles allowed to COMMENT are trusted, as they are
// trusted to drop objects anyway.
//
// Check-then-act windows remain where PostgreSQL offers no transaction: a
// database dropped and recreated under the same name by someone else between
// DropDatabase's tag check and its DROP would be dropped. That needs a
// privileged actor racing the operator within milliseconds.
//
// # Errors
//
// Refusals are *Error, with a Reason usable as a condition reason, a message
// built from an exported constant, errors.Is matching ErrConflict,
// ErrNotFound or ErrInvalid, and Classify to plug into errclass.New. Other
// errors (network, authentication, permissions) are wrapped with %w and left
// to errclass.
package catalog
