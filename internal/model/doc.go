// Package model model-checks finale's deletion protocol: the decisions of
// lifecycle, ledger, hold, sweep and capture, driven by a model of the
// apiserver and of the external service, explored exhaustively for small
// worlds (Explore: every reachable state, deduplicated) and by randomized
// state-machine testing for larger ones (Walk, driven by
// pgregory.net/rapid in the tests). `make model` runs the full suite
// (cmd/model); `make test` runs the CI-sized one (TestSuite) and the
// randomized walks.
//
// It is internal: it models finale's own protocol, its states are finale's
// implementation, and what users need from it is its verdict, in the
// docs/scenarios.md and in the counterexamples it prints, not an API to keep stable.
//
// # What is modelled
//
// Two worlds, checked apart because nothing connects them but the
// namespace (their product would multiply states and find nothing more):
//
//   - G2, cleanup: parents (connection objects) and their credential
//     Secrets, dependents that create one external resource each through
//     their parent, their cleanup records, one sweeper, an optional admin
//     sweep connection, a tenant's Server reaching a copy of the deployment,
//     someone else's resource taking a dependent's name, and the external
//     service.
//   - G3, capture: owners (workflows) and their children (Pods) carrying the
//     capture finalizer, the owner's controller recording results, capture's
//     release path, the kubelet, the garbage collector.
//
// The apiserver: objects with a finalizer and a deletionTimestamp
// (object.go); a delete removes an object without the finalizer at once;
// a namespace deletion makes the namespace controller delete every object
// in it, in any order; the garbage collector deletes the children of an
// owner deleted in the background, and holds a foreground-deleted owner
// until its children are gone. Every write the model makes to an object
// is an optimistic-lock patch in the real code, so a write is made from
// the object's current version (a stale copy only conflicts). Reads
// through a cache may return any earlier version of an object (a lagging
// informer, a lagging apiserver, or a cache rebuilt after a restart from
// an apiserver further behind): each reader, each read.
//
// # Granularity
//
// Every API write and every external call is one atomic step; what a step
// reads is read in the same step (sound, because every cached read may be
// stale anyway). A dependent's create is: add the finalizer; Connect and
// Observe (the parent through the cache, the hold, the tag in the service);
// confirmLive (the object, and with LiveHoldBeforeCreate the parent's hold,
// read live); the record written; the tag looked for again; the create
// (two calls, make then tag, with TwoStep). A delete is: Retain forgets the
// record; no record lets go at once (FinishWithoutRecord); a hold that is
// over releases without delete (after trying, with TryDeleteAfterHold);
// otherwise prove and delete the recorded IDs and the tagged, prove again
// and find nothing tagged, remove the record, remove the finalizer. The
// hold writes the Secret's finalizer, then the parent's, as two steps; its
// Secret reconciler writes the Secret's. The sweeper picks a record, checks
// its owner (cached or live), settle window, authentication and Retain,
// picks a connection, then deletes, confirms and removes the record (the
// removal conditional on the record's version), one step each. Any step may
// fail before it lands, or land and lose its answer; the operator may
// crash after any step (every in-flight reconcile and sweep pass lost);
// an attacker may edit a record. Time moves: a record's settle window
// passes (never while its owner's create is in flight: the window is
// longer than the calls' timeout), a deleting parent's hold times out once
// it has started counting. The hold starts counting on its first pass over
// the deleting parent (it remembers the start, hold.Started; one step), not
// at the deletion: before that pass the clock may be anywhere, as after an
// operator outage longer than the timeout, and the real hold is asked with
// its clock past the deletion plus the timeout. The real hold keeps the
// start in memory, so a crash forgets it and the next look starts the hold
// again, never later than hold.Config.MaxStartDelay after the deletion; the
// model keeps the start across a crash and leaves that bound out: a later
// start only keeps the parent longer, never releases it sooner.
//
// # The real code's decisions
//
// capture.Rule decides every capture release (g3.go). The hold's decisions
// are hold's own (tables.go): hold.ParentReconciler and
// hold.SecretReconciler run against controller-runtime's fake client on
// objects built for each abstract input the model meets (with where the
// parent's hold stands on the clock: not started, running, over), and Held
// and ShouldReleaseWithoutDelete on a parent built for it, memoized. The rest
// is imperative order, mirrored step by step from lifecycle, ledger and
// sweep, with each rule that changed or may change a switch in Rules:
// Target is main's protocol (records v2, and the two
// rules this model found missing), Current the code before records v2.
// Not modelled from records v2: adoption across UIDs and namesakes (no
// object is re-created under its name here), and the signature and
// challenge behind "authenticated" and "proves" (a boolean each). Nor the
// record a Retain deletion now keeps for a restore to adopt:
// here a Retain deletion and the sweeper forget it; either way nothing
// ever deletes through it, which is what the properties check.
//
// # Properties
//
// Safety, in every state: no leak (an external resource of a Delete-policy
// owner, tagged or half-made, has a live owner or a record); no wrong
// delete (nothing of someone else's, no Retain resource, no live owner's
// resource by the sweeper); nothing created twice; no lost result (a child
// gone while its active owner lacks its result).
//
// Liveness, on every fair run once faults stop (crashes, failed calls,
// stale reads and edited records stop; users may still act; workers,
// controllers, the sweeper and the clock are weakly fair): every deletion
// finishes (a held parent's and Secret's once their dependents are going
// or their namespace is); every orphaned external resource is deleted,
// unless only the sweeper could and it has no connection in (released
// after the hold timed out with its parent or Secret gone, or by hand, and
// no admin connection) or its record was edited (reported, never acted
// on); with an admin connection, every record of a gone owner is swept.
// Explore checks it on the graph without fault steps: a strongly connected
// component is a possible forever when each fair actor is disabled
// somewhere in it or takes a step inside it (weak fairness); a violation
// is such a component, or a dead end, with an obligation open.
//
// # What it found
//
// Besides each naive variant's defect (no record: a leak after the hold
// times out; no hold: the parent goes first and the dependent's resource is
// stranded; capture on a timer: a result lost), and the issue-12/13 defects
// in Current (edited records, Retain swept, a two-step create's half-made
// resource, a copy of the deployment, the sweeper's cache, an object that
// created nothing waiting for ever, a release after the hold without
// trying), and two gaps it found in records v2, now rules of Target, each
// shown by Target without its rule, with their counterexamples in `make model`:
//
//   - finding-hold-from-cache: the hold removes its finalizer from a
//     deleting parent when its cached count of dependents is zero; a cache
//     behind a dependent's cleanup finalizer (rebuilt after a restart from
//     a lagging apiserver) strands a dependent that has a resource to
//     delete, and only an admin sweep connection can still clean it up.
//     Fixed by LiveBeforeRelease: a live count before a hold comes off
//     (hold.Config.Live).
//   - finding-secret-unheld: hold's Secret reconciler can take the Secret's
//     hold off between the parent reconciler's Secret write and its parent
//     write, so a parent that Held reports usable can have an unheld
//     Secret; a dependent created then, whose Secret is deleted, can never
//     finish its deletion. Fixed by SecretHeldBeforeCreate: the live check
//     before a create requires the Secret's hold too (lifecycle's
//     confirmLive, hold.SecretHeld).
//
// # Limits
//
// A reconciler runs whenever a step of it would change something: the model
// assumes the watches that wake it (a missing watch, as a Secret that once
// woke nothing, is outside it). A reconciler's reads and the write they
// decide are one step, as a write conditional on what was read would be:
// where the real code reads one object (the dependents, live) and writes
// another (a hold's finalizer), a dependent that appears between the two
// is outside it. One deployment, one resource per
// dependent, one record per dependent; a copy of the deployment proves the
// same identity and holds nothing the sweeper deletes. Leader election and
// fencing (two replicas, a paused leader) are not modelled: the settle
// window is assumed longer than any create attempt, which a paused process
// can break. Within those sizes the exploration is exhaustive; beyond them
// the randomized walks sample.
//
// # Changing it
//
// A change in hold or capture reaches the model by itself (tables.go,
// g3.go). A change in lifecycle, ledger or sweep is a change to one step in
// g2.go, or a new field in Rules switched on in Target and off in Current,
// with a case in Suite that shows the defect it closes; `make model` then
// says whether every invariant still holds and prints the counterexample
// if not.
package model
