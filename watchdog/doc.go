// Package watchdog makes deletions in progress visible: for every deleting
// object and finalizer a controller works on, the time since the object's
// deletionTimestamp, the cleanup attempts, their error classes and whether
// the deletion is blocked. It is the "visible within a bound" half of G1: in
// the seed incident a finalizer failed 238 times over 39 minutes and nobody
// saw it until a human restarted the pod.
//
// Use it from a finalizer's reconcile: Attempt after each cleanup attempt
// with its error, Done once the finalizer is removed, and the Runnable on
// the manager for deletions nobody attempts any more:
//
//	w := watchdog.New(watchdog.Options{Threshold: 5 * time.Minute, Scheme: mgr.GetScheme()})
//	err = mgr.Add(w.Runnable(time.Minute, mgr.GetAPIReader()))
//	...
//	err := deleteExternal(ctx, obj)
//	if blocked := w.Attempt(ctx, obj, finalizer, err); blocked {
//		// already evented and in CleanupBlocked; keep retrying
//	}
//	// after removing the finalizer:
//	w.Done(ctx, obj, finalizer)
//
// Attempt and Done work for any kind and any number of finalizers per
// object.
//
// # Guarantees
//
//   - A deletion is blocked when its object has been deleting for longer than
//     Options.Threshold (measured from metadata.deletionTimestamp with the
//     injected clock, not from the first attempt) and its latest attempt
//     failed. A successful attempt or Done recovers it.
//   - Each transition is announced once, never per retry: on blocked, one
//     Warning Event (ReasonCleanupBlocked) and the CleanupBlocked condition
//     True, its message naming finalizer, age, attempts and last error class;
//     on recovery one Normal Event (ReasonCleanupRecovered) and the condition
//     False. Failing again after a recovery is a new transition.
//   - Metrics on controller-runtime's registry: finale_watchdog_pending_deletions
//     and finale_watchdog_blocked_deletions (gauges by kind, finalizer),
//     finale_watchdog_cleanup_attempts_total (by kind, finalizer, class;
//     Success for no error), finale_watchdog_deletion_age_at_completion_seconds
//     (histogram, observed by Done) and
//     finale_watchdog_condition_write_failures_total.
//   - Nothing the watchdog does can fail or stall the caller beyond the
//     condition write: a failed write is logged and counted, never returned.
//   - Entries do not leak: Done forgets one; Forget(uid) forgets an object;
//     Sweep drops entries whose object is gone, was replaced under another
//     UID, or no longer carries the finalizer.
//
// # Stale deletions and who calls Check
//
// A deletion can cross the threshold between attempts, or the caller may
// stop attempting at all (a wedged worker, a lost requeue, a backoff longer
// than the threshold). Check re-evaluates every entry against the clock and
// promotes a failing deletion past the threshold; a deletion whose last
// attempt succeeded is promoted only if Done has not come a whole threshold
// after that success, so Check between a success and its Done cannot flap.
// The controller's manager runs Check: mgr.Add(w.Runnable(interval,
// mgr.GetAPIReader())) sweeps and then checks every interval. Only entries
// this process recorded are seen, which is right because only the leader
// attempts deletions; a restarted process starts empty and relearns from the
// next attempts, whose age still counts from the deletionTimestamp.
//
// # The condition
//
// Decision: the condition is written by a ConditionWriter, and the provided
// StatusConditions works for any kind whose status subresource has
// status.conditions of metav1.Condition shape, without a Go type: it reads
// the object fresh (unstructured), replaces or appends only the
// CleanupBlocked item (other conditions are kept as they are, including
// fields it does not know), and sends a JSON merge patch of status.conditions
// to the status subresource carrying the resourceVersion it read, so a
// concurrent status writer causes a conflict, which is retried, not a lost
// update. A server-side apply of one list item was rejected because it needs
// the CRD to declare conditions as a list map keyed by type, which many do
// not; an interface the object implements (GetConditions/SetConditions) was
// rejected because it would tie the watchdog to the caller's Go types and
// still need a status writer. The condition is per object: True while any of
// its finalizers is blocked (one message part per blocked finalizer), False
// once none is. Writes for one object are serialised and each writes the
// state current when it starts, so racing transitions (Check promoting while
// an Attempt recovers) end with the latest state. lastTransitionTime comes
// from the injected clock and moves only when the status changes.
//
// # Events
//
// Options.Recorder has the signature of client-go's events.EventRecorder, so
// the manager's mgr.GetEventRecorder(name) fits and writes events.k8s.io/v1
// Events. The regarding object is a metadata-only reference (kind,
// namespace, name, UID), so the kind must be known: pass Options.Scheme (the
// manager's scheme) for typed objects; unstructured objects carry their own.
//
// A deletion the watchdog reports is often one whose namespace is
// terminating, and a terminating namespace refuses new Events: the
// manager's plain recorder logs each refusal as an error. lifecycle.Setup
// gives the watchdog a recorder that never sends into a terminating
// namespace it knows of and sends CleanupBlocked to the records namespace,
// naming the object.
//
// # When the controller itself is down
//
// Everything above runs inside the controller: when it stops, its Events,
// condition and metrics stop too, and its finalizers stay. A controller
// that wants its finalizers watched from outside publishes a finalizer
// holder Lease (LabelFinalizerHolder, AnnotationHeldFinalizers, renewed
// within its leaseDurationSeconds; HolderExpiry, HeldFinalizers): `finale
// audit` reports every deleting object held by a finalizer whose holder
// Leases have all expired, at once and as a finding, with the Lease to
// look at. The Argo guard (examples/argo) publishes one. A Lease is
// readable by whoever may read Leases in its namespace and names only the
// finalizers; anyone who may write Leases there can forge one, which can
// only make the audit call a holder alive or down, never release anything.
//
// # Threat model
//
// Events and conditions are readable by anyone who may read the object or
// Events in its namespace, so they carry the error class only, never the
// error text: errors from SDKs and drivers can contain endpoints, user names
// or, in bad cases, connection strings. The text is kept in memory (bounded
// to 1 KiB per entry) for Pending, which only the process can call. Entries
// hold a metadata reference, never the object's spec or status.
package watchdog
