package hold

import "time"

// foregroundFinalizer is the marker the garbage collector keeps on an
// object while it deletes the object's dependents first.
const foregroundFinalizer = "foregroundDeletion"

// observation is what one pass of the parent reconciler saw. It holds no
// clients, so decide is pure and table-tested.
type observation struct {
	Deleting bool
	// Now and End are on the injected clock; End is deletionTimestamp plus
	// the timeout (zero unless Deleting).
	Now, End time.Time
	// Dependents counts the dependents that still need the parent (see
	// counts).
	Dependents int
	// AccessChecked: Access was configured and asked; AccessReady is its
	// answer.
	AccessChecked, AccessReady bool
	// ForegroundMarker: the parent still carries foregroundDeletion.
	ForegroundMarker bool
	// OwnedChecked: Owned was configured and asked; OwnedExists is its
	// answer.
	OwnedChecked, OwnedExists bool
}

// action is what the parent reconciler does.
type action int

const (
	// actKeep: an alive parent with dependents keeps its hold finalizer
	// (and its Secret's).
	actKeep action = iota
	// actDrop: an alive parent without dependents carries no finalizer.
	actDrop
	// actHold: a deleting parent stays held; look again later.
	actHold
	// actRelease: a deleting parent is released with the verdict's reason.
	actRelease
)

type verdict struct {
	Action action
	Reason Reason        // set with actRelease
	After  time.Duration // set with actHold: when to look again at the latest
}

// decide is the whole hold policy for one parent.
func decide(o observation, policy AccessPolicy, recheck time.Duration) verdict {
	if !o.Deleting {
		if o.Dependents > 0 {
			return verdict{Action: actKeep}
		}
		return verdict{Action: actDrop}
	}
	if o.Dependents == 0 {
		return verdict{Action: actRelease, Reason: ReleasedDependentsDone}
	}
	// Follow-up 4: a foreground delete that completed before we looked has
	// already removed what the parent owns; holding would only make the
	// dependents retry against nothing.
	if !o.ForegroundMarker && o.OwnedChecked && !o.OwnedExists {
		return verdict{Action: actRelease, Reason: ReleasedOwnedGone}
	}
	notReady := o.AccessChecked && !o.AccessReady
	if notReady && policy == SkipHold {
		return verdict{Action: actRelease, Reason: ReleasedAccessNotReady}
	}
	if !o.Now.Before(o.End) {
		if notReady {
			return verdict{Action: actRelease, Reason: ReleasedAccessNotReady}
		}
		return verdict{Action: actRelease, Reason: ReleasedTimeout}
	}
	after := o.End.Sub(o.Now)
	if recheck > 0 && recheck < after {
		after = recheck
	}
	return verdict{Action: actHold, After: after}
}

// holdStart is when a hold that first looks at a deletion at firstLook
// starts counting: at that look (so an operator outage does not eat the
// dependents' Timeout), but never before the deletion (an operator clock
// behind the API server's does not shorten the hold) and never later than
// maxDelay after it (so no sequence of restarts, each a new first look,
// keeps a parent for ever).
func holdStart(deleted, firstLook time.Time, maxDelay time.Duration) time.Time {
	if firstLook.Before(deleted) {
		return deleted
	}
	if latest := deleted.Add(maxDelay); firstLook.After(latest) {
		return latest
	}
	return firstLook
}
