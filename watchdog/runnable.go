package watchdog

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// DefaultCheckInterval is Runnable's interval when given none.
const DefaultCheckInterval = 30 * time.Second

// Runnable returns a manager.Runnable that, every interval until its
// context ends, calls Sweep(ctx, r) (when r is not nil) and then Check. Add it to
// the manager that runs the controller: mgr.Add(w.Runnable(30*time.Second,
// mgr.GetAPIReader())). It ticks on the watchdog's clock when that clock
// can tick (clock.WithTicker, as the fake clock in tests), else on real
// time. It needs leader election like any controller: only the leader
// attempts deletions, so only its watchdog has entries.
func (w *Watchdog) Runnable(interval time.Duration, r client.Reader) manager.Runnable {
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	return manager.RunnableFunc(func(ctx context.Context) error {
		var t clock.Ticker
		if tc, ok := w.clock.(clock.WithTicker); ok {
			t = tc.NewTicker(interval)
		} else {
			t = clock.RealClock{}.NewTicker(interval)
		}
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
				// Sweep first, so a gone object is not announced as blocked.
				if r != nil {
					if _, err := w.Sweep(ctx, r); err != nil {
						log.FromContext(ctx).Error(err, "watchdog sweep could not check some deletions; they stay tracked")
					}
				}
				w.Check(ctx)
			}
		}
	})
}
