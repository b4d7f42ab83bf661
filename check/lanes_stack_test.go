package check_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/check"
)

// Two lanes give the verdicts and violations one lane gives, on an
// operator whose cleanup never succeeds, a crash experiment among the
// three (its kills fall in the window a run on either lane measured).
func TestLanesGiveOneLanesVerdicts(t *testing.T) {
	only := []string{check.OrderAllAtOnce, check.OrderDependentsFirst, check.KillDuringDeletion}
	verdicts := func(lanes int) (map[string]check.Verdict, map[string][]check.Invariant, check.Report) {
		svc := newToyService(0)
		spec := patSpec("toy-lanes", startStuck(stuckToy{svc: svc, broken: true}), svc)
		spec.Probe.Func = svc.listRun
		spec.Timeouts.Stuck = metav1Duration(5 * time.Second)
		rep, _ := patCheck(t, spec, check.Options{Only: only, Lanes: lanes})
		inv := map[string][]check.Invariant{}
		for _, e := range rep.Experiments {
			for _, r := range e.Runs {
				for _, v := range r.Violations {
					inv[e.Name] = append(inv[e.Name], v.Invariant)
				}
			}
		}
		return rep.Verdicts(), inv, rep
	}
	v1, inv1, rep1 := verdicts(1)
	v2, inv2, rep2 := verdicts(2)
	if diff := cmp.Diff(v1, v2); diff != "" {
		t.Errorf("verdicts (-1 lane +2 lanes):\n%s", diff)
	}
	if diff := cmp.Diff(inv1, inv2); diff != "" {
		t.Errorf("violations (-1 lane +2 lanes):\n%s", diff)
	}
	if v2[check.OrderDependentsFirst] != check.Broke {
		t.Errorf("dependents-first %s with 2 lanes; want broke: the test proves nothing", v2[check.OrderDependentsFirst])
	}
	if !slices.ContainsFunc(rep2.Notes, func(n string) bool { return strings.HasPrefix(n, "runs went in 2 lane(s)") }) {
		t.Errorf("the report does not say 2 lanes ran: %q", rep2.Notes)
	}
	t.Logf("1 lane: %s, 2 lanes: %s", rep1.Elapsed, rep2.Elapsed)
}
