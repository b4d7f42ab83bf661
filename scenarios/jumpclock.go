package scenarios

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// jumpClock is the machine's clock moved forward by the clock-jump faults:
// time passes as it does for the operator on a real machine (a create in
// doubt ends, a hold counts down), and a jump moves what Now says without
// firing timers, as a wall-clock step does to Go's monotonic timers. A
// fake clock frozen between jumps made every wait the operator measures by
// its clock last for ever.
type jumpClock struct {
	clock.RealClock
	mu     sync.Mutex
	offset time.Duration
}

var _ clock.WithTicker = (*jumpClock)(nil)

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *jumpClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock forward by d.
func (c *jumpClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
