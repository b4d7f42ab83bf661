package model

// Rules are the protocol's decisions that the model does not take from
// the real code's pure functions (those are in tables.go): the imperative
// order of lifecycle, ledger and sweep, and the rules being changed. Each
// field is one rule, on in Target. To follow a change in the real code,
// change the rule's step in g2.go (or add a field here and a preset that
// flips it), and run `make model`: a rule that breaks an invariant prints
// its counterexample.
type Rules struct {
	// Record: the ledger writes the cleanup record before every external
	// create (lifecycle with Options.Ledger).
	Record bool
	// Hold: the parent and its Secret are held while dependents carry
	// their cleanup finalizer; a dependent creates nothing until the parent
	// is held (lifecycle with Options.Hold).
	Hold bool
	// LiveHoldBeforeCreate: the parent's hold is confirmed by a live read
	// right before a create, not on the cached copy.
	LiveHoldBeforeCreate bool
	// TryDeleteAfterHold: once the hold is over, a dependent whose parent
	// and Secret still exist tries its delete first and releases without
	// it only when that fails.
	TryDeleteAfterHold bool
	// FinishWithoutRecord: a deleting object without a record has created
	// nothing (record before create) and lets go at once.
	FinishWithoutRecord bool
	// RecordPendingName: a create in two statements (make, then tag) has
	// the name it makes recorded with the write before it, so cleanup finds
	// an untagged half-made resource.
	RecordPendingName bool
	// DeleteChecksTag: an external delete removes a resource only if it
	// carries the owner's tag.
	DeleteChecksTag bool
	// SweepLiveOwner: the sweeper confirms "owner gone" with a live read,
	// not from its cache.
	SweepLiveOwner bool
	// SweepScoped: the sweeper uses only the connection a record was
	// created through or one an admin designated, never any connection that
	// proves the deployment.
	SweepScoped bool
	// SweepAuthenticated: the sweeper acts only on records it wrote
	// (authenticated), never on an edited one.
	SweepAuthenticated bool
	// SweepKeepsRetain: the sweeper never deletes a Retain resource; it
	// forgets its record.
	SweepKeepsRetain bool
	// SweepSettle: the sweeper waits for the settle window after the last
	// create attempt.
	SweepSettle bool
	// LiveBeforeRelease: the hold removes its finalizer from a parent or a
	// Secret only when a live read of the dependents agrees with the
	// cached one (found by this model: a hold released from a lagging
	// cache strands a dependent that still has its cleanup to do).
	LiveBeforeRelease bool
	// SecretHeldBeforeCreate: the live check before a create also requires
	// the hold on the parent's Secret (found by this model: hold's
	// Secret reconciler can take the Secret's hold off between the parent
	// reconciler's two writes, Secret then parent, so a held parent does
	// not imply a held Secret).
	SecretHeldBeforeCreate bool
	// HoldFromStart: a deleting parent's hold counts its timeout from the
	// hold's first look at the deletion (hold.Started), not from
	// the deletion: after an outage longer than the timeout the dependents
	// still get the timeout to delete. Off, the timeout
	// may pass before the hold has ever seen the deletion.
	HoldFromStart bool
	// CaptureRule: a child's capture finalizer goes only by capture.Rule.
	// Off: released on a timer, as upstream Argo does (the G3 seed).
	CaptureRule bool
}

// Target is main's protocol since records v2: every
// rule on. (main's FinishWithoutRecord also requires that the object was
// never Ready: a Ready object whose record was lost out of band is cleaned
// up by its tag. The model loses no record out of band, so the two agree.)
func Target() Rules {
	return Rules{
		Record: true, Hold: true, LiveHoldBeforeCreate: true, TryDeleteAfterHold: true,
		FinishWithoutRecord: true, RecordPendingName: true, DeleteChecksTag: true,
		SweepLiveOwner: true, SweepScoped: true, SweepAuthenticated: true, SweepKeepsRetain: true,
		SweepSettle: true, CaptureRule: true, LiveBeforeRelease: true, SecretHeldBeforeCreate: true,
		HoldFromStart: true,
	}
}

// Current is the code before records v2 (main at d730dc1): the rules
// above off.
func Current() Rules {
	r := Target()
	r.LiveHoldBeforeCreate = false
	r.TryDeleteAfterHold = false
	r.FinishWithoutRecord = false
	r.RecordPendingName = false
	r.SweepLiveOwner = false
	r.SweepScoped = false
	r.SweepAuthenticated = false
	r.SweepKeepsRetain = false
	r.LiveBeforeRelease = false
	r.SecretHeldBeforeCreate = false
	r.HoldFromStart = false
	return r
}

// Faults are what the environment may do wrong before faults stop.
type Faults struct {
	// Crash: the operator process dies and restarts (every worker's
	// in-flight reconcile and the sweeper's pass are lost) before or after
	// any step.
	Crash bool
	// Fail: any API write or external call may fail, before it lands or
	// after (its answer lost), aborting that reconcile.
	Fail bool
	// Stale: reads through a cache (every read the real code makes through
	// the manager's client) may return any earlier version of the object.
	Stale bool
	// Forge: someone who can write the records namespace edits a record to
	// name an owner that is gone.
	Forge bool
}

// AllFaults turns every fault on.
func AllFaults() Faults { return Faults{Crash: true, Fail: true, Stale: true, Forge: true} }
