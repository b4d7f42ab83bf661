package check

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The no-lost-result decision: a produced result is lost only when its
// child is gone and its owner never persisted it.
func TestLostResults(t *testing.T) {
	for name, tc := range map[string]struct {
		produced, persisted, children, want []string
	}{
		"nothing produced":              {children: []string{"a"}},
		"persisted, child gone":         {produced: []string{"a"}, persisted: []string{"a"}},
		"child still there":             {produced: []string{"a"}, children: []string{"a"}},
		"child gone, not persisted":     {produced: []string{"a"}, want: []string{"a"}},
		"persisted and child there":     {produced: []string{"a"}, persisted: []string{"a"}, children: []string{"a"}},
		"persisted without a result":    {persisted: []string{"a"}},
		"some lost, sorted, no repeats": {produced: []string{"c", "a", "b", "c"}, persisted: []string{"b"}, want: []string{"a", "c"}},
		"another child's record":        {produced: []string{"a"}, persisted: []string{"b"}, children: []string{"c"}, want: []string{"a"}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, lostResults(tc.produced, tc.persisted, tc.children)); diff != "" {
				t.Errorf("lostResults (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResults(t *testing.T) {
	for name, tc := range map[string]struct {
		out  string
		want ResultSet
		says string
	}{
		"all three": {out: "child a\nproduced a\n\n  persisted b  \nchild c\n",
			want: ResultSet{Children: []string{"a", "c"}, Produced: []string{"a"}, Persisted: []string{"b"}}},
		"empty":      {out: "\n"},
		"unknown":    {out: "child a\nrecorded a\n", says: `line 2 "recorded a": "recorded" is not`},
		"no id":      {out: "produced\n", says: `line 1 "produced": want`},
		"id, spaces": {out: "produced a b\n", want: ResultSet{Produced: []string{"a b"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseResults([]byte(tc.out))
			if tc.says != "" {
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("parseResults = %v, want an error saying %q", err, tc.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseResults (-want +got):\n%s", diff)
			}
		})
	}
}

// A description with results: the probe and the faults may go (no
// external service), so may the parent; the results' own fields are
// required.
const resultsSpec = `
name: workflows
operator:
  command: [./bin/controller, '--kubeconfig={{.Kubeconfig}}', --workers=2]
  stalled: {args: [--workers=0]}
crds: [crds]
dependents:
  count: 1
  template: '{apiVersion: example.com/v1, kind: Workflow, metadata: {name: wf-{{.Index}}}}'
results:
  children: {apiVersion: v1, kind: Pod}
  probe: {command: [./bin/results, '{{.Namespace}}']}
  run: {command: [./bin/kubelet, run, '{{.Namespace}}']}
  complete: {command: [./bin/kubelet, complete, '{{.Namespace}}']}
`

func TestParseResultsSpec(t *testing.T) {
	s, err := Parse([]byte(resultsSpec), "/descr")
	if err != nil {
		t.Fatal(err)
	}
	if s.hasProbe() || s.hasParent() || s.perDependent() != 0 || s.childrenPer() != 1 {
		t.Errorf("probe %v, parent %v, external per dependent %d, children per dependent %d; want false, false, 0, 1",
			s.hasProbe(), s.hasParent(), s.perDependent(), s.childrenPer())
	}
	var skipped []string
	for _, e := range Experiments() {
		if e.skip(s) != "" {
			skipped = append(skipped, e.Name)
		}
	}
	want := []string{OrderParentFirst, OrderSecretFirst, OperatorDown, Escaped, TransportFreeze, TransportStall}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("experiments skipped (-want +got):\n%s", diff)
	}
	if r := resultsOf(t, validSpec); r != nil {
		t.Errorf("a description without results has results: %+v", r)
	}
	for name, tc := range map[string]struct{ from, to, says string }{
		"no kind":          {"{apiVersion: v1, kind: Pod}", "{apiVersion: v1}", "results.children: apiVersion and kind required"},
		"no results probe": {"  probe: {command: [./bin/results, '{{.Namespace}}']}\n", "", "results.probe.command: required"},
		"no complete":      {"  complete: {command: [./bin/kubelet, complete, '{{.Namespace}}']}\n", "", "results.complete.command: required"},
		"bad stalled arg":  {"--workers=0", "'--workers={{.Nope}}'", "operator.stalled.args[0]"},
		"bad hook":         {"run, '{{.Namespace}}'", "run, '{{.Nope}}'", "results.run.command[2]"},
		"half a parent":    {"crds: [crds]", "crds: [crds]\nparent: {secret: '{apiVersion: v1, kind: Secret, metadata: {name: s}}'}", "parent.object: required with parent.secret"},
		"negative":         {"kind: Pod}", "kind: Pod, perDependent: -1}", "results.children.perDependent: negative"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(resultsSpec, tc.from) {
				t.Fatalf("the case's text %q is not in the description", tc.from)
			}
			_, err := Parse([]byte(strings.Replace(resultsSpec, tc.from, tc.to, 1)), "/descr")
			if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Parse = %v, want ErrSpec saying %q", err, tc.says)
			}
		})
	}
}

func resultsOf(t *testing.T, spec string) *Results {
	t.Helper()
	s, err := Parse([]byte(spec), "/descr")
	if err != nil {
		t.Fatal(err)
	}
	return s.Results
}
