package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// sideBySidePairs is how many times RunLifecycle runs the guarantees-on
// and the naive build at once.
const sideBySidePairs = 4

// Pair is one side-by-side run: the guarantees-on and the naive build's
// lifecycles of the same number of Roles started together, each on
// servers of its own, and the CPU those servers used (API server, etcd,
// controller manager, PostgreSQL; not the operators, which share this
// process).
//
// Runs one after the other on this kind of machine see its speed change
// between them: in one sequence every process of a run used about 30%
// more CPU than in the same build's other run, so the ratio of two builds
// moved between 1.2 and 1.5 from one `make bench` to the next. Two runs at
// once see the same machine, and their ratio moves by a few percent. The
// guarantees-on run takes longer and finishes alone on the machine.
type Pair struct {
	On, Off time.Duration
}

// Ratio is On / Off.
func (p Pair) Ratio() float64 { return p.On.Seconds() / p.Off.Seconds() }

// SideBySide sums pairs and gives the ratio of the sums, and the least
// and greatest ratio of one pair.
func SideBySide(pairs []Pair) (sum Pair, least, most float64) {
	for i, p := range pairs {
		sum.On += p.On
		sum.Off += p.Off
		if r := p.Ratio(); i == 0 || r < least {
			least = r
		}
		if r := p.Ratio(); r > most {
			most = r
		}
	}
	return sum, least, most
}

// runSideBySide runs sideBySidePairs pairs. Each run needs servers of its
// own (Stack.NewControlPlane): two operators on one API server would each
// reconcile the other's Roles.
func runSideBySide(ctx context.Context, s Stack, n int) ([]Pair, error) {
	if s.NewControlPlane == nil {
		s.logf("side by side: skipped, the stack starts no control plane for each run")
		return nil, nil
	}
	var pairs []Pair
	for i := range sideBySidePairs {
		s.logf("side by side %d/%d: %d Roles, %s and %s at once", i+1, sideBySidePairs, n, guaranteesOn.name, naiveBuild.name)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			runs [2]run
			errs [2]error
		)
		for j, b := range []build{guaranteesOn, naiveBuild} {
			bs := s
			if s.Log != nil {
				bs.Log = &prefixed{mu: &mu, w: s.Log, prefix: "  [" + b.name + "]"}
			}
			wg.Go(func() { runs[j], errs[j] = lifecycleRun(ctx, bs, n, b, false) })
		}
		wg.Wait()
		for j, b := range []build{guaranteesOn, naiveBuild} {
			if errs[j] != nil {
				return pairs, fmt.Errorf("bench: side by side, %s: %w", b.name, errs[j])
			}
		}
		p := Pair{On: runs[0].servers, Off: runs[1].servers}
		s.logf("  servers' CPU: %s with the guarantees on, %s naive: %.2f×", p.On.Round(10*time.Millisecond), p.Off.Round(10*time.Millisecond), p.Ratio())
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// prefixed writes each Write (a logf line) after prefix, one writer at a
// time.
type prefixed struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
