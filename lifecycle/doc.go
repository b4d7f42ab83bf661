// Package lifecycle is the composition users adopt: a controller-runtime
// reconciler for one managed kind whose resources live in an external
// service, given a small Adapter (connect, identify, observe, create,
// update, delete). The reconciler, not the adapter, owns the order that
// makes finale's guarantees hold.
//
// # What it guarantees
//
// Creation, in this order, every time:
//
//  1. the cleanup finalizer is added before anything else (Cluster API's
//     rule), so no external create can outrun the cleanup that undoes it;
//  2. with a hold, nothing is created until the parent (the connection
//     object) carries its hold, so the parent and its credential Secret
//     outlive this object's cleanup;
//  3. every external call runs inside Pool.Do (a *clientpool.Pool), so a
//     broken client is evicted on every path, deletion included;
//  4. the resources carrying the object's ownership tag (ledger.Tag: kind and
//     UID) are observed first; when there are none, the deployment identity
//     is read live and the cleanup record is written (ledger.Create) before
//     Adapter.Create is called: no record, no create;
//  5. a create whose outcome was lost (a crash, a timeout, a failed write of
//     the ID) is resolved on the next reconcile by the tag: adopted and
//     recorded, never created twice, never left to a human (the answer to
//     crossplane-runtime#340).
//
// Deletion: the external delete, then confirmation (the ledger proves the
// deployment again and looks for the tag again; without a record the tag is
// looked for again), then the record is removed, then the finalizer, last.
// Every attempt is reported to the watchdog. While the parent is deleting
// and held, each pass is bounded by the hold end and retried within it; once
// the hold is over the object is released without the delete, counted and
// evented by the hold, and its record stays for the sweeper. A per-object
// DeletionPolicy (Spec.DeletionPolicy) of Retain keeps the external resource
// and its tag and removes the record, so the sweeper never deletes it.
//
// Status: Ready and Synced conditions with constant reasons and messages
// that say what to do, observedGeneration, and Events only when a condition
// changes status or reason, so a steady object costs no API writes. Errors
// the user must resolve (NeedsAction: a database in use, a role that still
// owns objects, a name someone else owns) are put in Synced and retried at
// Options.RetryInterval; nothing is forced.
//
// # Decisions
//
//   - Status is found by convention (Status.Conditions, Status.ObservedGeneration,
//     Spec.DeletionPolicy), checked once in New, so that an adapter is only
//     the external service's verbs.
//   - The guarantees are Options (Ledger, Hold, Watchdog, and the pool's
//     eviction policy): leaving them nil builds the "naive" operator used by
//     the benchmarks and fault scenarios. That is their only purpose.
//   - The record's external IDs are written once the create answers (one
//     more write); deletion also deletes whatever still carries the tag, so
//     a lost ID write never leaks. An adapter that implements Declarer (its
//     ID is known before the create, a spec name say) has the ID written
//     with the record before the create instead, and the write after the
//     create happens only when the create returns another ID
//     (ledger.Ledger.CreateDeclared): a Role lifecycle then costs two record
//     writes, create and delete, instead of three. The declared ID must be
//     safe to delete when the create never made it: Delete checks the tag.
//   - An adapter that implements TagFinder answers the ledger's lookups by
//     tag (after the record write, before and after a delete) without
//     Observe's comparison with the spec, one external read fewer each.
//   - A reconcile that reads a version its own last write replaced (a
//     cache that has not yet seen the write) does nothing: the write's
//     watch event brings the fresh version. Acting on it would write the
//     status again and announce the resource just created as adopted.
//   - A new object waiting for its parent's hold, which usually comes
//     within moments, gets no condition (and no write) for the first
//     RetryInterval; a longer wait is reported as WaitingForParentHold.
//   - Cost, measured by examples/postgres/bench (`finale bench`: 1,000
//     Roles created then deleted, each build twice): API writes per
//     lifecycle 5 with the guarantees against 3 without, the record's
//     create and delete; wall time 1.10x-1.16x the naive build's on a
//     shared 2-core machine, where wall time follows CPU. The ledger
//     remembers the records it wrote, so the cleanup reads none first.
//
// # Threat model
//
// The ownership tag is what makes adoption safe: a resource with the
// object's name but without its tag belongs to someone else and must be
// refused by Observe or Create (NeedsAction), never adopted or deleted. The
// deployment identity comes from the service, never from the spec, so a
// record cannot be pointed at another deployment by a user.
package lifecycle
