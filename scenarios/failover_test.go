package scenarios_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/scenarios"
)

// Two replicas of the reference operator, as processes, on the real Lease
// API: the leader killed at a random point of a sweep, of a burst of
// creates and of a namespace deletion, cut off from the API server during
// a burst, then paused during a burst and woken once the standby has
// finished it. Every invariant holds; the cut-off and the woken replicas
// send PostgreSQL nothing after their lease passed, and exit.
func TestFailover(t *testing.T) {
	var out bytes.Buffer
	rep, err := scenarios.FailoverCampaign(t.Context(), scenarios.FailoverOptions{Seed: 1}, env(t), &out)
	var table bytes.Buffer
	_ = rep.Table(&table)
	t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{scenarios.FaultLeaderKill: 3, scenarios.FaultLeaderPartition: 1, scenarios.FaultLeaderPause: 1}, rep.Faults); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]scenarios.Violation(nil), rep.Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	for _, c := range rep.Cases {
		if c.Successor == "" || c.Successor == c.Leader {
			t.Errorf("%s: no other replica took over from %s", c.Kind, c.Leader)
		}
		if (c.Kind == scenarios.CasePause || c.Kind == scenarios.CasePartition) && (!c.Exited || c.ZombieCalls > 0) {
			t.Errorf("%s: the replica exited %v, calls after its lease passed %d; want an exit and none", c.Kind, c.Exited, c.ZombieCalls)
		}
	}
}

// Without the fence (the naive build), the same pause shows what it
// prevents: the woken replica calls PostgreSQL after its lease passed.
func TestFailoverNaive(t *testing.T) {
	var out bytes.Buffer
	rep, err := scenarios.FailoverCampaign(t.Context(), scenarios.FailoverOptions{Seed: 1, Naive: true}, env(t), &out)
	var table bytes.Buffer
	_ = rep.Table(&table)
	t.Logf("narration:\n%s\ntable:\n%s", out.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	zombie := 0
	for _, v := range rep.Violations {
		if v.Invariant == scenarios.NoZombieCall {
			zombie++
		}
	}
	if zombie == 0 {
		t.Errorf("no zombie call without the fence; the scenario proves nothing (violations %v)", rep.Violations)
	}
	if !rep.OK() {
		t.Error("Result.OK() = false for the naive build")
	}
}
