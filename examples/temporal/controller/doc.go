// Package controller is finale's Temporal example operator: the G1 seed
// (temporal-worker-controller's poisoned client) on its own stack, the real
// Temporal Go SDK against a real Temporal server.
//
// A WorkerDeployment names a Connection (a frontend's host:port and a
// Secret with the API key) and a server-side worker deployment. The
// operator, on lifecycle, creates that deployment and claims it by setting
// its manager identity to the object's ownership tag; on deletion it
// describes the deployment, takes its routing off every version, deletes
// the versions and then the deployment (NotFound is success), and only then
// lets the object go. Every call goes through clientpool.Do, so a client
// whose calls time out is evicted on every path, the deletion path
// included, and the next attempt dials afresh.
//
// # The naive build
//
// Options.Naive mirrors temporal-worker-controller v1.7's client pool: one
// cached SDK client per key, evicted only when a call on the main
// reconcile path fails with PermissionDenied or Unauthenticated, never on
// the deletion path. A client that hangs is kept for ever; the only way out
// is a restart. Only the pool differs: both builds run the same adapter,
// the same lifecycle reconciler and the same watchdog, so the comparison
// shows the pool's doing.
//
// # Credentials
//
// The API key is read from its Secret on every call (the seed's clientpool
// after its PR #301), never captured at dial time. Connect also reads the
// Secret before any dial, so that a WorkerDeployment created before its
// Secret gets a NeedsAction condition and no client is dialled or cached
// (the seed's first five minutes). A key that cannot be read at call time
// fails the call at once with an Unauthenticated status, which errclass
// reads as Auth: never NotFound (a missing Secret must never read as a
// deployment that is gone), and never a plain error, which the SDK would
// retry until its 10 s call timeout and report as DeadlineExceeded
// (Transport). The operator has no error classifier of its own: errclass
// reads the SDK's serviceerror types through Status().
//
// # Decisions
//
//   - Ownership: a server-side deployment is this object's when its
//     manager identity is the object's tag (ledger.Tag), or when it has no
//     manager and the tag was the last to change it (this object's create,
//     whose claim did not land; the create is idempotent by the object's
//     UID, so the next reconcile finishes the claim). Any other deployment
//     of the name is refused while the object lives (NeedsAction), and is
//     nothing of the object's when it is deleted: never adopted, changed or
//     deleted. Every mutating call carries the tag as its identity, so the
//     server refuses it if another identity took the deployment over.
//   - No cleanup records and no hold (lifecycle.SkipLedger and SkipHold,
//     in both builds). A record must be proven against its deployment by a
//     response computed inside the service from a sentinel stored there
//     (ledger.Question); a Temporal namespace offers no place for such a
//     sentinel nor a way to compute inside it. G1, the guarantee this
//     example exists for, needs neither; Prove says so. The watchdog is on
//     in both builds.
//   - A Connection or API-key Secret that appears after its
//     WorkerDeployment is seen at the next retry (Options.RetryInterval):
//     without a hold, lifecycle's SetupWithManager watches the kind alone.
//   - Calls are bounded by Options.CallTimeout (the SDK's own default is
//     10 s per call); a call that hits it while the reconcile is live is a
//     Transport error and evicts.
//
// # Threat model
//
// The operator reads Connections and the Secrets they name in the
// WorkerDeployment's own namespace; conditions and Events carry error
// classes and constant messages, never the SDK's error text.
package controller
