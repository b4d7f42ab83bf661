// Package lifecycle is the composition users adopt: a controller-runtime
// reconciler for one managed kind whose resources live in an external
// service, given a small Adapter (connect, prove, observe, create, update,
// delete). The reconciler, not the adapter, owns the order that makes
// finale's guarantees hold.
//
// Use it by handing Setup one Kind: the adapter (the service's verbs),
// how to dial a client, which connection object (the parent) an object
// names, and which credential Secret the parent names. Everything else
// has a default that keeps every guarantee:
//
//	_, err := lifecycle.Setup(ctx, mgr, lifecycle.Kind[*Widget, *corev1.ConfigMap, string, *Conn]{
//		Adapter:    adapter, // Connect, Prove, Observe, Create, Update, Delete, ConnectParent
//		Dial:       dial,    // func(ctx, key string) (*Conn, error)
//		ParentName: func(w *Widget) string { return w.Spec.Parent },
//		SecretName: func(p *corev1.ConfigMap) string { return p.Data["secret"] },
//	})
//
// ExampleSetup runs exactly that against a real control plane and deletes
// the object's whole namespace: the external resource is deleted and its
// record removed before the connection object goes.
//
// # Adopting it
//
// Setup wires kinds with every guarantee in one call: from a Kind (the
// adapter, where an object names its parent, the parent's credential
// Secret, and a Dial or an existing pool) it builds the pool, the operator
// key and the ledger in the records namespace, the hold with its access
// check (a proof through the pool), the watchdog with its Runnable and
// its CleanupBlocked condition, each kind's reconciler and the sweeper,
// registers them with the manager and returns them (Parts). One
// errclass.Classifier, given once, is what the pool evicts by and what
// every part reports. Further kinds on the same parent and pool follow the
// first in the same call (Sibling) and share its parts. The README's wiring
// (Example_wiring) takes 7 lines of code touching 12 exported identifiers,
// counted by TestWiringSize. Setup checks the whole configuration before
// it creates or registers anything.
//
// New, SetupWithManager and SweepTargets are the pieces Setup puts
// together, for an operator that wires by hand. New takes its
// classifier from the pool when the pool tells it (*clientpool.Pool does)
// and refuses another. New checks the configuration once: the status convention of the kind
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
// sweeper the connections a record of this kind may be swept through; the
// sweeper uses only those the adapter's Authenticator calls authenticated.
// Setup refuses a kind with records whose adapter is no Authenticator
// unless Kind.UnauthenticatedNeverSwept says, by its name, what the kind
// then gets: leftovers kept and reported, never swept.
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
//  3. every external call runs inside a Pool.Do of its own (a
//     *clientpool.Pool), so a broken client is evicted on every path,
//     deletion included, and the call timeout bounds that call alone: the
//     API-server reads and record writes between calls run outside it, so
//     a slow API server never evicts a healthy client, and a call abandoned
//     at its bound is never one in the middle of writing records;
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
// is over the delete is still tried once more while the parent is there;
// only if that fails is the object released without the delete, counted,
// evented on the object and on its record (its namespace may refuse
// Events), logged, and its record left for the sweeper. (An operator that
// was down past the hold timeout does not find the hold over: the hold
// counts from its own first look at the deletion, package hold.) A
// DeletionPolicy of Retain keeps the external resource and its tag, and
// keeps the record too, marked Retain (ledger.Keep): the sweeper never
// deletes through it, and a restored object can adopt what was kept.
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
// kubectl command, the `finale approve` command that approves every claim
// of a restored namespace at once, and the sweeper's deadline once the
// sweeper has noted it on the record: an
// unapproved claim keeps the predecessor's resources for the sweeper's
// grace only (sweep.Options.ClaimGrace), then they are swept. The
// claimant's namespace UID is read live once per object; a record's own
// comes from the namespace informer with Kind.WatchNamespaces, else live
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
// still owns objects, a name someone else owns) are put in Synced, with the
// NeedsAction's own action as the whole message (never what wraps it: a
// NeedsAction from a dial comes back wrapped in the pool's error, which
// names the server's address), and retried at Options.RetryInterval;
// nothing is forced. Every other failure
// is returned to the workqueue, whose rate limiter (DefaultRateLimiter: one
// second doubling to five minutes per object) backs off and counts it.
//
// # Decisions
//
//   - Setup lives here rather than in a package of its own: an adopter
//     imports one package for the adapter's types and for the wiring. A
//     Kind is one struct literal, the shared fields on the first kind,
//     so that the common case (one kind) is one literal; kinds on the same
//     parent are given to the same call because one hold per parent kind
//     must know every dependent kind when it is built. The parent and
//     managed objects are made from the type parameters, and the
//     finalizer from the API group, so that no field repeats what a type
//     already says.
//   - The hold's default access check is a proof without enrolment, not a
//     ping: it goes through the pool and the adapter exactly as the
//     deletions it protects will, and creates nothing.
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
//   - Cost, measured by scenarios/bench (`make bench`, docs/benchmarks.md).
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
// See docs/threat-model.md and package sweep.
//
// The owner's own delete trusts the channel its parent names: a proxy in
// that path can move the session to a copy of the deployment after the
// first proof, so that the delete and the proof after it happen in the
// copy, and the record is removed while the resource stays in the
// deployment. That is a leak of the owner's own resource, never a delete of
// anyone else's, through a channel the owner's author chose; a deletion
// that waited for an authenticated channel would never finish for most
// connections. The sweeper, which acts with no owner left to have chosen,
// demands one (Authenticator). An adapter should say on its parent's
// status whether its channel is authenticated (the reference operator's
// Server has a SweepVerified condition), so the author can see the risk.
package lifecycle
