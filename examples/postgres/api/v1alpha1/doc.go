// Package v1alpha1 is the API of finale's reference PostgreSQL operator,
// group postgres.finale.dev: Server (a connection to a PostgreSQL server and
// the Secret with the operator's login), Role and Database (objects on that
// server).
//
// The kubebuilder markers here are the source of the CRDs in
// examples/postgres/config/crd; `make generate` regenerates those and
// zz_generated.deepcopy.go, and a test there fails when they drift.
//
// # What the schema guarantees
//
// Bad specs are refused by the API server, before any reconcile, with a
// message that says what to change:
//
//   - roleName and databaseName are lowercase PostgreSQL identifiers of at
//     most 63 characters. Lowercase because PostgreSQL folds unquoted names
//     to lowercase: a Role named "App" would be a different role from the
//     "app" a user types in psql. At most 63 because PostgreSQL truncates
//     longer names silently, so the object created would not be the one
//     asked for and could not be found again by name. Names PostgreSQL
//     reserves (pg_*, public, current_user, ..., template0/1, postgres) are
//     refused.
//   - Names and serverRef are immutable (CEL self == oldSelf): a rename would
//     otherwise read as "drop the old object, create a new one", which for a
//     database loses its data, and a server move would strand the old object
//     and its cleanup record on a server nothing watches any more.
//   - A Role's password comes from exactly one source: an existing Secret
//     (secretKeyRef) or a Secret the operator generates and the Role owns
//     (generate). Without password the role has none.
//   - References (serverRef, credentialsSecretRef, secretKeyRef) are to the
//     same namespace only, so an object can use no credentials its author
//     cannot already read.
//
// # Deletion policy defaults
//
// Role defaults to Delete: a role holds no data, and a role left behind by a
// deleted object is exactly the leak finale exists to end; dropping it is
// refused by PostgreSQL anyway while it still owns objects.
//
// Database defaults to Retain: dropping a database destroys its data, which
// no retry can bring back, and deleting a namespace deletes every Database in
// it, often as a side effect the person deleting did not think through. So a
// drop must be asked for explicitly (deletionPolicy: Delete). A retained
// database keeps its ownership tag, so it stays findable and can be adopted
// or dropped by hand later. The cost is a database left on the server when
// nobody asked to keep it; that is visible and recoverable, a wrong drop is
// not.
//
// Server's sslMode defaults to verify-full, with the CA under ca.crt in the
// credential Secret: the default is the one mode that authenticates the
// server, and so the one the sweeper acts through. A Server without a CA
// there reads CACertificateMissing rather than falling back to anything
// weaker. Any other sslMode is a choice written down, and the Server's
// SweepVerified condition says from its first reconcile that its leftovers
// will not be swept (docs/threat-model.md).
package v1alpha1
