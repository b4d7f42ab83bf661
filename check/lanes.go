package check

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrLanes is returned for Options.Lanes below zero.
var ErrLanes = errors.New("check: lanes must be 1 or more (0 decides)")

// defaultLaneCount is how many lanes a description safe to run side by
// side gets: broken runs mostly wait, so two stacks nearly halve the wall
// time on two CPUs without starving either control plane.
const defaultLaneCount = 2

// Why the lanes are what they are, in the report's note.
const (
	noteLanes          = "runs went in %d lane(s) (%s)"
	whyLanesAsked      = "as asked (--lanes): the probe is taken to list only its own run's resources"
	whyLanesOneCPU     = "one CPU"
	whyLanesSafe       = "each lane has a control plane and a service of its own, and the probe reaches its lane's service through {{.ServiceAddr}}"
	whyLanesNoProbe    = "each lane has a control plane of its own, and no probe looks at anything shared"
	whyLanesInProcess  = "part of the description runs in this process (%s), where lanes could share state; --lanes overrides"
	whyLanesSharedProb = "the %s may look at a service every lane shares (only a service check starts, reached through {{.ServiceAddr}}, is a lane's own): another lane's resources would count as leaks or duplicates; --lanes overrides"
)

// lanes decides how many stacks run experiments side by side: asked when
// positive, else the description's default on a machine with cpus CPUs.
func lanes(spec *Spec, asked, cpus int) (int, string, error) {
	switch {
	case asked < 0:
		return 0, "", fmt.Errorf("%w: got %d", ErrLanes, asked)
	case asked > 0:
		return asked, whyLanesAsked, nil
	}
	n, why := defaultLanes(spec, cpus)
	return n, why, nil
}

// defaultLanes is defaultLaneCount when no run can see another lane's
// resources: nothing runs in this process, and every probe either is
// absent or looks only at the service check starts for its own stack.
func defaultLanes(spec *Spec, cpus int) (int, string) {
	var inProcess []string
	if spec.Operator.Start != nil {
		inProcess = append(inProcess, "operator.Start")
	}
	if spec.Probe.Func != nil {
		inProcess = append(inProcess, "probe.Func")
	}
	if r := spec.Results; r != nil {
		for name, set := range map[string]bool{"results.probe.Func": r.Probe.Func != nil, "results.run.Func": r.Run.Func != nil, "results.complete.Func": r.Complete.Func != nil} {
			if set {
				inProcess = append(inProcess, name)
			}
		}
	}
	slices.Sort(inProcess)
	switch {
	case cpus < 2:
		return 1, whyLanesOneCPU
	case len(inProcess) > 0:
		return 1, fmt.Sprintf(whyLanesInProcess, strings.Join(inProcess, ", "))
	case spec.hasProbe() && !spec.ownService(spec.Probe.Command, spec.Probe.Env):
		return 1, fmt.Sprintf(whyLanesSharedProb, "probe")
	case spec.Results != nil && !spec.ownService(spec.Results.Probe.Command, spec.Results.Probe.Env):
		return 1, fmt.Sprintf(whyLanesSharedProb, "results probe")
	case !spec.hasProbe():
		return defaultLaneCount, whyLanesNoProbe
	}
	return defaultLaneCount, whyLanesSafe
}

// ownService reports whether a probe command reaches the service check
// starts per stack: there is one, and the command or its environment
// names {{.ServiceAddr}}.
func (s *Spec) ownService(command []string, env map[string]string) bool {
	names := func(a string) bool { return strings.Contains(a, ".ServiceAddr") }
	return s.Service != nil && (slices.ContainsFunc(command, names) || slices.ContainsFunc(slices.Collect(maps.Values(env)), names))
}

// laneWriter writes one lane's progress lines, each named by its lane,
// whole, through a lock the lanes share, so that lines never interleave.
type laneWriter struct {
	mu   *sync.Mutex
	w    io.Writer
	lane string
}

func (l laneWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	const head = "finale check: "
	var b bytes.Buffer
	for line := range strings.SplitAfterSeq(string(p), "\n") {
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, head); ok {
			b.WriteString(head + l.lane + rest)
		} else {
			b.WriteString(l.lane + line)
		}
	}
	if _, err := l.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newStacks starts n stacks side by side; with more than one, each has
// its own directory under tmp and names its lane in its progress lines.
func newStacks(ctx context.Context, spec *Spec, tmp string, n int, log io.Writer) ([]*stack, error) {
	if n == 1 {
		st, err := newStack(ctx, spec, tmp, log)
		if err != nil {
			return nil, err
		}
		return []*stack{st}, nil
	}
	var mu sync.Mutex
	stacks := make([]*stack, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := filepath.Join(tmp, fmt.Sprintf("lane-%d", i+1))
			if errs[i] = os.MkdirAll(dir, 0o700); errs[i] != nil {
				return
			}
			var w io.Writer
			if log != nil {
				w = laneWriter{mu: &mu, w: log, lane: fmt.Sprintf("lane %d: ", i+1)}
			}
			stacks[i], errs[i] = newStack(ctx, spec, dir, w)
		}()
	}
	wg.Wait()
	var started []*stack
	for _, st := range stacks {
		if st != nil {
			started = append(started, st)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return started, err
	}
	// The kills fall in the windows the first runs measured, whichever
	// lane ran them: a kill moment stays a function of the seed.
	for _, st := range stacks[1:] {
		st.win = stacks[0].win
	}
	return stacks, nil
}

// runLanes runs the experiments, each one's runs in order on one lane,
// the lanes taking the experiments in their order. Every lane starts at
// once: an operator never ready in the check's first run skips every
// other experiment (the lanes' runs in flight are cancelled), and a crash
// experiment starts once the experiments that measure its kills' window
// ended. Results are in the experiments' order; an experiment that did
// not end has none.
func runLanes(ctx context.Context, stacks []*stack, exps []*Experiment, opts Options) ([]Result, error) {
	results := make([]Result, len(exps))
	ended := make([]chan struct{}, len(exps))
	var queue []int
	for k, e := range exps {
		ended[k] = make(chan struct{})
		reason := e.skip(stacks[0].spec)
		if reason == "" && e.notFor != nil {
			reason = e.notFor(stacks[0].scopes)
		}
		if reason != "" {
			results[k] = Result{Name: e.Name, Description: e.Description, Fix: e.Fix, Verdict: Skipped, Reason: reason}
			progress(opts.Progress, "%-28s skipped: %s", e.Name, reason)
			close(ended[k])
			continue
		}
		queue = append(queue, k)
	}
	if len(queue) == 0 {
		return results, nil
	}
	if len(stacks) > 1 {
		queue = escapedLast(exps, queue)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex // guards next, failed, never and results
		next   int        // the queue's next experiment
		failed error      // the first run that could not run; the rest end
		never  bool
	)
	do := func(st *stack, k int) bool {
		e := exps[k]
		defer close(ended[k])
		if e.drawsKills() {
			for j := range k {
				if exps[j].measuresWindow() {
					select {
					case <-ended[j]:
					case <-ctx.Done():
						return false
					}
				}
			}
		}
		res, neverReady, err := st.experiment(ctx, e, k == queue[0], opts)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case never:
			// Cancelled, or ended after the first run said the
			// operator is never ready: skipped with the rest.
			progress(st.log, "%-28s skipped: %s", e.Name, reasonNeverReady)
			return false
		case err != nil:
			if failed == nil {
				failed = err
			}
			cancel()
			return false
		}
		results[k] = res
		if neverReady {
			never = true
			cancel()
			// Another lane's experiment that ended meanwhile goes too:
			// the report's verdicts do not hang on which lane was faster.
			for _, j := range queue[1:] {
				results[j] = Result{Name: exps[j].Name, Description: exps[j].Description, Fix: exps[j].Fix, Verdict: Skipped, Reason: reasonNeverReady}
			}
		}
		return !never
	}
	var wg sync.WaitGroup
	for _, st := range stacks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(queue) || never || failed != nil {
					mu.Unlock()
					return
				}
				k := queue[next]
				next++
				mu.Unlock()
				if !do(st, k) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return results, failed
}

// escapedLast moves escaped to the end of the lanes' queue (not of the
// report). Lanes end apart by up to the last experiment's run, and
// escaped's is the one run whose end is the sweeper's rather than a
// stuck window's: against an operator that breaks everything it is the
// shortest (22 s against 32 to 47 s), which fills the lanes' ends; the
// kill windows' measuring experiments stay first.
func escapedLast(exps []*Experiment, queue []int) []int {
	i := slices.IndexFunc(queue, func(k int) bool { return exps[k].Name == Escaped })
	if i <= 0 {
		return queue
	}
	return append(slices.Delete(slices.Clone(queue), i, i+1), queue[i])
}

// experiment runs e's runs in order on st, an experiment stopping at its
// first broken run unless opts.Runs asked for them all. first: this is
// the check's first run; one never ready (nothing disturbed its creates)
// is the experiment's broken run and neverReady says the rest is not to
// run.
func (st *stack) experiment(ctx context.Context, e *Experiment, first bool, opts Options) (res Result, neverReady bool, err error) {
	res = Result{Name: e.Name, Description: e.Description, Fix: e.Fix, Verdict: Held}
	te := time.Now()
	n := cmp.Or(opts.Runs, e.runs(opts.Quick))
	for i := range n {
		seed := opts.Seed + int64(i)
		r, err := st.run(ctx, e, seed, opts)
		if err != nil {
			return res, false, fmt.Errorf("%s (seed %d): %w", e.Name, seed, err)
		}
		if first && !e.faultsCreates() {
			if _, ok := r.violation(Ready); ok {
				// Nothing disturbed these creates: every other run
				// would wait its ready timeout for nothing. The run
				// is the report's broken one (ready, with the
				// operator's log); the rest are not run.
				res.Verdict = Broke
				res.Runs = append(res.Runs, r)
				res.Elapsed = Duration(time.Since(te))
				progress(st.log, "%-28s run %d/%d seed %d: %s in %s: %s", e.Name, i+1, n, seed, r.Verdict, r.Elapsed, reasonNeverReady)
				return res, true, nil
			}
		}
		first = false
		if r.Verdict == Broke {
			res.Verdict = Broke
		}
		res.Runs = append(res.Runs, r)
		progress(st.log, "%-28s run %d/%d seed %d: %s in %s (%s, leaked %d, duplicates %d, lost %d, kills %d)%s",
			e.Name, i+1, n, seed, r.Verdict, r.Elapsed, deletionCell(r), len(r.Leaked), r.Duplicates, len(r.Lost), r.Kills, earlySuffix(r))
		if r.Verdict == Broke && opts.Runs == 0 && i+1 < n {
			// One broken run settles the experiment's verdict, and
			// its seed reproduces it; asked-for runs (--runs) all run.
			res.Reason = fmt.Sprintf(reasonSettled, i+1, n-i-1)
			break
		}
	}
	res.Elapsed = Duration(time.Since(te))
	progress(st.log, "%-28s %s (%d run(s) in %s)%s", e.Name, strings.ToUpper(string(res.Verdict)), len(res.Runs), res.Elapsed, reasonSuffix(res.Reason))
	return res, false, nil
}
