package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/errclass"
)

// Defaults of the create-in-doubt window (Options.CreateTimeout,
// Options.CreateLanding).
const (
	// DefaultCreateTimeout bounds a create when Options.CreateTimeout is
	// zero.
	DefaultCreateTimeout = 30 * time.Second
	// DefaultCreateLanding is Options.CreateLanding when unset: a service
	// that bounds a request nobody waits for by as much as the create's
	// own timeout.
	DefaultCreateLanding = 30 * time.Second
)

var (
	// ErrCreateInDoubt: a create attempt whose outcome is unknown (its
	// client gave up, the operator crashed during it) may still complete in
	// the service. Until it no longer can, Create does not try again, so a
	// retry never makes a second resource, and Cleanup keeps the record, so
	// a create that lands after the owner's delete is still recorded. The
	// error is an *InDoubtError, which says until when.
	ErrCreateInDoubt = errors.New("ledger: a create attempt may still complete in the service")
	// ErrNotSent is what a CreateFunc wraps when its create certainly never
	// reached the service (no client could be had, the record write took
	// longer than the create's timeout): the ledger then waits for nothing.
	ErrNotSent = errors.New("ledger: create not sent to the service")
)

// InDoubtError is ErrCreateInDoubt with the time from which the last create
// attempt can no longer complete.
type InDoubtError struct {
	Owner Owner
	// Until is the attempt's time plus the create's timeout plus the
	// service's landing bound, by the ledger's clock.
	Until time.Time
}

func (e *InDoubtError) Error() string {
	return fmt.Sprintf("%s for %s until %s: nothing carries its tag yet", ErrCreateInDoubt, e.Owner, e.Until.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrCreateInDoubt) true.
func (e *InDoubtError) Is(target error) bool { return target == ErrCreateInDoubt }

// RetryAfter is how long from now the doubt lasts, at least a millisecond
// while it lasts (a requeue of zero means none).
func (e *InDoubtError) RetryAfter(now time.Time) time.Duration {
	return max(e.Until.Sub(now), time.Millisecond)
}

// answered reports whether a create that returned err has an outcome the
// ledger knows: it succeeded, it was never sent, or the service refused
// it in an answer. A transport failure, a cancellation or an error nobody
// classified may have left the request running in the service.
func (l *Ledger) answered(ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, ErrNotSent) {
		return true
	}
	switch l.class.Classify(ctx, err) {
	case errclass.NotFound, errclass.Conflict, errclass.Invalid, errclass.Auth, errclass.Throttled:
		return true
	}
	return false
}

// window is how long after an attempt its create may still land.
func (l *Ledger) window() time.Duration { return l.createTimeout + l.createLanding }

// inDoubt returns the InDoubtError of r's last create attempt while that
// attempt may still complete and this ledger did not see its outcome; nil
// otherwise. Only the ledger that made the attempt knows its outcome: after
// a restart or on another replica every recent attempt is in doubt.
func (l *Ledger) inDoubt(r *Record) error {
	until := r.LastCreateAttempt.Add(l.window())
	if !l.clock.Now().Before(until) || l.settledAt(r.Owner.UID, r.LastCreateAttempt) {
		return nil
	}
	return &InDoubtError{Owner: r.Owner, Until: until}
}

// minSettledPrune is the smallest size at which settle prunes.
const minSettledPrune = 1024

// settle remembers that the attempt made at attempt for uid has a known
// outcome.
func (l *Ledger) settle(uid types.UID, attempt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.settled) >= l.settledPrune {
		// Attempts past their window need no memory. Pruning when the map
		// has doubled since the last prune keeps it amortised O(1).
		for u, at := range l.settled {
			if l.clock.Since(at) >= l.window() {
				delete(l.settled, u)
			}
		}
		l.settledPrune = max(2*len(l.settled), minSettledPrune)
	}
	l.settled[uid] = attempt
}

func (l *Ledger) settledAt(uid types.UID, attempt time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.settled[uid]
	return ok && at.Equal(attempt)
}
