// Package controller is the operator of finale's second worked example:
// APIKeys in the key service of examples/keys/service, reached through
// KeyServers, written on lifecycle as a user of finale would write it.
// Setup wires everything into a manager with one call of lifecycle.Setup:
// the pool, the ledger (and the operator key, ledger.LoadKey), the hold
// (its access checked by a proof through the pool), the watchdog (its
// CleanupBlocked condition on APIKeys) and the sweeper.
//
// # The adapter
//
// The adapter (adapter.go) is the service's verbs and nothing else: 30
// lines of code in its methods (Connect, ConnectParent, Prove, Observe,
// Create, Update, Delete, Retag), counted by TestAdapterSize, which fails
// when this figure or the README's drifts. Besides it, the operator's own
// code is the KeyServer lookup (keyserver.go: the pool key, the token read
// at dial, the two errors only the user can fix), shared with the hold's
// access check and the sweeper, and Setup.
//
//   - Prove is one call of the service's identity endpoint: the service
//     has no place for a sentinel table, so it stores the identity the
//     ledger enrols (a salt and a token per operator key ID) and computes
//     ledger.Respond itself over its deployment ID, the salt and the keys
//     carrying the question's tag. The token never crosses the wire after
//     enrolment.
//   - Observe lists by the ownership tag, so a create whose answer was lost
//     is adopted, not repeated. Key names are not unique in the service,
//     so there is no one else's key with the APIKey's name to refuse.
//   - Delete deletes a key only while it carries the tag; the service makes
//     "no key with that ID carrying that tag" a success, which is what
//     lifecycle and the sweeper ask of an adapter.
//   - Retag lets an APIKey restored from a backup (a new UID) adopt its
//     predecessor's key. ParentConnector gives the sweeper the pool key of
//     a KeyServer without an APIKey.
//   - No Declarer: the service makes the IDs, so none is known before the
//     create; a lifecycle costs three record writes, not two.
//
// # What it guarantees
//
// lifecycle's guarantees, on this kind: the cleanup finalizer and the
// record before any create; a KeyServer and its token Secret held (hold)
// while APIKeys still need them, so a namespace deletion deletes every key
// before the token goes; every call through one pool keyed by the
// KeyServer's URL and its Secret's name and resourceVersion (never its
// data), evicting a client whose calls fail as Transport or Auth; what a
// hold gave up on (its timeout passed with the service down) swept later,
// through the KeyServer the record names if it still exists or one in the
// operator's namespace (the admin's), and only through a connection whose
// answer proves the record's deployment. A copy of the service's data, or
// the service reset to a new identity store, has the keys and the
// deployment ID but no token: its proof is refused (DeploymentNotProven)
// and nothing is deleted or forgotten through it. That is also why the
// sweeper may use a KeyServer over plain http (Authentication, which the
// sweeper requires of every connection it uses): a proxy that moves a
// session to a copy of the data after its first proof gets no answer to
// the second. A PostgreSQL copy holds its sentinel, which is why the
// reference operator's sweeper needs verify-full instead.
//
// # The seed's shape: Options.ServiceMode id-only
//
// For a key service in service.ModeIDOnly (the G2 seed's shape: identity
// by deployment ID alone, delete by ID after a read), Setup wires another
// adapter (idonly.go). It cannot prove the deployment: it answers the
// ledger's questions in the operator, over the deployment ID the service
// claims, so a copy of the service or a splicing proxy passes; it reports
// every connection unauthenticated (Authentication ""), so the sweeper
// keeps and reports what escaped instead of acting; and its Delete reads
// the key and then deletes it by ID, with a window between the two. The
// owner's own cleanup, the record before the create, the hold and
// adoption by tag still hold. README.md's table says which guarantee
// holds in which mode and names the test that shows it.
//
// # Threat model
//
// Tenants write KeyServers, APIKeys and their own Secrets; the token a
// KeyServer sends is its namespace's own Secret, read live at dial and
// never cached. A KeyServer pointing elsewhere (another service, a copy)
// gets that namespace's token and nothing else, and cannot make the
// sweeper act: the sweeper never uses a tenant's other KeyServers.
// Conditions and Events carry error classes and constant messages, never
// the service's answers.
package controller
