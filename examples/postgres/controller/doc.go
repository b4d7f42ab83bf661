// Package controller is the reference PostgreSQL operator's reconcilers,
// built on lifecycle: Server (a connection, with a credential Secret; the
// parent of the hold), Role and Database (its dependents). Setup wires Role
// and Database with one call of lifecycle.Setup (one pool, ledger, hold,
// watchdog and sweeper for both; the Server is their connection object),
// then the Server's own controller, into a manager.
//
// # What it guarantees
//
//   - Every PostgreSQL call goes through one clientpool.Pool keyed by the
//     Server's connection settings and its credential Secret's name and
//     resourceVersion (never its data): a changed Secret gets a new
//     connection, a broken connection (Transport or Auth, or a call over
//     its timeout) is evicted on every path, deletion included. Dial reads
//     the Secret fresh.
//   - A Server's status.identity is its system_identifier. The deployment
//     identity of cleanup records is that identifier plus a random token
//     kept in the Sentinel table of the Server's administration database,
//     read once per session (a session talks to one backend for life).
//   - Roles and Databases carry their ownership tag (COMMENT ON ROLE /
//     DATABASE, "finale:<kind>:<uid>"); an existing object without it is
//     never adopted, altered or dropped (NotOwned on create and alter). A
//     drop by ID ("<name>@<tag>") of a name that another tag now holds
//     leaves that role alone and counts as done: the role the ID names
//     (that name carrying that tag) does not exist.
//   - The Role adapter declares its ID before creating (it is
//     "<name>@<tag>", known in advance), so the cleanup record is written
//     once before the create and not again after it; it implements
//     lifecycle.TagFinder so the ledger's lookups by tag are one query.
//   - Dropping a database in use, or a role that still owns objects, is a
//     Conflict put in the Synced condition with what the user must do, and
//     retried; sessions are never terminated and nothing is reassigned.
//   - A Server and its Secret are held (hold.Finalizer) while Roles or
//     Databases still carry their cleanup finalizer, so a namespace deletion
//     drops everything before the connection goes; access is re-checked on
//     every pass of the hold, by a proof through the pool (the Role
//     adapter's Prove, without enrolment: one query).
//   - What the hold could not finish (its timeout passed) keeps its record;
//     the sweeper drops it through the record's own Server or one an admin
//     designated, if that Server proves the record's deployment and its
//     connection authenticates the server (sslMode verify-full, the
//     default, with the CA under credentialsSecretRef.caKey, ca.crt by
//     default, or spec.trustSystemRoots; or a host and
//     port in Options.SweepTrustedHosts, never a host alone). Through any other it deletes nothing and
//     keeps the record (sweep.Unverified), and the Server's SweepVerified
//     condition says why. The drop checks the tag, so the sweeper drops
//     exactly the recorded object, and only while it still carries it.
//
// # Decisions
//
//   - Database's deletion policy defaults to Retain: a dropped database is
//     data lost, a retained one is a DROP DATABASE away. Role defaults to
//     Delete: a role holds no data, and a leaked login is a risk.
//   - A generated Role password's source of truth is its Secret, which the
//     Role controls (garbage collected with it) and the Role controller
//     watches. A deleted Secret is created again with a new password, which
//     is applied to PostgreSQL (that is how to rotate); an edited password
//     is applied; nothing else rotates it, so an unrelated spec edit applies
//     the Secret's current password. PostgreSQL cannot show a password, so
//     the Secret carries a mark of the password last applied
//     (v1alpha1.AppliedPasswordAnnotation, a SHA-256 of the Role's UID and
//     the password, on the Secret that holds the password anyway), written
//     only after the ALTER ROLE that set it succeeded; a Secret whose
//     password does not match its mark is applied again. A Secret of the
//     generated name that the Role does not control is never read, written
//     or adopted: PasswordSecretNotOwned, until it is deleted. That the
//     Secret is gone is asked of the API server before a new password is
//     generated, never of the cache alone.
//   - A password from secretKeyRef is the user's Secret: the operator
//     neither writes nor watches it, so it is applied when the role is
//     created and whenever login or the connection limit change, not when
//     that Secret alone is edited.
//   - Options.Naive switches the guarantees off, and Options.Skip single
//     ones, for comparisons only.
//
// # Threat model
//
// docs/threat-model.md at the repository root is the whole model; this is the part
// the controllers enforce.
//
//   - Users can write Servers, Roles and Databases, not the records (see
//     config/rbac): a user cannot forge a record that makes the sweeper
//     delete someone else's role, and the deployment identity is read from
//     the server, never from the spec.
//   - A Server's conditions and Events name an error's class with a
//     constant message (MessageUnreachable, MessageAuthFailed), never its
//     text, so a user who points a Server at an internal address cannot
//     tell a closed port from a silent one or another protocol; the error
//     goes to the operator's log.
//   - A proxy in a Server's path can move a session to a copy of the
//     deployment (same identity, same sentinel) after its first proof.
//     Only sslMode verify-full rules that out, so only such Servers are
//     authenticated (authentication, lifecycle.Authenticator): the sweeper
//     acts through nothing else. The owner's own delete through a Server
//     below verify-full trusts the path: a leak of the owner's resource at
//     worst, never a wrong delete.
//   - Options.AllowedServers (ServerPolicy) is the admin's allow-list of
//     hosts; a Server elsewhere reads ServerNotAllowed, and so does every
//     Role or Database that references it. Every pool key is made by one
//     function that checks the policy, so nothing dials a refused host: not
//     the reconcilers, the hold's access check or the sweeper.
//   - No Secret's data is cached: credential Secrets are read through the
//     cache as metadata only (their version is in the pool key) and their
//     data live when dialling; password Secrets are read live. CacheOptions
//     and ClientOptions make that hold for anything else in the manager too.
package controller
