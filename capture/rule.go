package capture

// Action is what the release rule allows for one child.
type Action string

const (
	// Hold keeps the finalizer: the owner is active and still needs the
	// child's result, and nothing has persisted it yet.
	Hold Action = "Hold"
	// Persist asks the release path to write the child's result to the owner
	// first; the finalizer goes only once that write has succeeded.
	Persist Action = "Persist"
	// Release removes the finalizer.
	Release Action = "Release"
)

// Reason says why the rule decided what it did. Release reasons are the
// values of the reason label of finale_capture_releases_total.
type Reason string

const (
	// ReasonRecorded: the owner has recorded the result for this child's UID.
	ReasonRecorded Reason = "Recorded"
	// ReasonPersisted: the release path persisted the result itself, because
	// the owner had not, and then released.
	ReasonPersisted Reason = "Persisted"
	// ReasonOwnerGone: the owner is not found, or a different object (another
	// UID) now has its name.
	ReasonOwnerGone Reason = "OwnerGone"
	// ReasonOwnerDeleting: the owner is being deleted.
	ReasonOwnerDeleting Reason = "OwnerDeleting"
	// ReasonOwnerFinished: the owner is finished or cancelled (the user's
	// predicate), so it no longer needs results.
	ReasonOwnerFinished Reason = "OwnerFinished"
	// ReasonOrphan: the child has no owner reference of the owner kind.
	ReasonOrphan Reason = "Orphan"
	// ReasonNamespaceTerminating: the child is being deleted and its
	// namespace, which is also its owner's, is terminating: the owner goes
	// with it, so nothing will read the result.
	ReasonNamespaceTerminating Reason = "NamespaceTerminating"

	// ReasonOwnerActive: held because the owner is active, the result is not
	// recorded, and the child is not (yet) both terminal and being deleted.
	ReasonOwnerActive Reason = "OwnerActive"
	// ReasonNotTerminal: held because the child is being deleted before it
	// finished: there is no result to persist yet, and the owner is active.
	ReasonNotTerminal Reason = "NotTerminal"
	// ReasonAwaitingOwner: held because the child is terminal and being
	// deleted, its active owner has not recorded its result, and the owner
	// alone writes results (Options.OwnerPersists).
	ReasonAwaitingOwner Reason = "AwaitingOwner"
)

// Facts are everything the release rule looks at. Nothing in them is a time:
// elapsed time never authorizes a release.
type Facts struct {
	// HasOwnerRef: the child carries an owner reference of the owner kind.
	HasOwnerRef bool
	// OwnerFound: an owner with the referenced name exists.
	OwnerFound bool
	// OwnerUIDMatches: the owner found has the UID the child references.
	OwnerUIDMatches bool
	// OwnerDeleting: the owner has a deletion timestamp.
	OwnerDeleting bool
	// OwnerFinished: the user's predicate says the owner is finished or
	// cancelled.
	OwnerFinished bool
	// Recorded: the owner has recorded the result for this child's UID.
	Recorded bool
	// ChildTerminal: the child has finished (a Pod: Succeeded or Failed).
	ChildTerminal bool
	// ChildDeleting: the child has a deletion timestamp.
	ChildDeleting bool
	// NamespaceTerminating: the child's namespace (an owner reference
	// names an owner in the child's own namespace) has a deletion
	// timestamp or phase Terminating. Releaser looks it up, live, only for
	// a child being deleted that no other reason releases.
	//
	// Decision: a terminating namespace releases. Kubernetes deletes a
	// namespace's Pods first and deletes nothing else (the owner included)
	// while any Pod remains (ordered namespace deletion, always on in 1.37).
	// Holding a Pod for an owner that has not recorded its result then
	// deadlocks: the Pod waits for the owner, the owner's deletion waits for
	// the Pod, and the owner's controller may be gone already (its own Pod
	// in the same namespace went first). The owner is going and its status
	// with it, so no result can be lost that anyone could still read.
	//
	// It is not forgeable by a namespace's users: Namespace is a
	// cluster-scoped object they cannot create or write, and its deletion
	// timestamp and phase are set by the apiserver when the namespace is
	// deleted and never cleared. A user allowed to delete the namespace
	// does delete the owner with it. Nothing a tenant writes (labels,
	// annotations, their own objects) is read for this fact.
	NamespaceTerminating bool
}

// Decision is the rule's verdict.
type Decision struct {
	Action Action
	Reason Reason
}

// Rule is the one release rule. Every path that may remove a capture
// finalizer (the release reconciler, an owner's cleanup, a garbage
// collector) must go through it, directly or through Releaser.Release.
//
// The order matters only among release reasons (the first that holds names
// the release); a Persist or Hold verdict is reached only when no release
// reason holds.
func Rule(f Facts) Decision {
	switch {
	case !f.HasOwnerRef:
		return Decision{Action: Release, Reason: ReasonOrphan}
	case !f.OwnerFound || !f.OwnerUIDMatches:
		return Decision{Action: Release, Reason: ReasonOwnerGone}
	case f.OwnerDeleting:
		return Decision{Action: Release, Reason: ReasonOwnerDeleting}
	case f.Recorded:
		return Decision{Action: Release, Reason: ReasonRecorded}
	case f.OwnerFinished:
		return Decision{Action: Release, Reason: ReasonOwnerFinished}
	case f.ChildDeleting && f.NamespaceTerminating:
		return Decision{Action: Release, Reason: ReasonNamespaceTerminating}
	case f.ChildDeleting && f.ChildTerminal:
		return Decision{Action: Persist, Reason: ReasonPersisted}
	case f.ChildDeleting:
		return Decision{Action: Hold, Reason: ReasonNotTerminal}
	default:
		return Decision{Action: Hold, Reason: ReasonOwnerActive}
	}
}
