package check

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Lanes run side by side by default only where no run can see another
// lane's resources; an explicit count is taken as asked.
func TestLanes(t *testing.T) {
	start := func(context.Context, OperatorEnv) error { return nil }
	list := func(context.Context, Values) ([]string, error) { return nil, nil }
	own := Probe{Command: []string{"psql", "-h", "{{.ServiceAddr}}"}}
	svc := &Service{Command: []string{"postgres"}}
	cases := map[string]struct {
		spec  Spec
		asked int
		cpus  int
		want  int
		err   error
	}{
		"own service probed through ServiceAddr": {spec: Spec{Service: svc, Probe: own}, cpus: 2, want: 2},
		"ServiceAddr in the probe's env":         {spec: Spec{Service: svc, Probe: Probe{Command: []string{"list"}, Env: map[string]string{"ADDR": "{{.ServiceAddr}}"}}}, cpus: 2, want: 2},
		"no probe":                               {spec: Spec{}, cpus: 4, want: 2},
		"one CPU":                                {spec: Spec{Service: svc, Probe: own}, cpus: 1, want: 1},
		"probe on a service given by env":        {spec: Spec{Probe: Probe{Command: []string{"psql"}, Env: map[string]string{"PGHOST": "db"}}}, cpus: 2, want: 1},
		"service started but not probed":         {spec: Spec{Service: svc, Probe: Probe{Command: []string{"psql"}}}, cpus: 2, want: 1},
		"in-process operator":                    {spec: Spec{Operator: Operator{Start: start}, Service: svc, Probe: own}, cpus: 2, want: 1},
		"in-process probe":                       {spec: Spec{Service: svc, Probe: Probe{Func: list}}, cpus: 2, want: 1},
		"results probe on a shared service":      {spec: Spec{Service: svc, Probe: own, Results: &Results{Probe: ResultsProbe{Command: []string{"list"}}}}, cpus: 2, want: 1},
		"asked for, in-process":                  {spec: Spec{Probe: Probe{Func: list}}, asked: 3, cpus: 1, want: 3},
		"below zero":                             {spec: Spec{}, asked: -1, cpus: 2, err: ErrLanes},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why, err := lanes(&tc.spec, tc.asked, tc.cpus)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("lanes (-want +got):\n%s", diff)
			}
			if err == nil && why == "" {
				t.Error("no reason given")
			}
		})
	}
}

// The lanes' queue keeps its order but for escaped, which goes last; the
// first experiment (the check's first run) never moves.
func TestEscapedLast(t *testing.T) {
	exps := []*Experiment{{Name: OrderAllAtOnce}, {Name: OrderDependentsFirst}, {Name: Escaped}, {Name: OperatorDown}, {Name: OwnNamespace}}
	for name, tc := range map[string]struct{ queue, want []int }{
		"escaped in the middle":    {[]int{0, 1, 2, 3, 4}, []int{0, 1, 3, 4, 2}},
		"escaped already last":     {[]int{0, 1, 3, 2}, []int{0, 1, 3, 2}},
		"escaped is the first run": {[]int{2, 3, 4}, []int{2, 3, 4}},
		"no escaped":               {[]int{0, 1, 3}, []int{0, 1, 3}},
	} {
		t.Run(name, func(t *testing.T) {
			queue := slices.Clone(tc.queue)
			if diff := cmp.Diff(tc.want, escapedLast(exps, queue)); diff != "" {
				t.Errorf("queue (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.queue, queue); diff != "" {
				t.Errorf("the caller's queue changed (-want +got):\n%s", diff)
			}
		})
	}
}
