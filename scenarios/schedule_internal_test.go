package scenarios

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/faultinject"
)

// The same seed draws the same schedule (a failing run replays from its
// printed seed); another seed draws another.
func TestScheduleIsReproducible(t *testing.T) {
	a, b := schedule(7, 12), schedule(7, 12)
	if diff := cmp.Diff(a, b, cmp.AllowUnexported(step{})); diff != "" {
		t.Errorf("same seed, different schedules (-want +got):\n%s", diff)
	}
	if cmp.Equal(a, schedule(8, 12), cmp.AllowUnexported(step{})) {
		t.Error("seeds 7 and 8 drew the same schedule")
	}
	kinds := map[string]bool{}
	for seed := range int64(50) {
		for _, s := range schedule(seed, DefaultSteps) {
			kinds[s.kind] = true
		}
	}
	for _, k := range stepKinds {
		if !kinds[k] {
			t.Errorf("step %s never drawn in 50 schedules", k)
		}
	}
}

func TestWritesOf(t *testing.T) {
	calls := []faultinject.Call{
		{Verb: faultinject.Get, Kind: "Role"},
		{Verb: faultinject.Patch, Kind: "Role"},
		{Verb: faultinject.Create, Kind: "ConfigMap"},
		{Verb: faultinject.Patch, Kind: "Role"},
		{Verb: faultinject.List, Kind: "Role"},
		{Verb: faultinject.StatusPatch, Kind: "Role"},
	}
	want := []Write{
		{Verb: faultinject.Patch, Kind: "Role", Nth: 1},
		{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 1},
		{Verb: faultinject.Patch, Kind: "Role", Nth: 2},
		{Verb: faultinject.StatusPatch, Kind: "Role", Nth: 1},
	}
	if diff := cmp.Diff(want, writesOf(calls)); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

func TestResultOK(t *testing.T) {
	leak := []Violation{{NoLeak, "role x"}}
	for name, tc := range map[string]struct {
		r    Result
		want bool
	}{
		"guarded, none broken": {Result{}, true},
		"guarded, one broken":  {Result{Violations: leak}, false},
		"naive, none broken":   {Result{ExpectViolations: true}, false},
		"naive, one broken":    {Result{ExpectViolations: true, Violations: leak}, true},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.r.OK()); diff != "" {
				t.Errorf("OK (-want +got):\n%s", diff)
			}
		})
	}
}

// A failing campaign run prints its seed and schedule.
func TestCampaignTablePrintsFailingSeed(t *testing.T) {
	rep := CampaignReport{
		Result: Result{Name: "campaign", Runs: 2, Faults: map[string]int{FaultRestart: 3}, Violations: []Violation{{NoLeak, "role x"}}},
		Failed: []RunRecord{{Run: 1, Seed: 43, Schedule: []string{"operator-restart", "delete object #1"}, Violations: []Violation{{NoLeak, "role x"}}}},
	}
	var b bytes.Buffer
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAILED run 1 seed 43", "operator-restart", "delete object #1", "faults: operator-restart", "violations: no-leak          1", "VIOLATED"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
