package model

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// Case is one exhaustive check: a world, the rules it runs, and what it
// must find.
type Case struct {
	Name string
	// Doc says what the case shows.
	Doc string
	G2  *G2Config
	G3  *G3Config
	// Expect is empty when the case must hold every invariant; otherwise
	// the start of the invariant or obligation it must break ("no-leak",
	// "D0's orphaned", ...), with its counterexample.
	Expect string
	// Liveness: check liveness too (always for a passing case).
	Liveness bool
}

// Outcome is what checking a Case found.
type Outcome struct {
	Case   Case
	Result Result
	Err    error
	// Trace is the counterexample found (safety first), nil when none.
	Trace *Trace
}

// OK reports that the case met its expectation: no violation when none is
// expected, or the expected one.
func (o Outcome) OK() bool {
	if o.Err != nil || !o.Result.Complete && o.Trace == nil {
		return false
	}
	if o.Case.Expect == "" {
		return o.Trace == nil
	}
	if o.Trace == nil {
		return false
	}
	for _, v := range o.Trace.Violations {
		if strings.Contains(v, o.Case.Expect) {
			return true
		}
	}
	return false
}

// Check explores c.
func Check(ctx context.Context, c Case, maxStates int, progress io.Writer) Outcome {
	opts := Options{
		MaxStates:   maxStates,
		Liveness:    c.Liveness || c.Expect == "",
		StopAtFirst: c.Expect != "" && !c.Liveness,
		Progress:    progress,
		Expect:      c.Expect,
	}
	var o Outcome
	o.Case = c
	switch {
	case c.G2 != nil:
		sys, err := NewG2(*c.G2)
		if err != nil {
			o.Err = err
			return o
		}
		o.Result, o.Err = Explore[G2](ctx, sys, opts)
	case c.G3 != nil:
		sys, err := NewG3(*c.G3)
		if err != nil {
			o.Err = err
			return o
		}
		o.Result, o.Err = Explore[G3](ctx, sys, opts)
	default:
		o.Err = fmt.Errorf("model: case %s has no world", c.Name)
	}
	o.Trace = o.Result.Safety
	if o.Trace == nil {
		o.Trace = o.Result.Liveness
	}
	return o
}

// Suite returns the cases: with full, the larger worlds too (make model);
// without, a CI-sized set that still covers every rule and every naive
// variant.
func Suite(full bool) []Case {
	all := AllFaults()
	noForge := Faults{Crash: true, Fail: true, Stale: true}
	base := G2Config{Parents: 1, Dependents: 2, Faults: all, Rules: Target()}
	with := func(f func(c *G2Config)) *G2Config {
		c := base
		f(&c)
		return &c
	}
	target := Target()
	noRecord, noHold := target, target
	noRecord.Record = false
	noHold.Hold = false
	current := Current()
	naiveCapture := Target()
	naiveCapture.CaptureRule = false
	cachedHold, unheldSecret := target, target
	cachedHold.LiveBeforeRelease = false
	unheldSecret.SecretHeldBeforeCreate = false

	cases := []Case{
		// The protocol holds.
		{Name: "cleanup", Doc: "one parent and its Secret, two dependents, the sweeper with an admin connection; crash, failed calls, stale reads, edited records",
			G2: with(func(c *G2Config) { c.Admin = true })},
		{Name: "capture", Doc: "a workflow and its Pod: the owner's workers, capture's release path, the collector, the namespace controller",
			G3: &G3Config{Owners: 1, Children: 1, Faults: all, Rules: Target()}},
		{Name: "capture-siblings", Doc: "a workflow with two Pods (results persisted together)",
			G3: &G3Config{Owners: 1, Children: 2, Faults: all, Rules: Target()}},
		// The naive variants break it.
		{Name: "naive-no-record", Doc: "no record before the create: a hold that times out leaves a resource nobody knows of",
			G2: with(func(c *G2Config) { c.Rules = noRecord; c.Faults = Faults{} }), Expect: "no-leak"},
		{Name: "naive-no-hold", Doc: "no hold: the parent goes first (its namespace or a user deletes it) and the dependent can no longer delete",
			G2: with(func(c *G2Config) { c.Rules = noHold; c.Faults = Faults{} }), Expect: "orphaned", Liveness: true},
		{Name: "naive-capture-timer", Doc: "capture released on a timer (upstream Argo): a finished Pod goes before its lagging owner recorded it",
			G3: &G3Config{Owners: 1, Children: 1, Rules: naiveCapture}, Expect: "no-lost-result"},
		// What the model found, each with its rule taken out of Target.
		{Name: "finding-hold-from-cache", Doc: "the target rules without LiveBeforeRelease: the hold comes off a deleting parent on a stale count of its dependents",
			G2: with(func(c *G2Config) { c.Rules = cachedHold; c.Faults = Faults{Stale: true} }), Expect: "orphaned", Liveness: true},
		{Name: "finding-secret-unheld", Doc: "the target rules without SecretHeldBeforeCreate: a dependent created later creates through a parent that is held while its Secret is not",
			G2: with(func(c *G2Config) { c.Rules = unheldSecret; c.Faults = Faults{}; c.Late = 1 }), Expect: "deletion finishes", Liveness: true},
		// The defects of the code before records v2.
		{Name: "current-edited-record", Doc: "the sweeper acts on an edited record and deletes a live owner's resource",
			G2: with(func(c *G2Config) { c.Rules = current; c.Faults = Faults{Forge: true} }), Expect: "no-wrong-delete: the sweeper deleted a live"},
		{Name: "current-retain", Doc: "the sweeper deletes a Retain resource whose finalizer an admin removed",
			G2: with(func(c *G2Config) {
				c.Rules = current
				c.Faults = Faults{}
				c.Retain = 1
				c.ByHand = true
				c.Admin = true
			}), Expect: "no-wrong-delete: a Retain"},
		{Name: "current-two-step", Doc: "a resource made before its tag is never found by cleanup",
			G2: with(func(c *G2Config) { c.Rules = current; c.Faults = Faults{Fail: true}; c.TwoStep = true }), Expect: "no-leak"},
		{Name: "current-copy", Doc: "the sweeper cleans up through a tenant's copy of the deployment and drops the record",
			G2: with(func(c *G2Config) { c.Rules = current; c.Faults = Faults{}; c.Copy = true }), Expect: "no-leak"},
		{Name: "current-sweeper-cache", Doc: "the sweeper takes a new owner missing from its cache for gone",
			G2: with(func(c *G2Config) { c.Rules = current; c.Faults = Faults{Stale: true}; c.Late = 1; c.Dependents = 2 }), Expect: "no-wrong-delete: the sweeper deleted a live"},
		{Name: "current-no-record-waits", Doc: "an object that created nothing waits for ever when its Secret is missing",
			G2: with(func(c *G2Config) { c.Rules = current; c.Faults = Faults{} }), Expect: "deletion finishes", Liveness: true},
		{Name: "current-release-untried", Doc: "after the hold timed out, a dependent lets go without trying although its parent and Secret are there",
			G2: with(func(c *G2Config) { c.Rules = current; c.Faults = Faults{} }), Expect: "orphaned", Liveness: true},
	}
	if full {
		cases = append(cases,
			Case{Name: "cleanup-no-admin", Doc: "the same with no admin sweep connection: only the records' own parents reach the service",
				G2: with(func(c *G2Config) {})},
			Case{Name: "cleanup-two-step", Doc: "creates in two calls (make, tag), the pending name recorded first",
				G2: with(func(c *G2Config) { c.TwoStep = true })},
			Case{Name: "cleanup-retain", Doc: "one dependent Retain; admins may remove finalizers by hand",
				G2: with(func(c *G2Config) { c.Retain = 2; c.ByHand = true; c.Admin = true })},
			Case{Name: "cleanup-foreign-copy", Doc: "someone else takes a dependent's name; a tenant's Server reaches a copy of the deployment",
				G2: with(func(c *G2Config) { c.Foreign = true; c.Copy = true; c.Faults = noForge })},
			Case{Name: "cleanup-late", Doc: "a dependent created while the run goes on (the sweeper's settle window and a lagging cache)",
				G2: with(func(c *G2Config) { c.Late = 1; c.Admin = true })},
			Case{Name: "cleanup-two-parents", Doc: "two parents with a dependent each; the sweeper may see both",
				G2: with(func(c *G2Config) { c.Parents = 2; c.Admin = true; c.Faults = noForge })},
			Case{Name: "capture-two-owners", Doc: "two workflows with a Pod each",
				G3: &G3Config{Owners: 2, Children: 1, Faults: all, Rules: Target()}},
		)
	}
	return cases
}

// Report writes one line per outcome and the counterexample of each case
// that found one.
func Report(w io.Writer, outs []Outcome) {
	fmt.Fprintf(w, "%-26s %-6s %10s %12s %10s %7s %9s  %s\n", "case", "result", "states", "transitions", "SCCs", "depth", "time", "found")
	for _, o := range outs {
		res := "ok"
		if !o.OK() {
			res = "FAIL"
		}
		found := "every invariant holds"
		if o.Trace != nil {
			found = strings.Join(o.Trace.Violations, "; ")
		}
		if o.Err != nil {
			found = o.Err.Error()
		}
		fmt.Fprintf(w, "%-26s %-6s %10d %12d %10d %7d %9s  %s\n", o.Case.Name, res, o.Result.States, o.Result.Transitions,
			o.Result.SCCs, o.Result.MaxDepth, o.Result.Elapsed.Round(time.Millisecond), found)
	}
	for _, o := range outs {
		if o.Trace == nil {
			continue
		}
		fmt.Fprintf(w, "\n== %s: %s\n", o.Case.Name, o.Case.Doc)
		o.Trace.Format(w)
	}
}
