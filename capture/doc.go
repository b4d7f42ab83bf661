// Package capture keeps a child's result (a Pod's phase, exit codes and
// termination messages) from being lost when the child is deleted before
// its owner (a workflow, a job, a task) has recorded it.
//
// Use it by placing the finalizer on each child when it is created
// (Place) and registering a Releaser for the owner kind, told how the
// owner records a child's result and when the owner is finished:
//
//	capture.Place(pod, capture.DefaultFinalizer)
//	rel, err := capture.New(mgr.GetAPIReader(), mgr.GetClient(), capture.Options[*Job]{
//		Name:       "job-results",
//		OwnerKind:  schema.GroupKind{Group: "example.dev", Kind: "Job"},
//		NewOwner:   func() *Job { return &Job{} },
//		Results:    capture.ResultReaderFn[*Job](func(j *Job, child types.UID) bool { _, ok := j.Status.Results[string(child)]; return ok }),
//		Completion: capture.CompletionFn[*Job](func(j *Job) bool { return j.Status.Done }),
//	})
//	err = rel.SetupWithManager(mgr)
//
// # Guarantee
//
// A child carrying the capture finalizer loses it only when Rule allows it:
//
//   - the owner has recorded the result for this child's UID, or
//   - the owner is gone (not found, or a different UID holds its name), or
//     is being deleted, or is finished or cancelled (Completion, supplied by
//     the owner's author), or
//   - the child has no owner reference of the owner kind (orphan), or
//   - the child is being deleted and its namespace is terminating: the
//     owner goes with the namespace (ReasonNamespaceTerminating).
//
// # A terminating namespace
//
// Kubernetes 1.37 deletes a namespace's Pods first and nothing else until
// they are gone (ordered namespace deletion). A Pod held for an owner that
// has not recorded its result would then wait for an owner whose own
// deletion waits for the Pod, for ever, and the owner's controller may
// already be gone with its own Pod. So a child being deleted in a
// terminating namespace is released; the namespace is read live, only for
// a child being deleted that nothing else releases, and the release is
// counted (reason NamespaceTerminating) and evented
// (EventReasonReleasedNamespaceTerminating; the namespace refuses new
// Events, so give the Releaser a recorder that redirects them, as
// internal/eventrec's does). A namespace's users cannot fake it: Namespace
// is cluster-scoped, and its deletion state is the apiserver's. The
// release controller watches Namespaces' metadata to look again at children
// held before their namespace started terminating: it needs get, list and
// watch on namespaces.
//
// Elapsed time is not an input of Rule at all. Upstream's status-capture
// finalizer (the seed incident, argo-workflows #17024) was removed two
// minutes after the Pod's last condition transition whatever the Workflow
// had persisted; with the Workflow's workers stopped or lagging, a successful
// Pod was recorded as "Error: pod deleted". Here time drives visibility
// only: a capture pending longer than Options.PendingThreshold (measured on
// the injected clock.PassiveClock, from the child's deletionTimestamp) is
// counted in finale_capture_overdue and gets one Warning Event
// (EventReasonPending) per process, and stays held.
//
// Every path that may remove the finalizer goes through Rule: the release
// reconciler does, and an owner's own cleanup should call Releaser.Release
// rather than remove the finalizer itself.
//
// # Live while the owner lags
//
// The release path is a controller-runtime reconciler on the children
// (Releaser.SetupWithManager), with its own workers, independent of the
// owner's controller. When a child is terminal and being deleted and the
// owner, though active, has not recorded its result, Rule answers Persist:
// the release path writes the result itself and only then removes the
// finalizer. A child being deleted before it finished has no result yet and
// is held (ReasonNotTerminal) until it finishes or the owner stops needing
// it.
//
// # Decision: where the release path persists
//
// The result is written into the owner's status, keyed by the child's UID
// (ResultWriter mutates the owner in memory; the Releaser writes it with an
// Update of the status subresource carrying the owner's resourceVersion).
// We chose this over a separate result record because:
//
//   - The owner already reads its status; a result found there under the
//     child's UID is indistinguishable from one it recorded itself, so the
//     owner needs no second read path and no cleanup of records, and the
//     result goes with the owner when the owner goes (nothing leaks).
//   - It survives the owner's own status writes: the owner's Update from a
//     copy read before our write carries an older resourceVersion and is
//     rejected with a conflict, which the owner retries on a fresh copy that
//     contains the result. A merge patch by the owner touches only the keys
//     it names; results are a map keyed by UID, not a list, so no write
//     replaces another child's entry. The one owner write that would lose it
//     is a blind whole-status replacement without a resourceVersion, which
//     this package's contract forbids for the results map.
//   - Our write is never blind: it is an optimistic-concurrency Update on a
//     fresh live read of the owner. A conflict is retried on a new read (up
//     to Options.MaxPersistAttempts per pass, then the pass fails and the
//     reconciler retries it with backoff); the finalizer stays throughout,
//     so a conflict is never a loss.
//   - Siblings in the same state (terminal, deleting, finalized, not
//     recorded) are written in the same Update, each under its own UID: 200
//     children deleted at once cost about one owner write each, or fewer,
//     instead of one write plus many conflicts each.
//
// The result is checked on the object the write returned, not on what was
// sent: an owner whose CRD schema does not declare the results field prunes
// it, and a mutating webhook may strip it, while the write itself succeeds.
// Such a write ends the pass with ErrResultNotKept, a Warning Event
// (EventReasonResultNotKept) and finale_capture_results_not_kept_total;
// the finalizer stays, the watchdog sees the attempt, and the reconciler
// retries with its backoff. Every Release call is bounded (at most
// MaxPersistAttempts passes, one owner write per pass, ReleaseTimeout in
// all), so one child that cannot be persisted never holds a worker from
// the others.
//
// An owner whose status this process must not write (a third party's
// controller, as Argo's Workflow is for the guard in examples/argo) sets
// Options.OwnerPersists: the release path then never persists, and holds a
// terminal child being deleted (ReasonAwaitingOwner) until the owner
// records its result or stops needing it. Options.ChildResults reads
// "recorded" from the whole child when the owner keys results by something
// other than the child's UID.
//
// The order is: write the result, then remove the finalizer. A crash
// between the two leaves the result recorded and the finalizer in place;
// the next process sees ReasonRecorded and releases. Owner absence is read
// live (the reader passed to New must not be a cache), because a cache that
// has not seen a new owner yet would otherwise say "gone" and release.
//
// # Many children at once
//
// An owner that records (or finishes, or goes) for many children at once
// is read once: the pass that releases one child also releases, on that same
// live read, every sibling the rule releases, a few patches in flight,
// each sibling claimed so no other pass patches it meanwhile. Owner events
// queue only the children the owner as the event shows would release, so
// an owner writing its status N times over N children costs no N² reads.
// The finalizer is removed with a JSON patch that tests the child's UID and
// the finalizer's index, so other writers of the child (Argo labels each Pod
// as it records it) cost no conflict; an orphan's release, which rests on
// the child's owner references, carries its resourceVersion instead.
//
// # Threat model
//
// The adversary is delay and concurrency, not malice: stopped or lagging
// owner workers, operator restarts, conflicting status writers, a burst of
// deletions, a stale informer cache. A user who removes the finalizer by
// hand, or an owner that replaces its whole results map blindly, is outside
// the guarantee. ResultWriter errors (a child whose result cannot be read)
// keep the finalizer and are reported (EventReasonPersistFailed and the
// reconciler's error), never turned into a release. The Event names the
// error's class only: it is read by the namespace's users, and the error
// text goes to the controller's log.
//
// # Metrics
//
// finale_capture_pending (held captures of children being deleted),
// finale_capture_overdue (those past the threshold),
// finale_capture_releases_total{reason} (Recorded, Persisted, OwnerGone,
// OwnerDeleting, OwnerFinished, Orphan, NamespaceTerminating), finale_capture_persisted_total,
// finale_capture_persist_conflicts_total and
// finale_capture_results_not_kept_total, all labelled by controller, on
// controller-runtime's metrics registry.
//
// # Watchdog
//
// Options.Watchdog takes the G1 watchdog (*watchdog.Watchdog satisfies
// Watchdog): each pass that leaves a deleting child held is an Attempt whose
// error names the hold reason, and each release is Done, so stuck captures
// appear with the other pending deletions, their age and attempts.
package capture
