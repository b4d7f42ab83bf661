// Package sweep finishes the cleanup of ledger records whose owner is gone:
// the owner's namespace was deleted with the operator down, a finalizer was
// removed by hand, a deletion hold timed out. It deletes by exact identity
// only, through a connection that proves it reaches the record's deployment,
// and removes a record only after that deployment confirmed the delete. What
// it cannot reach stays, counted and reported.
//
// # How a record is decided
//
// A Sweeper is a controller-runtime Runnable that runs only on the leader
// (two sweepers would race on the same deletes). Each pass lists the records
// in pages (Options.PageSize) and handles them with bounded concurrency
// (Options.Workers). Per record:
//
//  1. A record that does not decode or is inconsistent is Invalid: reported
//     (metric, a Warning Event once, a log line) and never acted on or
//     deleted.
//  2. The owner is looked up by namespace/name as PartialObjectMetadata
//     through Options.Owners (the manager's cache: no GET per record) and its
//     UID compared: found with the record's UID is Waiting. Not found, or
//     found with another UID (recreated with the same name), means gone; the
//     recreated object and its own record are not touched. A lookup error is
//     not "gone".
//  3. Gone, but the last create attempt is younger than the settle window
//     (Options.Settle, default 5 minutes, on the injected clock) is Settling:
//     an owner created a moment ago may not be in the cache yet.
//  4. Otherwise the sweeper looks for a connection (Options.Targets) whose
//     identity proves the record's deployment and hands the record to
//     ledger.Cleanup, which proves the deployment again live, deletes the
//     recorded IDs and the resources carrying the record's tag, proves the
//     deployment once more after the deletes, and removes the record
//     conditionally. The proof comes first, before any shortcut for a record
//     without IDs.
//  5. No proving connection, or a failed cleanup, is Unreachable: the record
//     stays; a Warning Event (once per transition) and a log line tell an
//     admin which IDs and tag to delete by hand in which deployment and the
//     kubectl command that removes the record afterwards. Failing records
//     back off per record (Options.Interval doubling up to
//     Options.MaxBackoff).
//
// Metrics (controller-runtime's registry): finale_sweep_records{state}
// (waiting, settling, unreachable, invalid), finale_sweep_deleted_total,
// finale_sweep_records_removed_total (dropped after confirmation),
// finale_sweep_errors_total{class} (errclass classes) and
// finale_sweep_pass_duration_seconds.
//
// # Threat model: who can make a record disappear
//
// A record is the only memory that something exists in an external
// deployment. Losing it leaks; the sweeper must therefore never drop a record
// unless the deployment that holds the resources says they are gone.
//
// Assets: the records; the external resources; the deployment's proof token.
//
// Actors and what they can do:
//
//   - A user who can create namespaces and connection objects, and can point
//     a connection at a server they run. That server can claim any
//     deployment ID (IDs are not secret: they are in records, Events and
//     logs) and answer every delete with "not found" (seed follow-up 8).
//     Defence: identity is not a claim but a proof. On first contact the
//     operator has the service create a sentinel holding a random token
//     (at least 16 bytes); records hold only Commit(deployment, token), a
//     SHA-256 commitment. To act, the sweeper asks the connection for the
//     token and checks it against the commitment. A spoofing server cannot
//     produce it: the commitment is not the token, and hashing is one-way.
//     The sweeper never sends the token anywhere, so talking to a spoofing
//     server leaks nothing to it. Result: the record stays, Unreachable.
//   - A user who can read records (they are ConfigMaps): learns deployment
//     IDs, tags, IDs and commitments, none of which is a credential or lets
//     them forge a proof.
//   - A user who could write records could delete them outright; that is why
//     only the operator's ServiceAccount can write them (config/rbac).
//   - A backend switch during a rolling update (seed follow-up 6): the proof
//     and the delete are separate requests. The proof is repeated after the
//     deletes, and the record is kept if it fails; then every tagged
//     resource must be gone, asked after that second proof. Residual risk: a
//     switch away and back (A, B, A) between the two proofs, with a resource
//     known only by its ID (untagged), could lose that resource's delete.
//     Tag every resource to close it.
//   - Someone with read access to the sentinel inside the genuine deployment
//     can forge the proof elsewhere. They can already delete the resources
//     in that deployment directly, so this gives them nothing new; protect
//     the sentinel like the service's admin credentials.
//
// Why not a TLS key fingerprint: it identifies an endpoint, not the data the
// resources live in. It changes on certificate rotation (locking out the
// genuine deployment), is shared by every database behind one proxy or load
// balancer (accepting the wrong deployment), and does not exist for
// plaintext or SDK-mediated services. The sentinel lives in the same data as
// the resources, which is exactly what "the same deployment" means; it
// survives re-hosting, and a restore from before the sentinel existed fails
// closed (records stay Unreachable, reported) rather than open.
//
// What the sweeper never does: delete by a user-chosen name; act on an owner
// it could not look up; act before the settle window; remove a record
// without a confirmed delete; touch an invalid record.
package sweep
