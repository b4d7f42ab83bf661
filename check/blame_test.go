package check

import (
	"strings"
	"testing"
)

func TestNotTheExperiments(t *testing.T) {
	deps := []Object{{Kind: "Role", Name: "r-0"}, {Kind: "Role", Name: "r-1"}}
	parent := Object{Kind: "Server", Name: "pg", Finalizers: []string{"example.com/in-use"}}
	finished := Violation{Invariant: Finished, Detail: "namespace(s) x not gone"}
	for name, tc := range map[string]struct {
		res  RunReport
		want string // a part of the blame; "" for none
	}{
		"held": {RunReport{}, ""},
		"only the parent kept the namespace": {
			RunReport{Violations: []Violation{finished}, LeftBehind: []Object{parent}},
			"Server pg (example.com/in-use)"},
		"a dependent left too: the experiment's own": {
			RunReport{Violations: []Violation{finished}, LeftBehind: []Object{parent, {Kind: "Role", Name: "r-1", Finalizers: []string{"f"}}}}, ""},
		"a leak besides: the experiment's own": {
			RunReport{Violations: []Violation{finished, {Invariant: NoLeak}}, LeftBehind: []Object{parent}}, ""},
		"nothing holding a finalizer": {
			RunReport{Violations: []Violation{finished}, LeftBehind: []Object{{Kind: "ConfigMap", Name: "c"}}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := notTheExperiments(tc.res, deps)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("notTheExperiments = %q, want one naming %q", got, tc.want)
			}
		})
	}
}
