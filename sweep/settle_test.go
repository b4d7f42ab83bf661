package sweep_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/sweep"
)

// SettleWindow is the one definition of "settled" the sweeper and `finale
// audit` share: settle plus the clock skew, each zero
// standing for its default. Audit passes its --settle and a zero skew, so
// by default both wait 6 minutes, not audit 5 and the sweeper 6.
func TestSettleWindow(t *testing.T) {
	for name, c := range map[string]struct {
		settle, skew, want time.Duration
	}{
		"defaults":        {0, 0, sweep.DefaultSettle + sweep.DefaultMaxClockSkew},
		"audit's default": {sweep.DefaultSettle, 0, 6 * time.Minute},
		"settle given":    {10 * time.Minute, 0, 11 * time.Minute},
		"both given":      {time.Second, time.Millisecond, time.Second + time.Millisecond},
		"skew given only": {0, 30 * time.Second, sweep.DefaultSettle + 30*time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, sweep.SettleWindow(c.settle, c.skew)); diff != "" {
				t.Errorf("SettleWindow(%s, %s) (-want +got):\n%s", c.settle, c.skew, diff)
			}
		})
	}
}
