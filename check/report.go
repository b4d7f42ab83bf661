package check

import (
	"encoding/json"
	"time"
)

// Verdict is how an experiment (or one of its runs) ended.
type Verdict string

// Verdicts.
const (
	// Held: every invariant held.
	Held Verdict = "held"
	// Broke: at least one invariant broke; the run's Reproduce says how
	// to see it again.
	Broke Verdict = "broke"
	// Skipped: the experiment does not apply to this description (its
	// Reason says why).
	Skipped Verdict = "skipped"
)

// Invariant names what a run checks at its end.
type Invariant string

// The invariants.
const (
	// Ready: the creates finished (every external resource listed, every
	// dependent ready) within timeouts.ready, faults and kills included.
	Ready Invariant = "ready"
	// Finished: every deletion finished within timeouts.finish: no object
	// and no namespace left Terminating.
	Finished Invariant = "finished"
	// NoLeak: nothing the probe lists is left once the deletion finished.
	NoLeak Invariant = "no-leak"
	// NoDuplicate: the run never saw more external resources than the
	// description makes (parent.external + count × dependents.external).
	NoDuplicate Invariant = "no-duplicate"
	// NoLostResult: every result a result-capture child produced was
	// persisted by its owner, or the child still exists (results only).
	NoLostResult Invariant = "no-lost-result"
)

// Violation is one broken invariant and what broke it.
type Violation struct {
	Invariant Invariant `json:"invariant"`
	Detail    string    `json:"detail"`
	// Objects, for finished, are the objects the violation is about, as
	// listed at the bound: the dependents still there when it names
	// their kind, else everything that kept the namespaces.
	Objects []Object `json:"objects,omitempty"`
}

func (v Violation) String() string { return string(v.Invariant) + ": " + v.Detail }

// Event is one step of a run's timeline.
type Event struct {
	// At is since the run began.
	At   Duration `json:"at"`
	What string   `json:"what"`
}

// Object is one object left behind, as kubectl would list it.
type Object struct {
	Kind string `json:"kind"`
	// Namespace is empty for a cluster-scoped object.
	Namespace  string   `json:"namespace"`
	Name       string   `json:"name"`
	Deleting   Duration `json:"deleting,omitempty"`
	Finalizers []string `json:"finalizers,omitempty"`
}

// RunReport is one run of an experiment.
type RunReport struct {
	Seed    int64    `json:"seed"`
	Verdict Verdict  `json:"verdict"`
	Elapsed Duration `json:"elapsed"`
	// Finish is how long the deletion took, from when it was asked (or,
	// for operator-down and escaped, from the operator's return) to the
	// last namespace gone; zero when it did not finish.
	Finish Duration `json:"finish,omitempty"`
	// Expected is how many external resources the run's objects make;
	// Seen how many distinct ones the probe listed during the run.
	Expected int `json:"expected"`
	Seen     int `json:"seen"`
	// Leaked are the probe's identities still there at the end.
	Leaked []string `json:"leaked,omitempty"`
	// Duplicates is Seen beyond Expected.
	Duplicates int `json:"duplicates"`
	// Produced is how many results the children produced (results only);
	// Lost those produced by a child now gone and never persisted by its
	// owner (the results probe's IDs).
	Produced int      `json:"produced,omitempty"`
	Lost     []string `json:"lost,omitempty"`
	// Kills counts the operator's SIGKILLs.
	Kills int `json:"kills"`
	// Faults are the faults put in, in order.
	Faults     []string    `json:"faults,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	// LeftBehind are the objects left in the run's namespaces at the
	// bound, and Conditions the namespaces' own.
	LeftBehind []Object `json:"leftBehind,omitempty"`
	Conditions []string `json:"conditions,omitempty"`
	Timeline   []Event  `json:"timeline,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	// EndedEarly names the wait that ended before its bound because the
	// run showed no progress for timeouts.stuck; empty when none did.
	EndedEarly string `json:"endedEarly,omitempty"`
	// Reproduce is the command that runs this run alone.
	Reproduce string `json:"reproduce,omitempty"`
	// OperatorLog is the end of the operator's log, for a broken run.
	OperatorLog string `json:"operatorLog,omitempty"`
	// Cause, when set, says that what broke is not what the experiment
	// puts in, and what it is instead: the experiment's fix does not
	// apply to this run.
	Cause string `json:"cause,omitempty"`
}

// Result is one experiment's outcome. Reason says why a skipped
// experiment did not run, or why a broken one ran fewer runs than its
// mode's.
type Result struct {
	Name        string      `json:"name"`
	Description string      `json:"description"`
	Verdict     Verdict     `json:"verdict"`
	Reason      string      `json:"reason,omitempty"`
	Fix         string      `json:"fix,omitempty"`
	Elapsed     Duration    `json:"elapsed"`
	Runs        []RunReport `json:"runs,omitempty"`
}

// Summary columns.

// MaxFinish is the longest deletion of the experiment's runs.
func (r Result) MaxFinish() time.Duration {
	var m time.Duration
	for _, run := range r.Runs {
		m = max(m, time.Duration(run.Finish))
	}
	return m
}

// sum adds f over the runs.
func (r Result) sum(f func(RunReport) int) int {
	n := 0
	for _, run := range r.Runs {
		n += f(run)
	}
	return n
}

// Leaked sums the runs' leaked resources.
func (r Result) Leaked() int { return r.sum(func(run RunReport) int { return len(run.Leaked) }) }

// Duplicates sums the runs' duplicates.
func (r Result) Duplicates() int { return r.sum(func(run RunReport) int { return run.Duplicates }) }

// Lost sums the runs' lost results.
func (r Result) Lost() int { return r.sum(func(run RunReport) int { return len(run.Lost) }) }

// Kills sums the runs' kills.
func (r Result) Kills() int { return r.sum(func(run RunReport) int { return run.Kills }) }

// Report is what a check found.
type Report struct {
	Operator string    `json:"operator"`
	File     string    `json:"file,omitempty"`
	Seed     int64     `json:"seed"`
	Quick    bool      `json:"quick"`
	Started  time.Time `json:"started"`
	Elapsed  Duration  `json:"elapsed"`
	// Setup is how long the control plane, the service and the proxies
	// took to start.
	Setup       Duration `json:"setup"`
	Experiments []Result `json:"experiments"`
	// Notes say what the check could not do (a second kubeconfig the
	// operator cannot take, the result-capture invariant).
	Notes []string `json:"notes,omitempty"`
}

// OK reports whether no experiment broke.
func (r Report) OK() bool {
	for _, e := range r.Experiments {
		if e.Verdict == Broke {
			return false
		}
	}
	return true
}

// Broken names the experiments that broke.
func (r Report) Broken() []string {
	var out []string
	for _, e := range r.Experiments {
		if e.Verdict == Broke {
			out = append(out, e.Name)
		}
	}
	return out
}

// Verdicts maps each experiment to its verdict.
func (r Report) Verdicts() map[string]Verdict {
	out := map[string]Verdict{}
	for _, e := range r.Experiments {
		out[e.Name] = e.Verdict
	}
	return out
}

// Runs counts the runs made; Kills the SIGKILLs.
func (r Report) Runs() (runs, kills int) {
	for _, e := range r.Experiments {
		runs += len(e.Runs)
		kills += e.Kills()
	}
	return runs, kills
}

// RunsPerMinute is the runs made per minute of the whole check.
func (r Report) RunsPerMinute() float64 {
	runs, _ := r.Runs()
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(runs) / time.Duration(r.Elapsed).Minutes()
}

// Duration is a time.Duration that reads and writes as "1.5s" in JSON.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).Round(10 * time.Millisecond).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}
