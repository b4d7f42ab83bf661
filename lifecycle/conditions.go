package lifecycle

import "github.com/finale-dev/finale/ledger"

// Condition types.
const (
	// ConditionReady is True while the external resource exists as specified.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconcile reached the external
	// service and did what it had to; False with the reason otherwise.
	ConditionSynced = "Synced"
)

// Condition and Event reasons.
const (
	ReasonAvailable           = "Available"
	ReasonCreating            = "Creating"
	ReasonDeleting            = "Deleting"
	ReasonReconcileSuccess    = "ReconcileSuccess"
	ReasonReconcileError      = "ReconcileError"
	ReasonParentNotFound      = "ParentNotFound"
	ReasonWaitingForHold      = "WaitingForParentHold"
	ReasonRecordFailed        = "CleanupRecordFailed"
	ReasonRecordInvalid       = "CleanupRecordInvalid"
	ReasonRecordRecreated     = "CleanupRecordRecreated"
	ReasonNotProven           = "DeploymentNotProven"
	ReasonDeleteFailed        = "DeleteFailed"
	ReasonDeleted             = "Deleted"
	ReasonNothingCreated      = "NothingCreated"
	ReasonRetained            = "Retained"
	ReasonCreated             = "Created"
	ReasonAdopted             = "Adopted"
	ReasonAdoptedFrom         = "AdoptedFromPrevious"
	ReasonAdoptionRefused     = "AdoptionRefused"
	ReasonAdoptionUnsupported = "AdoptionUnsupported"
	ReasonReleased            = "ReleasedWithoutDelete"
	ReasonCreateInDoubt       = "CreateInDoubt"
	ReasonDuplicates          = "DuplicateResources"
	ReasonDuplicateDeleted    = "DuplicateDeleted"
)

// Event actions (events.k8s.io/v1 requires one).
const (
	actionReconcile = "Reconcile"
	actionCreate    = "Create"
	actionDelete    = "Delete"
)

// Messages. Those with verbs are format strings. None carries an error's
// text: status and Events are readable by every user of the namespace, and
// an error from a dial says what answers where (a port scanner). The error
// itself goes to the operator's log.
const (
	messageAvailable        = "the external resource exists and matches the spec"
	messageSynced           = "the last reconcile applied the spec"
	messageCreating         = "the external resource does not exist yet"
	messageDeleting         = "deleting the external resource"
	messageParentMissing    = "the object this one references (its connection) does not exist: create it or fix the reference; nothing is created until it exists"
	messageWaitingHold      = "waiting until %s %q carries its deletion hold, so that it cannot go before this object's cleanup; if this lasts, check that the hold controller runs"
	messageRecordFailed     = "the cleanup record could not be written (%s error), so nothing was created (no record, no create); retrying with backoff, details in the operator's log"
	messageRecordInvalid    = "this object's cleanup record is invalid or not signed by this operator (edited by hand?): nothing is created or deleted until an admin inspects it in the operator's namespace and deletes it; the operator then writes it again"
	messageRecordRecreated  = "the cleanup record of this object was missing (deleted out of band) and has been written again"
	messageNotProven        = "the connection does not prove the deployment this object's cleanup record names (another server or database, a copy of it, or a re-created sentinel): point the connection back at that deployment; details in the operator's log"
	messageError            = "%s error, retrying with backoff; details in the operator's log"
	messageDeleteFailed     = "%s error while deleting the external resource, retrying with backoff; details in the operator's log"
	messageNeedsAction      = "%s"
	messageNeedsActionNone  = "this needs the user or an admin; details in the operator's log"
	messageCreated          = "created the external resource %s"
	messageAdopted          = "adopted %s, which already carries this object's ownership tag (an earlier create whose answer was lost)"
	messageAdoptedFrom      = "adopted the external resources %q of the previous object with this kind, namespace and name (uid %s), and their cleanup record"
	messageAdoptionRefused  = "annotation " + AnnotationUID + " claims the resources of uid %s, which belong to an object of another kind, namespace or name: this object may not adopt them (a copy of an object elsewhere is another object); fix the annotation"
	messageAdoptionUnsup    = "annotation " + AnnotationUID + " claims the resources of uid %s, but this kind cannot move resources to a new owner: remove the annotation"
	messageDeleted          = "deleted the external resource and removed the cleanup record"
	messageNothingCreated   = "deleted at once: nothing was created outside the cluster (no cleanup record)"
	messageRetained         = "deletion policy Retain: the external resource stays, with its ownership tag, and so does its cleanup record, marked Retain (the sweeper never deletes through it), for a restored object to adopt"
	messageReleased         = "released without deleting the external resource: the hold on %s %q ended and the delete could not be done; the cleanup record stays for the sweeper"
	messageCreateInDoubt    = "an earlier create attempt's outcome is unknown and the service may still complete it: nothing is created again, and the cleanup record stays, until it no longer can (about %s)"
	messageDuplicates       = "the external resources %q all carry this object's ownership tag and none of them is in its cleanup record: an admin must delete all but the one in use; nothing is deleted automatically"
	messageDuplicateDeleted = "deleted %s, a second external resource carrying this object's ownership tag (a create attempt that completed after its retry); kept %s, the one in the cleanup record"
)

// AnnotationUID is the annotation that ties an object to the UID its
// external resources are recorded under. The reconciler sets it to the
// object's own UID with the cleanup finalizer. An object whose annotation
// names another UID (restored from a backup, which keeps annotations but
// not UIDs, or written so by hand in a GitOps manifest) claims the
// resources and cleanup record of that UID: it adopts them if the record
// is of the same kind, namespace and name and its owner is gone. That is
// the only way resources pass from one object to another.
const AnnotationUID = ledger.AnnotationUID
