package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
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
	if s.Service == nil {
		return false
	}
	for _, a := range command {
		if strings.Contains(a, ".ServiceAddr") {
			return true
		}
	}
	for _, v := range env {
		if strings.Contains(v, ".ServiceAddr") {
			return true
		}
	}
	return false
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
