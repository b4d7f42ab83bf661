package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
)

// sideBySidePairs is how many times RunLifecycle runs each of
// pairedBuilds and the naive build at once.
const sideBySidePairs = 4

// pairedBuilds are the builds run side by side with the naive build, in
// turn within each round, so that a drift of the machine's speed over the
// rounds reaches all three alike.
var pairedBuilds = []build{guaranteesOn, recordsOnly, holdOnly}

// Pair is one side-by-side run: the lifecycles of the same number of
// Roles with a build that has guarantees (On: all of them, or one alone)
// and with the naive build (Off), started together, each on a control
// plane and a PostgreSQL of its own with the operator as a process of its
// own, and the CPU each stack's processes used (API server, etcd,
// controller manager, PostgreSQL, the operator).
//
// Runs one after the other on this kind of machine see its speed change
// between them: in one sequence every process of a run used about 30%
// more CPU than in the same build's other run, so the ratio of two builds
// moved between 1.2 and 1.5 from one `make bench` to the next. Two runs at
// once see the machine at the same speed while both run. The build
// with guarantees takes longer and finishes alone, so a pair's ratio
// still moves (1.29 to 1.45 over the four pairs of one run); the table
// gives the ratio of the sums with the least and the greatest pair.
type Pair struct {
	On, Off time.Duration
}

// Ratio is On / Off.
func (p Pair) Ratio() float64 { return p.On.Seconds() / p.Off.Seconds() }

// SideBySide sums pairs (sum.Ratio is the ratio of the sums) and gives
// the least and the greatest ratio of one pair.
func SideBySide(pairs []Pair) (sum Pair, least, most float64) {
	for i, p := range pairs {
		sum.On += p.On
		sum.Off += p.Off
		r := p.Ratio()
		if i == 0 || r < least {
			least = r
		}
		most = max(most, r)
	}
	return sum, least, most
}

// runSideBySide runs sideBySidePairs rounds of one Pair for each of
// pairedBuilds, and returns them by build. Each run needs servers of its
// own (Stack.NewControlPlane: two operators on one API server would each
// reconcile the other's Roles) and the operator's command
// (Stack.Operator).
func runSideBySide(ctx context.Context, s Stack, n int) (map[build][]Pair, error) {
	if s.NewControlPlane == nil || s.Operator == nil {
		s.logf("side by side: skipped, it needs Stack.NewControlPlane and Stack.Operator")
		return nil, nil
	}
	dir, err := os.MkdirTemp("", "finale-bench-pairs-")
	if err != nil {
		return nil, err
	}
	s.logf("-- the side-by-side operators' logs: %s (kept if a run fails)", dir)
	pairs := map[build][]Pair{}
	for i := range sideBySidePairs {
		for _, b := range pairedBuilds {
			s.logf("side by side %d/%d: %d Roles, %s and %s at once", i+1, sideBySidePairs, n, b.name, naiveBuild.name)
			p, err := runPair(ctx, s, n, [2]build{b, naiveBuild}, dir, i+1)
			if err != nil {
				return pairs, err
			}
			s.logf("  CPU of each stack's processes: %s with %s, %s naive: %.2f×", p.On.Round(10*time.Millisecond), b.name, p.Off.Round(10*time.Millisecond), p.Ratio())
			pairs[b] = append(pairs[b], p)
		}
	}
	_ = os.RemoveAll(dir) // the table is the output; the logs only explain a failure
	return pairs, nil
}

// runPair runs the two builds at once (Pair.On the first), each operator
// logging to a file of round's in dir.
func runPair(ctx context.Context, s Stack, n int, builds [2]build, dir string, round int) (Pair, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		cpu  [2]time.Duration
		errs [2]error
	)
	for j, b := range builds {
		bs := s
		if s.Log != nil {
			bs.Log = &prefixed{mu: &mu, w: s.Log, prefix: "  [" + b.name + "]"}
		}
		logPath := filepath.Join(dir, fmt.Sprintf("operator-%d-%s.log", round, b.fileName()))
		wg.Go(func() { cpu[j], errs[j] = pairRun(ctx, bs, n, b, logPath) })
	}
	wg.Wait()
	for j, b := range builds {
		if errs[j] != nil {
			return Pair{}, fmt.Errorf("bench: side by side, %s: %w", b.name, errs[j])
		}
	}
	return Pair{On: cpu[0], Off: cpu[1]}, nil
}

// pairRun is one side of a Pair: n Roles created, all Ready, deleted, all
// gone (every role dropped) with build b, on servers of the run's own, the
// operator a child process logging to logPath. It waits on informers of
// its own and returns the CPU its servers and operator used; this
// process's is left out, since the other side's bench runs in it too.
func pairRun(ctx context.Context, s Stack, n int, b build, logPath string) (time.Duration, error) {
	s, stop, err := s.forRun(ctx)
	if err != nil {
		return 0, err
	}
	defer stop()
	e, err := s.setup(ctx)
	if err != nil {
		return 0, err
	}
	defer e.close()
	se := &scaleEnv{env: e, nss: []string{e.ns}}
	watch, stopWatch, err := se.watch(ctx)
	if err != nil {
		return 0, err
	}
	defer stopWatch()
	op, err := startOperatorProcess(s.Operator, operatorArgs(s, e.recNS, b), logPath)
	if err != nil {
		return 0, err
	}
	defer op.stop()
	if err := se.waitServers(ctx, watch, op); err != nil {
		return 0, err
	}
	cpu0, err := s.cpuWith("operator", op.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	if err := e.createRoles(ctx, n); err != nil {
		return 0, err
	}
	if err := se.waitRoles(ctx, watch, op, "all Ready", func(ready, _ int) bool { return ready == n }); err != nil {
		return 0, err
	}
	if err := e.c.DeleteAllOf(ctx, &v1alpha1.Role{}, client.InNamespace(e.ns)); err != nil {
		return 0, err
	}
	if err := se.waitRoles(ctx, watch, op, "all gone", func(_, total int) bool { return total == 0 }); err != nil {
		return 0, err
	}
	cpu1, err := s.cpuWith("operator", op.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	return s.logCPU(cpu1, cpu0), e.noRolesLeft(ctx)
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
