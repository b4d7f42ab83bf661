package lifecycle

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
	ReasonAvailable        = "Available"
	ReasonCreating         = "Creating"
	ReasonDeleting         = "Deleting"
	ReasonReconcileSuccess = "ReconcileSuccess"
	ReasonReconcileError   = "ReconcileError"
	ReasonParentNotFound   = "ParentNotFound"
	ReasonWaitingForHold   = "WaitingForParentHold"
	ReasonRecordFailed     = "CleanupRecordFailed"
	ReasonDeleteFailed     = "DeleteFailed"
	ReasonDeleted          = "Deleted"
	ReasonRetained         = "Retained"
	ReasonCreated          = "Created"
	ReasonAdopted          = "Adopted"
)

// Event actions (events.k8s.io/v1 requires one).
const (
	ActionReconcile = "Reconcile"
	ActionCreate    = "Create"
	ActionDelete    = "Delete"
)

// Messages. Those with verbs are format strings.
const (
	MessageAvailable     = "the external resource exists and matches the spec"
	MessageSynced        = "the last reconcile applied the spec"
	MessageCreating      = "the external resource does not exist yet"
	MessageDeleting      = "deleting the external resource"
	MessageParentMissing = "the object this one references (its connection) does not exist: create it or fix the reference; nothing is created until it exists"
	MessageWaitingHold   = "waiting until %s %q carries its deletion hold, so that it cannot go before this object's cleanup; if this lasts, check that the hold controller runs"
	MessageRecordFailed  = "the cleanup record could not be written, so nothing was created (no record, no create); retrying: %v"
	MessageError         = "%s error, retrying: %v"
	MessageDeleteFailed  = "%s error while deleting the external resource, retrying: %v"
	MessageNeedsAction   = "%v"
	MessageCreated       = "created the external resource %s"
	MessageAdopted       = "adopted %s, which already carries this object's ownership tag (an earlier create whose answer was lost)"
	MessageDeleted       = "deleted the external resource and removed the cleanup record"
	MessageRetained      = "deletion policy Retain: the external resource stays, with its ownership tag; the cleanup record was removed"
)
