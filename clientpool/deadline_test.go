package clientpool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCallDeadline: the pool's bound is CallTimeout unless the caller's
// deadline is nearer, then nine tenths of the caller's remaining time, so
// that it fires first; a caller with no time left gets no bound of the
// pool's (its failure is the caller's).
func TestCallDeadline(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	type result struct {
		Deadline time.Time
		OK       bool
	}
	cases := map[string]struct {
		timeout   time.Duration
		caller    time.Time
		hasCaller bool
		want      result
	}{
		"no caller deadline":            {timeout: time.Second, want: result{now.Add(time.Second), true}},
		"caller far away":               {timeout: time.Second, caller: now.Add(time.Hour), hasCaller: true, want: result{now.Add(time.Second), true}},
		"caller just beyond the margin": {timeout: 900 * time.Millisecond, caller: now.Add(time.Second), hasCaller: true, want: result{now.Add(900 * time.Millisecond), true}},
		"caller inside the margin":      {timeout: 950 * time.Millisecond, caller: now.Add(time.Second), hasCaller: true, want: result{now.Add(900 * time.Millisecond), true}},
		"caller as far as the timeout":  {timeout: time.Second, caller: now.Add(time.Second), hasCaller: true, want: result{now.Add(900 * time.Millisecond), true}},
		"reconcile timeout shorter":     {timeout: 30 * time.Second, caller: now.Add(500 * time.Millisecond), hasCaller: true, want: result{now.Add(450 * time.Millisecond), true}},
		"caller deadline now":           {timeout: time.Second, caller: now, hasCaller: true},
		"caller deadline passed":        {timeout: time.Second, caller: now.Add(-time.Second), hasCaller: true},
		"caller a few nanoseconds away": {timeout: time.Second, caller: now.Add(5), hasCaller: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, ok := callDeadline(now, tc.timeout, tc.caller, tc.hasCaller)
			if diff := cmp.Diff(tc.want, result{d, ok}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if ok && tc.hasCaller && !d.Before(tc.caller) {
				t.Errorf("the pool's bound %v does not fire before the caller's %v", d, tc.caller)
			}
		})
	}
}
