package controlplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finale-dev/finale/controlplane"
)

// WaitEvery looks at its condition once at the start and then at most once
// an interval, and says what it waited for when the time is up.
func TestWaitEveryCallsOnceAnInterval(t *testing.T) {
	const interval, timeout = 100 * time.Millisecond, time.Second
	calls := 0
	err := controlplane.WaitEvery(t.Context(), interval, timeout, "nothing", func(context.Context) (bool, error) {
		calls++
		return false, nil
	})
	if err == nil || !strings.Contains(err.Error(), "waiting for nothing: not within 1s") {
		t.Errorf("WaitEvery = %v, want the time-out naming what it waited for", err)
	}
	if most := int(timeout/interval) + 1; calls > most {
		t.Errorf("the condition was called %d times in %s at a %s interval; want at most %d", calls, timeout, interval, most)
	}
}
