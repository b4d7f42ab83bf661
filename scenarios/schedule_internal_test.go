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

// The external crash points' sample is deterministic, evenly spaced and
// keeps the first and last statement; no cap is every statement.
func TestSample(t *testing.T) {
	for name, c := range map[string]struct {
		n, max int
		want   []int
	}{
		"no cap":        {n: 4, max: 0, want: []int{0, 1, 2, 3}},
		"cap over n":    {n: 3, max: 5, want: []int{0, 1, 2}},
		"cap of one":    {n: 5, max: 1, want: []int{0}},
		"evenly spaced": {n: 10, max: 4, want: []int{0, 3, 6, 9}},
		"first, last":   {n: 7, max: 2, want: []int{0, 6}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, sample(c.n, c.max)); diff != "" {
				t.Errorf("sample(%d, %d) (-want +got):\n%s", c.n, c.max, diff)
			}
		})
	}
}

// The statement hook numbers statements by their collapsed text and
// crashes once, right after the target's round trip, never again.
func TestStatementsCrashOnceAfterTarget(t *testing.T) {
	crashes := 0
	s := newStatements(&External{SQL: `DROP ROLE "?"`, Nth: 2}, func() { crashes++ })
	for _, q := range []string{"SELECT 1", `DROP ROLE   "p1_a"`, "SELECT 1", "DROP\n\tROLE \"p2_\"\"b\"", `DROP ROLE "c"`, `COMMENT ON ROLE "x" IS 'it''s'`} {
		s.hook(t.Context(), q, nil)
	}
	want := []External{{"SELECT 1", 1}, {`DROP ROLE "?"`, 1}, {"SELECT 1", 2}, {`DROP ROLE "?"`, 2}, {`DROP ROLE "?"`, 3}, {`COMMENT ON ROLE "?" IS '?'`, 1}}
	if diff := cmp.Diff(want, s.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if crashes != 1 || !s.Crashed() {
		t.Errorf("crashes %d, Crashed %v; want 1, true", crashes, s.Crashed())
	}
}
