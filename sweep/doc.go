// Package sweep finishes the cleanup of ledger records whose owner is gone:
// the owner's namespace was deleted with the operator down, a finalizer was
// removed by hand, a deletion hold timed out. It deletes by exact identity
// only, through a connection it is allowed to use that proves, from inside
// the service, that it reaches the record's deployment, and removes a record
// only once that deployment says nothing of the owner's remains. What it
// cannot reach stays, counted and reported.
//
// Use it by giving New the ledger, the owners' cache, a live reader and,
// per recorded kind, the connections a record may be swept through, and
// adding the Sweeper to the manager (it runs on the leader only):
//
//	s, err := sweep.New(sweep.Options{
//		Ledger:  l,
//		Owners:  mgr.GetCache(),
//		Live:    mgr.GetAPIReader(),
//		Targets: sweep.ByKind{"Role": roles},
//	})
//	err = mgr.Add(s)
//
// lifecycle.Setup wires it for every kind it sets up.
//
// # The invariant
//
// A record is removed only when its resources were deleted, or proven
// absent, in the very deployment where they were created: not in a copy of
// it, not through a connection an attacker controls, not on the word of a
// record somebody edited. Every doubt ends in the record kept and reported
// (an Event on the record, a metric, the log, `finale audit`), never in a
// removal. A resource whose owner's deletion policy is Retain is never
// deleted at all, and its record is never removed: it is what a restored
// owner adopts.
//
// The sweeper deletes and removes only through a connection that
// authenticates the service's end (Candidate.Authentication): a proof
// cannot tell a copy of the deployment from the deployment, because the
// copy holds the same sentinel, so what rules out a copy is a credential
// of the service that a copy of its data does not hold.
//
// # How a record is decided
//
// A Sweeper is a controller-runtime Runnable that runs only on the leader
// (two sweepers would race on the same deletes). Each pass lists the records
// in pages (Options.PageSize) through the operator's ledger, which
// authenticates them, and handles them with bounded concurrency
// (Options.Workers). Per record:
//
//  1. A record that does not decode, is inconsistent, or whose MAC does not
//     verify with the operator's key is Invalid: reported (metric, a Warning
//     Event once, a log line) and never acted on or deleted. So is a record
//     of the previous release (schema 1, unsigned): its live owner's
//     reconcile migrates it (ledger.Migrate); one whose owner is gone is
//     left for an admin, since nothing vouches for it.
//  2. The owner is looked up by namespace/name through Options.Owners (the
//     cache) and its UID compared. The record is authenticated, and an
//     object's namespace and name never change, so this finds the owner by
//     its UID. Found with the record's UID: Waiting. "Gone" from the cache is
//     confirmed with a live read (Options.Live) before anything else: a
//     cache may lag. A lookup error is not "gone".
//  3. Gone, but an object of the same kind, namespace and name (with
//     another UID: a restore, a GitOps rebuild) claims the record: its
//     ledger.AnnotationUID names the record's UID. Adoptable: that object
//     may adopt the record, so nothing is deleted while the claim stands,
//     if the claim may pass (ledger.Record.ClaimApproved: the object lives
//     in the very namespace the record was written in, its UID read live,
//     or an admin approved that object). A claim that needs an admin's
//     approval (the namespace was deleted and created again under its
//     name, by a restore or by anyone who may create namespaces) keeps
//     the record for Options.ClaimGrace only (DefaultClaimGrace, a day),
//     counted from this sweeper's first sight of the claim; the start and
//     the deadline are kept in its memory and in its Note on the record
//     (class ClassNeedsApproval, Note.Until), where only the operator and
//     admins write, and never read from the claimant, so nothing a tenant
//     writes shortens or extends it. The claimant is told the deadline
//     (a Warning Event, ReasonClaimPending); past it the record is
//     decided by the steps below as any gone owner's, and once swept the
//     claimant is told (ReasonClaimExpired). Otherwise whoever created the
//     namespace again would keep the predecessor's resources (a role
//     whose name and tag any login reads) alive for as long as it liked.
//     A namesake that does not claim it (a plain re-create of the name,
//     whose annotation is absent or names its own UID) is another object:
//     the record's owner is gone, and the steps below apply, deleting by
//     the record's exact identity only, so the namesake's own resources
//     (another tag) are never touched. A restore carries its claim from the
//     object's creation (a backup keeps annotations).
//  4. Gone, but the last create attempt is younger than the settle window
//     plus the tolerated clock skew (SettleWindow of Options.Settle and
//     Options.MaxClockSkew; the attempt was stamped by another replica's
//     clock): Settling. `finale audit` calls a record overdue past the
//     same SettleWindow.
//  5. Gone and settled with policy Retain: Retained. Nothing is deleted and
//     the record stays, for a restored owner to adopt; it is reported once
//     (an Event naming the IDs that stay and the kubectl command that drops
//     the record when nobody will adopt them) and counted in the gauge.
//  6. Otherwise the sweeper asks Options.Targets for the connections this
//     record may use, in order: the connection object the record was
//     created through (Record.Via), if it still exists with the same UID,
//     then connections an admin designated. It skips every connection
//     without Authentication, and hands the record to ledger.Cleanup
//     through the first authenticated one that proves the deployment: a
//     proof before, the deletes, a proof after whose answer must say
//     nothing carries the tag, then a conditional removal. The log line and
//     the Event name the connection used.
//  7. Only unauthenticated connections is Unverified: nothing is asked
//     of them, nothing deleted, the record stays; a Warning Event
//     (CleanupRecordUnverified, once per transition) names them and says
//     how to make one authenticated or to clean up by hand.
//  8. No allowed connection, or a failed cleanup, is Unreachable: the
//     record stays; a Warning Event (once per transition) and a log line
//     tell an admin which connections were tried, which IDs and tag to
//     delete by hand in which deployment, and the kubectl command that
//     removes the record afterwards. Failing and unverified records back
//     off per record (Options.Interval doubling up to Options.MaxBackoff).
//
// # Reported once per change
//
// A record the sweeper keeps (Adoptable, Retained, Unverified, Unreachable
// with its error class, Invalid) is reported (Event, log line) when its
// verdict changes, and the verdict is kept on the stored record
// (ledger.Note: the annotations finale.dev/sweep-state, sweep-class and
// sweep-since), so that a restarted sweeper or a new leader does not report
// it again, and `finale audit` reads why a record is kept from the record
// itself rather than from Events, which expire. A record whose owner is
// back, or whose settle window restarted, loses its note. The note is a
// report, not a proof: nothing the sweeper deletes or removes depends on
// it, and whoever could edit it (the records namespace's writers) could
// delete the record anyway. With a Store that keeps no notes (not a
// ledger.Noter) the sweeper reports once per change in its own memory.
//
// Metrics (controller-runtime's registry): finale_sweep_records{state}
// (waiting, settling, adoptable, retained, unverified, unreachable, invalid),
// finale_sweep_deleted_total, finale_sweep_records_removed_total (dropped
// after confirmation), finale_sweep_errors_total{class} (errclass classes)
// and finale_sweep_pass_duration_seconds.
//
// # Threat model: who can make a record disappear, or a resource
//
// Assets: the records; the external resources; the operator key (a Secret
// in the operator's namespace: it signs records and derives the tokens
// deployments hold); each deployment's sentinel token.
//
//   - A tenant who points a connection at a server they run. That server can
//     claim any deployment ID and salt (they are in records) and answer
//     every delete with "not found". Defence: a proof is a fresh challenge
//     the deployment answers with a hash computed over its token, the
//     challenge, its own identity and the IDs carrying the tag, inside the
//     service (ledger.Respond; for PostgreSQL one SQL statement). Without
//     the token no answer verifies, and an old answer does not answer a new
//     challenge. Result: Unreachable, nothing removed.
//   - A copy of the deployment (a restored backup, a staging copy, a
//     promoted replica) has the same identity and the same token: it can
//     answer. Defence: the sweeper never picks "any connection that proves
//     the deployment". It uses the connection the record was created
//     through, while that object exists with its UID, and connections an
//     admin designated (for the reference operator: Servers in the
//     operator's own namespace, and --sweep-servers). A tenant cannot add
//     either. The same rule stops one tenant's Server, or credentials, being
//     borrowed to clean up another's records.
//   - A proxy in the network path of an allowed connection, with a copy of
//     the deployment behind it (a pg_basebackup taken after the sentinel
//     was enrolled). It relays the login and the first proof to the
//     genuine deployment, then moves the whole session to the copy: the
//     deletes land there, and the proof after them is answered there, with
//     the same token, saying nothing remains. It needs only to read and
//     write the session: sslmode disable, or require (a proxy terminating
//     TLS with any certificate). A second proof over the same session
//     proves nothing against it, and neither would a value written through
//     the deleting session and read back over a new connection: the new
//     connection takes the same path, and the copy has the value. Only
//     something the copy lacks rules it out. Defence: the sweeper uses
//     only connections with Authentication, which say what authenticates
//     the service's end with a credential kept out of the data: for
//     PostgreSQL, TLS verify-full against a CA the connection pins (the
//     server's key is not in a copy of its data directory if it is kept
//     outside it); for a service whose proof tokens live apart from its
//     data (examples/keys), a copy of the data cannot answer at all. Not
//     verify-ca (any certificate of the CA, for any host: a staging copy's
//     own), and not SCRAM channel binding over unverified TLS (it binds
//     the login to the TLS session, but the copy holds the login's SCRAM
//     secrets and ends that session itself). Through anything else:
//     Unverified, nothing asked, nothing deleted. The older splice that
//     diverts only the deletes also fails against an unauthenticated
//     connection for this reason, and against an authenticated one it
//     cannot stand in the path at all; the second proof still catches a
//     delete that went elsewhere by accident (below). The token crosses
//     the wire once, when the sentinel is enrolled; never in a proof. Use
//     verify-full for the enrolment to close that window.
//   - Whoever can write the records namespace (RBAC limits it to the
//     operator) could edit a record to name another owner, another tag, a
//     victim's resource, or the Retain policy away. Defence: every record is
//     signed with the operator key (HMAC-SHA256 over every field); the
//     sweeper refuses a record it did not write, reports it and deletes
//     nothing. Deletes pass the record's tag, and an adapter's Delete
//     removes only a resource carrying it. Residual: such a writer can still
//     delete a record (a leak, not a wrong delete) or put back an older,
//     genuinely signed one; and one who can also read the key Secret can
//     forge records. Keep the key's Secret readable by the operator only.
//   - A backend switch during a rolling update: the first proof and the
//     deletes are separate requests; the second proof, after them, must say
//     the tag is gone, from the deployment the record names.
//   - Someone with read access to the sentinel inside the genuine deployment
//     can answer for it elsewhere; they can already delete the resources
//     there directly. A connection that talks to the copy they run still
//     has to be one the sweeper may use.
//   - A new UID for an old name (restore, GitOps): the records of the old UID
//     stay Adoptable while a namesake claims them (ledger.AnnotationUID) and
//     are adopted explicitly, after the namesake's own connection, of the
//     record's connection's name, proves the deployment, in the very
//     namespace the record was written in or with an admin's approval
//     (ledger.Adopt); an object in another namespace cannot adopt. A
//     namesake can only delay the sweep of its predecessor's records by
//     claiming them (a leak while the claim stands, never a wrong delete),
//     and the sweep, when it comes, deletes only what carries the
//     predecessor's tag.
//   - A copy that holds the service's own credential (the server's TLS
//     key copied with its data directory, a copy of the keys service's
//     identity store) is the service's identity; no client check tells it
//     apart. Keep the key outside what is backed up or copied with the
//     data. Not defended.
//
// Why not a TLS key fingerprint as the identity of the record: it
// identifies an endpoint, not the data the resources live in; it changes
// on rotation, is shared behind proxies and load balancers, and does not
// exist for plaintext or SDK-mediated services. So the deployment is
// proven by the sentinel, and the channel it is proven over is
// authenticated by the connection (verify-full), which closes the
// enrolment window and makes a splicing proxy impossible.
//
// The owner's own delete (lifecycle) does not demand an authenticated
// channel: a splice there leaks the owner's own resource through the
// channel its author chose, and a deletion that waited for verify-full
// would never finish for most connections. lifecycle's doc says so.
//
// What the sweeper never does: delete by a user-chosen name; act on an owner
// it could not look up, or on the cache's word alone; act before the settle
// window; use a connection the record does not name and no admin
// designated, or one that does not authenticate the service; remove a
// record without the deployment's own word that nothing remains; touch an
// invalid or unsigned record; delete a Retain owner's resources or remove
// its record.
package sweep
