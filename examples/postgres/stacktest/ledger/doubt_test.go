package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/ledger"
)

// window is a create attempt's doubt with the ledger's defaults.
const window = ledger.DefaultCreateTimeout + ledger.DefaultCreateLanding

// abandoned is a create whose client gave up while the request may still
// run in the service: its outcome is unknown.
func abandoned(calls *atomic.Int32) ledger.CreateFunc {
	return func(context.Context, string) ([]string, error) {
		calls.Add(1)
		return nil, fmt.Errorf("create: %w", context.DeadlineExceeded)
	}
}

// TestCreateInDoubt: after an attempt whose outcome is unknown, nothing is
// created again and the record is not removed until the attempt can no
// longer complete, unless the service shows that it landed.
func TestCreateInDoubt(t *testing.T) {
	e := newEnv(t)
	svc := &service{deployment: "dep", tagged: map[string][]string{}}
	ctx := t.Context()

	t.Run("retry waits", func(t *testing.T) {
		owner := ownerIn(t, e.c, e.users, "retry")
		var calls atomic.Int32
		if _, err := e.l.Create(ctx, e.plan(owner), svc, abandoned(&calls)); err == nil {
			t.Fatal("Create succeeded; want the create's error")
		}
		_, err := e.l.Create(ctx, e.plan(owner), svc, abandoned(&calls))
		var doubt *ledger.InDoubtError
		if !errors.As(err, &doubt) || !errors.Is(err, ledger.ErrCreateInDoubt) {
			t.Fatalf("retry at once: %v, want an *InDoubtError", err)
		}
		if want := e.clock.Now().Add(window); !doubt.Until.Equal(want) {
			t.Errorf("in doubt until %v, want %v", doubt.Until, want)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("create called %d times while the first attempt was in doubt, want 1", n)
		}
		e.clock.Step(window)
		if _, err := e.l.Create(ctx, e.plan(owner), svc, abandoned(&calls)); errors.Is(err, ledger.ErrCreateInDoubt) {
			t.Fatalf("retry once the attempt can no longer land: %v", err)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("create called %d times after the window, want 2", n)
		}
	})

	t.Run("cleanup keeps the record until the attempt lands", func(t *testing.T) {
		owner := ownerIn(t, e.c, e.users, "landed")
		var calls atomic.Int32
		if _, err := e.l.Create(ctx, e.plan(owner), svc, abandoned(&calls)); err == nil {
			t.Fatal("Create succeeded; want the create's error")
		}
		if _, err := e.l.Cleanup(ctx, owner.UID, svc); !errors.Is(err, ledger.ErrCreateInDoubt) {
			t.Fatalf("Cleanup of a record whose create is in doubt: %v, want ErrCreateInDoubt", err)
		}
		if _, err := e.l.Get(ctx, owner.UID); err != nil {
			t.Fatalf("record after the refused cleanup: %v", err)
		}
		// The abandoned create completes in the service after all.
		tag := ledger.Tag(owner)
		svc.mu.Lock()
		svc.tagged[tag] = []string{"late-" + string(owner.UID)}
		svc.mu.Unlock()
		res, err := e.l.Cleanup(ctx, owner.UID, svc)
		if err != nil {
			t.Fatalf("Cleanup once the create landed: %v", err)
		}
		if diff := cmp.Diff(ledger.CleanupResult{Deleted: []string{"late-" + string(owner.UID)}, Removed: true}, res); diff != "" {
			t.Errorf("cleanup (-want +got):\n%s", diff)
		}
	})

	t.Run("cleanup removes the record once the attempt cannot land", func(t *testing.T) {
		owner := ownerIn(t, e.c, e.users, "expired")
		var calls atomic.Int32
		if _, err := e.l.Create(ctx, e.plan(owner), svc, abandoned(&calls)); err == nil {
			t.Fatal("Create succeeded; want the create's error")
		}
		e.clock.Step(window - time.Millisecond)
		if _, err := e.l.Cleanup(ctx, owner.UID, svc); !errors.Is(err, ledger.ErrCreateInDoubt) {
			t.Fatalf("Cleanup a millisecond before the window ends: %v, want ErrCreateInDoubt", err)
		}
		e.clock.Step(time.Millisecond)
		res, err := e.l.Cleanup(ctx, owner.UID, svc)
		if err != nil || !res.Removed {
			t.Fatalf("Cleanup after the window: %+v, %v; want the record removed", res, err)
		}
	})

	t.Run("an answered create is not in doubt", func(t *testing.T) {
		owner := ownerIn(t, e.c, e.users, "answered")
		var calls atomic.Int32
		notSent := func(context.Context, string) ([]string, error) {
			calls.Add(1)
			return nil, fmt.Errorf("%w: dial refused", ledger.ErrNotSent)
		}
		for range 2 {
			if _, err := e.l.Create(ctx, e.plan(owner), svc, notSent); !errors.Is(err, ledger.ErrNotSent) {
				t.Fatalf("Create: %v, want the create's own error", err)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("create called %d times, want 2: an attempt never sent is retried at once", n)
		}
		if _, err := e.l.Cleanup(ctx, owner.UID, svc); err != nil {
			t.Fatalf("Cleanup after an answered create: %v", err)
		}
		// Another process (a restart, a new leader) did not see the
		// outcome: for it the attempt is in doubt.
		owner2 := ownerIn(t, e.c, e.users, "restarted")
		if _, err := e.l.Create(ctx, e.plan(owner2), svc, notSent); err == nil {
			t.Fatal("Create succeeded; want the create's error")
		}
		if _, err := e.ledger(t, e.store).Cleanup(ctx, owner2.UID, svc); !errors.Is(err, ledger.ErrCreateInDoubt) {
			t.Fatalf("Cleanup by a ledger that did not see the attempt: %v, want ErrCreateInDoubt", err)
		}
	})
}
