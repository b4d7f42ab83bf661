// Package hold keeps a "parent" (the object that holds the connection to an
// external service: a Server, a Connection, a control plane) and its
// credential Secret alive while dependents still need them to delete what
// they created outside the cluster.
//
// Use it by naming the parent kind, where it names its Secret and which
// dependents reference it, and registering it with the manager; a
// dependent creates nothing external until Held(parent):
//
//	h, err := hold.New(hold.Config{
//		Parent:     &v1alpha1.Connection{},
//		SecretName: func(p client.Object) string { return p.(*v1alpha1.Connection).Spec.SecretRef },
//		Dependents: []hold.Dependent{{
//			Object:           &v1alpha1.Key{},
//			ParentName:       func(o client.Object) string { return o.(*v1alpha1.Key).Spec.Connection },
//			CleanupFinalizer: "example.dev/delete-key",
//		}},
//		Scheme: mgr.GetScheme(),
//	})
//	err = h.SetupWithManager(mgr)
//
// lifecycle.Setup builds and registers one for the parent kind it is given.
//
// When a namespace is deleted, the namespace controller deletes its objects
// in no useful order. If the parent or its Secret goes first, every
// dependent that still has an external delete to make is stranded and the
// external resources leak. Holding the parent alone is not enough: a
// dependent reads the credentials from the Secret at deletion time, so the
// Secret is held too.
//
// # Guarantees
//
//   - While any dependent references a parent, the parent and its Secret
//     carry the hold finalizer (Finalizer). The Secret's finalizer is added
//     before the parent's, so a parent that Held reports usable always has
//     a held Secret; it is removed when no parent naming the Secret needs it
//     any more. A dependent creates nothing external until Held(parent).
//   - While the parent is being deleted, the hold keeps both as long as any
//     dependent still carries its cleanup finalizer. A terminating dependent
//     counts only while its cleanup finalizer is there: another finalizer
//     keeping it around does not keep the parent.
//   - A parent with no dependents is never held, so it is deleted at once.
//   - In a terminating namespace with no Pods left, the hold starts the
//     deletion of the dependents itself (NamespaceReconciler), each by its
//     UID, and only those the namespace's deletion already dooms. The
//     namespace controller would delete them only after its grace period,
//     in no useful order, and lets a namespace go only in a pass that finds
//     nothing left; a pass that comes to the held parent before the
//     dependents' cleanup is done makes the namespace wait for the next.
//   - The hold is bounded: Timeout (default 10 minutes) from when the hold
//     started, measured on the injected clock.PassiveClock (never the wall
//     clock). It starts at the hold's first look at the
//     deletion (Started), never before the deletionTimestamp and never
//     later than MaxStartDelay (default 24 hours) after it, so every hold
//     ends by deletionTimestamp + MaxStartDelay + Timeout. Nothing the
//     parent's users can write moves it, and it needs no write: see "The
//     hold's start" below. At the end parent and Secret are
//     released; dependents then release WITHOUT their external delete
//     (ShouldReleaseWithoutDelete, ReleaseWithoutDelete), each counted in
//     finale_released_without_delete_total{kind} with a Warning Event. Their
//     cleanup records (package ledger) stay, and the sweeper (package sweep)
//     finishes the cleanup through any connection that proves the same
//     deployment.
//   - A dependent's delete pass never runs past the hold end (PassContext),
//     and its retry is counted from the end of the pass and capped at the
//     hold end (RetryAfter), so the pass at the hold end is
//     the one that releases.
//   - Dependents are found through a field index (ParentIndex) on the
//     manager's cache, never a List of the whole kind per reconcile, and are
//     counted per kind (Dependents).
//
// # Decisions
//
// Operator access not ready at deletion time. The default
// policy, RepairDuringHold, keeps the hold and calls Access on every pass of
// a held parent: access that comes back during the hold (a Secret fixed, a
// server restarted, a NetworkPolicy repaired) still lets every dependent
// delete, which is strictly better than releasing at once with the same
// leak. If access is still not ready at the hold end, the release is
// reported with reason access_not_ready rather than timeout, so the two are
// told apart. SkipHold is offered for services whose access cannot come back
// after deletion starts; it releases at once with reason access_not_ready.
// An Access error counts as not ready.
//
// Foreground deletion. With the operator down, a
// foreground delete can finish (the garbage collector has removed what the
// parent owns, e.g. the Deployment running the service, and its
// foregroundDeletion marker) before the first reconcile. When the marker is
// absent and an Owned check is configured, the hold asks whether what the
// parent owns still exists, and releases with reason owned_gone if not:
// holding would only make the dependents retry against nothing. While the
// marker is still present the garbage collector is at work, and the hold
// waits for it.
//
// An outage longer than the hold. Counted from the
// deletionTimestamp, a hold whose parent was deleted while the operator was
// down past Timeout would be over on the operator's first look: the parent
// released at once and every dependent released without its delete,
// although access works. So the hold counts from its own first look at the
// deletion (the parent reconciler's pass, or a dependent's DependentDeadline,
// whichever asks first).
//
// The hold's start. The start is kept where the
// parent's users cannot write it: in the Hold's memory, keyed by the
// parent's name and UID, computed from the deletionTimestamp (set by the
// API server, immutable) and the injected clock alone. Earlier versions
// wrote it on the parent (AnnotationStarted), where a tenant could set it:
// a start in 2000 ended the hold on the operator's return after an outage
// and leaked the dependents' external resources; one in 9999 held the
// parent for ever; and an admission webhook refusing the write kept the
// hold from ever ending. That annotation is neither written nor read now:
// one left on an object is harmless. A stored start that survives restarts
// (in the operator's namespace) was considered and not built: it would
// put a write, and its failure, back on the path to the bound, and leave
// records to collect. The price of memory is that an operator restart (or
// a new leader) during a hold starts it again from its first look, giving
// the dependents a new Timeout; MaxStartDelay bounds that, so the bound is
// deletionTimestamp + MaxStartDelay + Timeout however often the operator
// restarts, and (up to the first pass's delay) deletionTimestamp + Timeout
// when it runs throughout. An outage longer than MaxStartDelay ends the
// hold on the operator's return: the dependents are released without their
// delete, counted, and left to the ledger and the sweeper.
//
// The hold end compares the deletionTimestamp (set by the API server) with
// the injected clock's now. Both clocks are assumed to agree to within
// seconds; a clock far behind the API server lengthens the hold, never
// shortens it below what the API server recorded.
//
// Counting rule. While the parent is alive, every dependent referencing it
// counts, except a terminating one whose cleanup finalizer is already gone
// (an alive dependent without its finalizer yet is about to use the parent).
// While the parent is being deleted, only dependents carrying their cleanup
// finalizer count: one that never added it has created nothing.
//
// Dependents reference a parent in their own namespace, by name.
//
// # Metrics and Events
//
// finale_hold_active{kind} (parents being deleted that are held now),
// finale_hold_duration_seconds{kind} (deletionTimestamp to release, on the
// injected clock, outage included), finale_hold_releases_total{kind,reason}
// with reasons dependents_done, timeout, access_not_ready and owned_gone,
// finale_released_without_delete_total{kind}, and
// finale_hold_namespace_deletes_total{kind} (dependents whose deletion the
// hold started in a terminating namespace); all on
// controller-runtime's metrics.Registry. Events (reasons are the Reason*
// constants): DeletionHeld when a hold starts, HoldAccessNotReady (Warning)
// on each pass without access, HoldReleased (Warning unless the dependents
// finished), and ReleasedWithoutDelete (Warning) on each dependent released
// without delete. Each is logged too.
//
// These Events are mostly about objects in a terminating namespace, which
// refuses new Events. The recorder SetupWithManager makes when
// Config.Recorder is nil sends none there (it learns the namespace is
// terminating from the first refusal, and drops them quietly); the
// reference operator's recorder (examples/postgres/controller) knows
// terminating namespaces from its cache and sends HoldReleased and
// ReleasedWithoutDelete to its own namespace instead, naming the object.
//
// # Threat model and limits
//
// The hold finalizer is only as strong as RBAC: anyone who can patch the
// parent or the Secret can remove it; the timeout and the ledger bound what
// that costs. A hold cannot keep the external service itself running (a
// namespace delete may remove the Deployment of an in-namespace service);
// that case is what Owned and the sweeper are for. Between a dependent
// appearing and the parent controller adding the finalizer there is a short
// window in which the parent could go unheld; Held closes it for creates
// (nothing is created before the hold), and a parent deleted in that window
// had nothing created through it. A queue backlog that outlasts the hold
// releases dependents without delete; they are counted,
// and the ledger's records make the sweeper finish the cleanup.
//
// # Access rights and cost
//
// The hold needs get, list, watch and patch on the parent kind (patch for
// its finalizer only: the hold writes nothing else on it) and on
// Secrets, get, list and watch on each dependent kind, and create on
// events.k8s.io Events; to start a terminating namespace's deletions
// itself (NamespaceReconciler), delete on each dependent kind, list on
// Pods and get, list and watch on Namespaces (both metadata-only), without
// which it leaves them to the namespace controller. It never needs a
// Secret's data: its Secret watch is metadata-only (builder.OnlyMetadata)
// and it reads and patches Secrets as metav1.PartialObjectMetadata, so the
// manager's cache holds Secrets' metadata, not their data, on its
// account. RBAC cannot narrow patch to finalizers; an admission policy can
// (the reference operator's config/rbac/secret_policy.yaml). Restrict the
// cache (cache.Options.ByObject) when the operator serves only some
// namespaces. Access is called on every pass of a held parent that still
// has dependents, so it should be cheap (a ping, not a full repair) or
// rate-limit itself.
//
// # Threat model: what Events say
//
// The HoldAccessNotReady Event is read by the parent's users; it names the
// Access error's class (Config.Classifier), never its text, which could
// tell them what the operator's network position sees at an address they
// chose. The error goes to the log.
//
// # Adopting it
//
// Configure New with the parent kind, the dependent kinds (how each names
// its parent, and its cleanup finalizer) and how a parent names its Secret,
// then call SetupWithManager. In the dependent's reconciler: create nothing
// until Held(parent); on deletion call ShouldReleaseWithoutDelete (then
// ReleaseWithoutDelete), else run the delete under PassContext and, on
// failure, requeue after RetryAfter.
package hold
