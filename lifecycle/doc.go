// Package lifecycle is the composition users adopt: a controller-runtime
// reconciler for one managed kind whose resources live in an external
// service, given a small Adapter (connect, prove, observe, create, update,
// delete). The reconciler, not the adapter, owns the order that makes
// finale's guarantees hold.
//
// # Adopting it
//
// New checks the configuration once: the status convention of the kind
// (Status.Conditions, Status.ObservedGeneration, an optional
// Spec.DeletionPolicy that is a string, a string type or a pointer to
// either), a Scheme that knows the kind, and the guarantees. Ledger, Hold
// and Watchdog are each required unless Options.Skip names it
// (SkipLedger, SkipHold, SkipWatchdog, or Unprotected for all three): an
// unprotected build is a choice written in the code, never an accident of
// a nil field. With a Hold, the hold must wait for exactly Options.Finalizer
// on this kind, or New refuses: a mismatch used to strand namespace
// deletions with the objects still Ready.
//
// SetupWithManager registers the kind with every watch its guarantees need:
// the kind itself; with a Hold, the hold's own controllers (once), the
// parent kind (a parent that appears or becomes held wakes its dependents)
// and the parents' credential Secrets (metadata only: a Secret that appears
// wakes the dependents of every parent naming it). SweepTargets gives the
// sweeper the connections a record of this kind may be swept through.
//
// # What it guarantees
//
// Creation, in this order, every time:
//
//  1. the cleanup finalizer is added before anything else (Cluster API's
//     rule), so no external create can outrun the cleanup that undoes it;
//     the AnnotationUID annotation, tying the object to its UID, goes in
//     the same write;
//  2. with a hold, nothing is created until the parent (the connection
//     object) carries its hold, confirmed by a live read right before the
//     create, so the parent and its credential Secret outlive this object's
//     cleanup;
//  3. every external call runs inside Pool.Do (a *clientpool.Pool), so a
//     broken client is evicted on every path, deletion included;
//  4. the resources carrying the object's ownership tag (ledger.Tag: kind and
//     UID) are observed first; when there are none, the object is read live
//     (a stale cache must not create what a finished deletion will never
//     see), the deployment proves itself and the cleanup record is written
//     (ledger.Create) before Adapter.Create is called: no record, no create;
//  5. a create whose outcome was lost (a crash, a timeout, a failed write of
//     the ID) is resolved on the next reconcile by the tag: adopted and
//     recorded, never created twice, never left to a human.
//
// A steady object's record is checked every VerifyInterval: one that
// vanished out of band is written again (with a Warning Event), and the
// record follows the spec's deletion policy and the parent's UID.
//
// Deletion: an object with no record that never became Ready created
// nothing and goes at once (NothingCreated). Otherwise the external delete,
// then confirmation (the ledger proves the deployment again from inside and
// asks what still carries the tag), then the record is removed, then the
// finalizer, last. Every attempt is reported to the watchdog. While the
// parent is deleting and held, each pass is bounded by the hold end and
// retried within it with a per-object backoff capped there. Once the hold
// is over the delete is still tried once more while the parent is there (an
// operator that was down past the hold); only if that fails is the object
// released without the delete, counted, evented on the object and on its
// record (its namespace may refuse Events), logged, and its record left for
// the sweeper. A DeletionPolicy of Retain keeps the external resource and
// its tag, and keeps the record too, marked Retain (ledger.Keep): the
// sweeper never deletes through it, and a restored object can adopt what
// was kept.
//
// Restore and migration: an object whose AnnotationUID names another UID
// (restored from a backup, which keeps annotations but not UIDs; or written
// so in a GitOps manifest) adopts that UID's record and resources
// (ledger.Adopt; an adapter implementing Retagger moves the resources to
// the new tag), when the record is authentic and of the same kind,
// namespace and name, the object's connection object has the name of the
// one the record was created through and proves the record's deployment,
// and the namespace is the very one the record was written in. Across a
// namespace deleted and created again under its name (a restore into a
// fresh namespace, or anyone who may create namespaces), an admin must
// approve the claim on the record (ledger.AnnotationApproval, naming the
// object's UID): the claim says, in Synced (AdoptionNeedsApproval), the
// kubectl command. The namespace's UID is read live once per object
// (Options.APIReader needs get on namespaces; without it records do not
// name their namespace and every adoption needs an approval). The claimed
// record decides when an adoption is finished: while it exists the
// adoption is resumed, so a crash or an error between its steps never
// leaves the object creating on its new, empty tag. Nothing is created
// while a claim is unresolved; a claim that cannot be honoured is
// AdoptionRefused (or AdoptionNeedsApproval) with a message that says
// what resolves it, never one that would create a new resource in place of
// the claimed one. A record written by the previous release (unsigned) is
// migrated by its object's reconcile, through its own connection
// (ledger.Migrate), on the way to Ensure, Create or the delete.
//
// Status: Ready and Synced conditions with constant reasons and messages
// that say what to do, observedGeneration, and Events on transitions into a
// failure plus Created (or Adopted): one Event per happy lifecycle, so a
// steady object costs no API writes. Condition messages and Events carry
// the error class, never the error's text (a dial error tells whoever reads
// the status what answers where); the text goes to the operator's log.
// Errors the user must resolve (NeedsAction: a database in use, a role that
// still owns objects, a name someone else owns) are put in Synced and
// retried at Options.RetryInterval; nothing is forced. Every other failure
// is returned to the workqueue, whose rate limiter (DefaultRateLimiter: one
// second doubling to five minutes per object) backs off and counts it.
//
// # Decisions
//
//   - Status is found by convention, checked once in New, so that an
//     adapter is only the external service's verbs.
//   - The record's external IDs are written once the create answers (one
//     more write); deletion also deletes whatever still carries the tag, so
//     a lost ID write never leaks. An adapter that implements Declarer (its
//     ID is known before the create, a spec name say) has the ID written
//     with the record before the create instead, and the write after the
//     create happens only when the create returns another ID: a lifecycle
//     then costs two record writes, create and delete, instead of three.
//   - The adapter's Delete gets an ID and the tag, not the object: the
//     sweeper calls the same verbs for owners that are gone
//     (SweepTargets).
//   - A reconcile that reads a version its own last write replaced (a
//     cache that has not yet seen the write) does nothing: the write's
//     watch event brings the fresh version.
//   - A new object waiting for its parent's hold, which usually comes
//     within moments, gets no condition (and no write) for the first
//     RetryInterval; a longer wait is reported as WaitingForParentHold.
//   - Cost, measured by examples/postgres/bench (`finale bench`).
//
// # Threat model
//
// The ownership tag is what makes adoption of a lost create safe: a
// resource with the object's name but without its tag belongs to someone
// else and must be refused by Observe or Create (NeedsAction), never adopted
// or deleted. The deployment identity comes from the service, proven, never
// from the spec. Adoption across UIDs needs the same kind, namespace and
// name, a connection of the record's name that proves the record's
// deployment, and the same namespace instance (a namespace is a tenancy
// boundary, and a re-created one is a new tenancy) or an admin's approval.
// See SECURITY.md and package sweep.
package lifecycle
