package watchdog

import "time"

// state is what the decisions look at: no locks, no clocks, no I/O, so the
// rules can be table-tested on their own.
type state struct {
	blocked    bool
	age        time.Duration // now minus deletionTimestamp
	sinceLast  time.Duration // now minus the last attempt
	lastFailed bool
}

// afterAttempt decides whether a deletion is blocked once an attempt has
// been recorded. A failure past the threshold blocks; a success unblocks
// (the cleanup works again, even if the finalizer is not removed yet); a
// failure within the threshold changes nothing.
func afterAttempt(s state, threshold time.Duration) bool {
	switch {
	case !s.lastFailed:
		return false
	case s.age > threshold:
		return true
	default:
		return s.blocked
	}
}

// onCheck decides whether a deletion nobody has attempted lately is
// blocked. A failed last attempt past the threshold blocks: the caller may
// have stopped retrying (a wedged worker, a lost requeue) and the deletion
// is stuck all the same. A successful last attempt blocks only when the
// finalizer has still not been removed a whole threshold later, so a Check
// that runs between a success and its Done does not flap the condition.
func onCheck(s state, threshold time.Duration) bool {
	if s.blocked || s.age <= threshold {
		return s.blocked
	}
	if s.lastFailed {
		return true
	}
	return s.sinceLast > threshold
}
