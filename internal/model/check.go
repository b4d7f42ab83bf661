package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Step is one transition as the explorer sees it: who took it (the actor,
// which fairness is about), whether it is a fault (excluded once faults
// stop), and a code its System turns into words for traces.
type Step struct {
	Actor uint8
	Fault bool
	Code  uint32
}

// System is a transition system the explorer can walk. S is a comparable
// value type: states are deduplicated by ==.
type System[S comparable] interface {
	// Init returns the initial states.
	Init() []S
	// Next calls emit for every transition out of s. A transition back to
	// s itself is dropped by the explorer (it changes nothing).
	Next(s S, emit func(Step, S))
	// Safety returns the safety invariants s breaks, none when it holds.
	Safety(s S) []string
	// Pending is the set of liveness obligations open in s (bit per
	// obligation). An obligation must be monotone: once open it stays open
	// until met, and once met never opens again, so that every state of a
	// strongly connected component has the same open set.
	Pending(s S) uint64
	// Obligation names obligation bit i for traces.
	Obligation(i int) string
	// Fair reports whether actor a is under weak fairness once faults stop
	// (workers, controllers and the clock are; users and attackers are not).
	Fair(a uint8) bool
	// Actor names actor a; Label describes one step; Describe one state.
	Actor(a uint8) string
	Label(st Step) string
	Describe(s S) string
}

// Options bound an exploration.
type Options struct {
	// MaxStates stops the exploration when reached (0: 20 million).
	MaxStates int
	// Liveness checks liveness on the graph without faults (costs memory
	// for its edges).
	Liveness bool
	// StopAtFirst stops at the first safety violation (the shortest one,
	// as exploration is breadth first).
	StopAtFirst bool
	// Progress, when set, gets a line every million states.
	Progress io.Writer
	// Expect, when set, keeps only counterexamples with a violation
	// containing it (a naive variant's known defect, say).
	Expect string
}

func matches(vs []string, want string) bool {
	if want == "" {
		return len(vs) > 0
	}
	for _, v := range vs {
		if strings.Contains(v, want) {
			return true
		}
	}
	return false
}

// Result is what an exploration found.
type Result struct {
	States      int
	Transitions int
	// HealedEdges are the transitions that remain once faults stop; SCCs
	// the strongly connected components of that graph.
	HealedEdges int
	SCCs        int
	MaxDepth    int
	Elapsed     time.Duration
	// Complete is false when MaxStates stopped the exploration.
	Complete bool
	// Safety and Liveness hold the first counterexample of each kind.
	Safety   *Trace
	Liveness *Trace
}

// OK reports that the exploration completed and found no violation.
func (r Result) OK() bool { return r.Complete && r.Safety == nil && r.Liveness == nil }

// Trace is a counterexample: a path of steps from an initial state.
type Trace struct {
	// Violations are the safety invariants broken in the last state, or
	// the liveness obligations never met.
	Violations []string
	Steps      []TraceStep
	// Loop, for liveness: from this index on, the steps repeat for ever
	// (Loop == len(Steps): the last state has nothing left to do).
	Loop int
	// Healed, for liveness: the index from which no fault is taken.
	Healed int
	// Final describes the last state.
	Final string
}

// TraceStep is one step of a trace and the state it led to.
type TraceStep struct {
	Actor, Action, State string
	Fault                bool
}

// Format writes t readably.
func (t *Trace) Format(w io.Writer) {
	if t == nil {
		return
	}
	for i, s := range t.Steps {
		if t.Loop < len(t.Steps) && i == t.Loop {
			fmt.Fprintln(w, "  -- from here the system repeats for ever (a fair cycle):")
		}
		mark := " "
		if s.Fault {
			mark = "!"
		}
		head := strings.TrimRight(fmt.Sprintf("  %3d%s %-14s %s", i+1, mark, s.Actor, s.Action), " ")
		fmt.Fprintf(w, "%s\n        %s\n", head, s.State)
	}
	if t.Loop == len(t.Steps) && t.Loop > 0 {
		fmt.Fprintln(w, "  -- and nothing can happen any more (every fair actor is done).")
	}
	fmt.Fprintf(w, "  broken: %s\n", strings.Join(t.Violations, "; "))
}

// ErrTooLarge means MaxStates was reached.
var ErrTooLarge = errors.New("model: state limit reached")

// Explore walks every state of sys reachable from its initial states,
// breadth first, checking Safety in each and, with opts.Liveness, that no
// fair run of the graph without faults leaves an obligation open for ever.
func Explore[S comparable](ctx context.Context, sys System[S], opts Options) (Result, error) {
	t0 := time.Now()
	if opts.MaxStates <= 0 {
		opts.MaxStates = 20_000_000
	}
	e := &explorer[S]{sys: sys, index: map[S]int32{}}
	var res Result
	for _, s := range sys.Init() {
		e.add(s, -1, Step{})
	}
	res.Complete = true
	for i := 0; i < len(e.states); i++ {
		if i&0xffff == 0 && ctx.Err() != nil {
			return res, ctx.Err()
		}
		if opts.Progress != nil && i > 0 && i%1_000_000 == 0 {
			fmt.Fprintf(opts.Progress, "  ... %d states explored, %d found, %s\n", i, len(e.states), time.Since(t0).Round(time.Second))
		}
		s := e.states[i]
		if v := sys.Safety(s); res.Safety == nil && matches(v, opts.Expect) {
			res.Safety = e.trace(int32(i), v)
			if opts.StopAtFirst {
				break
			}
		}
		if opts.Liveness {
			e.off = append(e.off, int32(len(e.dst)))
		}
		var enabled uint64
		sys.Next(s, func(st Step, t S) {
			if t == s {
				return
			}
			res.Transitions++
			j, ok := e.index[t]
			if !ok {
				if len(e.states) >= opts.MaxStates {
					res.Complete = false
					return
				}
				j = e.add(t, int32(i), st)
			}
			if opts.Liveness && !st.Fault {
				e.dst = append(e.dst, j)
				e.act = append(e.act, st.Actor)
				if sys.Fair(st.Actor) {
					enabled |= 1 << st.Actor
				}
			}
		})
		if opts.Liveness {
			e.enabled = append(e.enabled, enabled)
		}
	}
	res.States = len(e.states)
	for _, d := range e.depth {
		res.MaxDepth = max(res.MaxDepth, int(d))
	}
	if opts.Liveness && (res.Safety == nil || !opts.StopAtFirst) {
		e.off = append(e.off, int32(len(e.dst)))
		res.HealedEdges = len(e.dst)
		res.SCCs, res.Liveness = e.liveness(opts.Expect)
	}
	res.Elapsed = time.Since(t0)
	if !res.Complete {
		return res, fmt.Errorf("%w: %d states", ErrTooLarge, opts.MaxStates)
	}
	return res, nil
}

type explorer[S comparable] struct {
	sys    System[S]
	index  map[S]int32
	states []S
	parent []int32
	via    []Step
	depth  []int32
	// The graph without faults, in compressed rows: the edges of state i
	// are dst[off[i]:off[i+1]], taken by actors act[...].
	off     []int32
	dst     []int32
	act     []uint8
	enabled []uint64 // fair actors with an edge out of each state
}

func (e *explorer[S]) add(s S, parent int32, st Step) int32 {
	j := int32(len(e.states))
	e.index[s] = j
	e.states = append(e.states, s)
	e.parent = append(e.parent, parent)
	e.via = append(e.via, st)
	d := int32(0)
	if parent >= 0 {
		d = e.depth[parent] + 1
	}
	e.depth = append(e.depth, d)
	return j
}

// path returns the states from an initial one to i.
func (e *explorer[S]) path(i int32) []int32 {
	var p []int32
	for ; i >= 0; i = e.parent[i] {
		p = append(p, i)
	}
	for a, b := 0, len(p)-1; a < b; a, b = a+1, b-1 {
		p[a], p[b] = p[b], p[a]
	}
	return p
}

func (e *explorer[S]) step(st Step, to int32) TraceStep {
	return TraceStep{Actor: e.sys.Actor(st.Actor), Action: e.sys.Label(st), State: e.sys.Describe(e.states[to]), Fault: st.Fault}
}

func (e *explorer[S]) trace(i int32, violations []string) *Trace {
	t := &Trace{Violations: violations, Final: e.sys.Describe(e.states[i])}
	p := e.path(i)
	t.Steps = append(t.Steps, TraceStep{Actor: "start", State: e.sys.Describe(e.states[p[0]])})
	for _, j := range p[1:] {
		t.Steps = append(t.Steps, e.step(e.via[j], j))
	}
	t.Loop = len(t.Steps) + 1 // no loop
	return t
}

// liveness finds the strongly connected components of the graph without
// faults (Tarjan's algorithm, iteratively) and, in each, whether a fair
// run can stay in it for ever while an obligation stays open. Under weak
// fairness a run that visits every state and edge of a component is fair
// exactly when each fair actor is either disabled in some state of the
// component or takes an edge inside it; a component of one state without
// an edge to itself is a possible end of a run only if no fair actor is
// enabled there.
func (e *explorer[S]) liveness(want string) (int, *Trace) {
	n := int32(len(e.states))
	const unvisited = -1
	idx := make([]int32, n)
	low := make([]int32, n)
	onStack := make([]bool, n)
	for i := range idx {
		idx[i] = unvisited
	}
	var stack []int32
	type frame struct{ v, edge int32 }
	var call []frame
	var counter, sccs int32
	var bad *Trace
	comp := make([]int32, n) // component id + 1 while being classified
	for root := int32(0); root < n && bad == nil; root++ {
		if idx[root] != unvisited {
			continue
		}
		call = append(call[:0], frame{root, e.off[root]})
		idx[root], low[root] = counter, counter
		counter++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			v := f.v
			if f.edge < e.off[v+1] {
				w := e.dst[f.edge]
				f.edge++
				if idx[w] == unvisited {
					idx[w], low[w] = counter, counter
					counter++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, e.off[w]})
				} else if onStack[w] {
					low[v] = min(low[v], idx[w])
				}
				continue
			}
			call = call[:len(call)-1]
			if len(call) > 0 {
				u := call[len(call)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] != idx[v] {
				continue
			}
			sccs++
			var members []int32
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = sccs
				members = append(members, w)
				if w == v {
					break
				}
			}
			if bad == nil {
				if t := e.classify(members, comp, sccs); t != nil && matches(t.Violations, want) {
					bad = t
				}
			}
		}
	}
	return int(sccs), bad
}

// classify returns a counterexample when a fair run can stay in the
// component for ever with an obligation open.
func (e *explorer[S]) classify(members []int32, comp []int32, id int32) *Trace {
	open := ^uint64(0)
	for _, m := range members {
		open &= e.sys.Pending(e.states[m])
		if open == 0 {
			return nil
		}
	}
	always := ^uint64(0)
	var taken uint64
	internal := false
	for _, m := range members {
		always &= e.enabled[m]
		for k := e.off[m]; k < e.off[m+1]; k++ {
			if comp[e.dst[k]] == id {
				taken |= 1 << e.act[k]
				internal = true
			}
		}
	}
	if !internal {
		if e.enabled[members[0]] != 0 {
			return nil // a run must leave
		}
	} else if always&^taken != 0 {
		return nil // some fair actor enabled throughout is never taken inside: unfair
	}
	var names []string
	for b := 0; b < 64; b++ {
		if open&(1<<b) != 0 {
			names = append(names, e.sys.Obligation(b))
		}
	}
	entry := members[len(members)-1]
	for _, m := range members {
		if e.depth[m] < e.depth[entry] {
			entry = m
		}
	}
	t := e.trace(entry, names)
	t.Loop = len(t.Steps)
	t.Healed = t.Loop
	for t.Healed > 1 && !t.Steps[t.Healed-1].Fault {
		t.Healed--
	}
	if internal {
		t.Steps = append(t.Steps, e.cycle(entry, comp, id)...)
	}
	return t
}

// cycle returns a shortest cycle from v back to v inside its component,
// breadth first over the graph without faults.
func (e *explorer[S]) cycle(v int32, comp []int32, id int32) []TraceStep {
	prev := map[int32]int32{}
	prevEdge := map[int32]int32{}
	queue := []int32{v}
	seen := map[int32]bool{}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for k := e.off[u]; k < e.off[u+1]; k++ {
			w := e.dst[k]
			if comp[w] != id {
				continue
			}
			if w == v {
				var edges []int32
				edges = append(edges, k)
				for x := u; x != v; x = prev[x] {
					edges = append(edges, prevEdge[x])
				}
				var out []TraceStep
				at := v
				for i := len(edges) - 1; i >= 0; i-- {
					k := edges[i]
					to := e.dst[k]
					out = append(out, TraceStep{Actor: e.sys.Actor(e.act[k]), Action: e.labelOf(at, k), State: e.sys.Describe(e.states[to])})
					at = to
				}
				return out
			}
			if !seen[w] {
				seen[w] = true
				prev[w] = u
				prevEdge[w] = k
				queue = append(queue, w)
			}
		}
	}
	return nil
}

// labelOf recovers the label of edge k out of state u by regenerating u's
// transitions (edges keep only their actor).
func (e *explorer[S]) labelOf(u, k int32) string {
	target := e.states[e.dst[k]]
	label := "?"
	e.sys.Next(e.states[u], func(st Step, t S) {
		if label == "?" && !st.Fault && st.Actor == e.act[k] && t == target {
			label = e.sys.Label(st)
		}
	})
	return label
}
