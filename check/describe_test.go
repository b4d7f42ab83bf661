package check

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The readiness rule decides on objects as the apiserver returns them; a
// dependent that is not ready says what it has instead.
func TestReadyCheck(t *testing.T) {
	type got struct {
		OK  bool
		Why string
	}
	const (
		readyTrue    = `{status: {conditions: [{type: Ready, status: "True", reason: Created}]}}`
		readyFalse   = `{status: {conditions: [{type: Ready, status: "False", reason: Failed, message: boom}]}}`
		syncedFalse  = `{status: {conditions: [{type: Ready, status: "True"}, {type: Synced, status: "False", reason: Paused}]}}`
		phaseRunning = `{status: {phase: Running, readyReplicas: 3, nodes: [{ready: true}, {ready: true}]}}`
		phasePending = `{status: {phase: Pending, readyReplicas: 1, nodes: [{ready: true}, {ready: false}]}}`
	)
	for name, tc := range map[string]struct {
		rule Readiness
		obj  string
		want got
	}{
		"condition true":           {Readiness{Condition: "Ready"}, readyTrue, got{OK: true}},
		"condition false":          {Readiness{Condition: "Ready"}, readyFalse, got{Why: "Ready=False (reason Failed: boom)"}},
		"condition absent":         {Readiness{Condition: "Ready"}, `{status: {}}`, got{Why: "no Ready condition"}},
		"no status":                {Readiness{Condition: "Ready"}, `{metadata: {name: a}}`, got{Why: "no Ready condition"}},
		"condition status":         {Readiness{Condition: "Synced", Status: "False"}, syncedFalse, got{OK: true}},
		"condition reason":         {Readiness{Condition: "Ready", Reason: "Created"}, readyTrue, got{OK: true}},
		"condition other reason":   {Readiness{Condition: "Synced", Status: "False", Reason: "Done"}, syncedFalse, got{Why: "Synced=False (reason Paused: <nil>)"}},
		"field equal":              {Readiness{JSONPath: "{.status.phase}", Value: "Running"}, phaseRunning, got{OK: true}},
		"field other":              {Readiness{JSONPath: "{.status.phase}", Value: "Running"}, phasePending, got{Why: "{.status.phase} is Pending"}},
		"field without braces":     {Readiness{JSONPath: ".status.phase", Value: "Running"}, phaseRunning, got{OK: true}},
		"field absent":             {Readiness{JSONPath: "{.status.phase}"}, `{status: {}}`, got{Why: "{.status.phase} gives nothing"}},
		"field present":            {Readiness{JSONPath: "{.status.phase}"}, phasePending, got{OK: true}},
		"field empty":              {Readiness{JSONPath: "{.status.phase}"}, `{status: {phase: ""}}`, got{Why: "{.status.phase} is "}},
		"number":                   {Readiness{JSONPath: "{.status.readyReplicas}", Value: "3"}, phaseRunning, got{OK: true}},
		"number other":             {Readiness{JSONPath: "{.status.readyReplicas}", Value: "3"}, phasePending, got{Why: "{.status.readyReplicas} is 1"}},
		"every result":             {Readiness{JSONPath: "{.status.nodes[*].ready}", Value: "true"}, phaseRunning, got{OK: true}},
		"not every result":         {Readiness{JSONPath: "{.status.nodes[*].ready}", Value: "true"}, phasePending, got{Why: "{.status.nodes[*].ready} is true false"}},
		"filter expression":        {Readiness{JSONPath: `{.status.conditions[?(@.type=="Synced")].reason}`, Value: "Paused"}, syncedFalse, got{OK: true}},
		"filter expression absent": {Readiness{JSONPath: `{.status.conditions[?(@.type=="Synced")].reason}`, Value: "Paused"}, readyTrue, got{Why: `{.status.conditions[?(@.type=="Synced")].reason} gives nothing`}},
	} {
		t.Run(name, func(t *testing.T) {
			rd, err := compileReady(tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.obj), &obj); err != nil {
				t.Fatal(err)
			}
			var g got
			g.OK, g.Why = rd.ready(obj)
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("ready (-want +got):\n%s", diff)
			}
		})
	}
}

// parseErrors parses a description and returns its error's lines (none
// when it is valid), without ErrSpec's.
func parseErrors(t *testing.T, text string) (*Spec, []string) {
	t.Helper()
	s, err := Parse([]byte(text), "/descr")
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, ErrSpec) {
		t.Fatalf("Parse = %v, want ErrSpec", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 { // a decoding error, on ErrSpec's line
		return nil, []string{strings.TrimSpace(strings.TrimPrefix(lines[0], ErrSpec.Error()+":"))}
	}
	var out []string
	for _, l := range lines[1:] {
		out = append(out, strings.TrimSpace(l))
	}
	return nil, out
}

// Each readiness form is read as written and named as the timeline names
// it; a rule that cannot be one is refused at load with its field.
func TestParseReadiness(t *testing.T) {
	type got struct {
		Rule   string // as the timeline names it; "" without one
		Errors []string
	}
	const at = "  count: 3\n"
	for name, tc := range map[string]struct {
		add  string // a line under dependents
		want got
	}{
		"none":                  {want: got{}},
		"readyCondition":        {add: "  readyCondition: Ready\n", want: got{Rule: "Ready=True"}},
		"condition":             {add: "  ready: {condition: Synced, status: 'False', reason: Paused}\n", want: got{Rule: "Synced=False (reason Paused)"}},
		"jsonPath":              {add: "  ready: {jsonPath: '{.status.phase}', value: Running}\n", want: got{Rule: "{.status.phase}=Running"}},
		"jsonPath set":          {add: "  ready: {jsonPath: '{.status.id}'}\n", want: got{Rule: "{.status.id} set"}},
		"both forms":            {add: "  ready: {condition: Ready, jsonPath: '{.status.phase}'}\n", want: got{Errors: []string{"dependents.ready: " + errReadyBoth.Error()}}},
		"empty":                 {add: "  ready: {}\n", want: got{Errors: []string{"dependents.ready: " + errReadyNone.Error()}}},
		"and readyCondition":    {add: "  readyCondition: Ready\n  ready: {condition: Ready}\n", want: got{Errors: []string{"dependents.ready: set with dependents.readyCondition: give one"}}},
		"status without condit": {add: "  ready: {jsonPath: '{.status.phase}', status: 'True'}\n", want: got{Errors: []string{"dependents.ready: " + errReadyStatus.Error()}}},
		"value without jsonPath": {add: "  ready: {condition: Ready, value: x}\n",
			want: got{Errors: []string{"dependents.ready: " + errReadyValue.Error()}}},
		"bad jsonPath": {add: "  ready: {jsonPath: '{.status[}'}\n",
			want: got{Errors: []string{`dependents.ready: jsonPath "{.status[}": unterminated array`}}},
		"misspelt": {add: "  ready: {kondition: Ready}\n", want: got{Errors: []string{`unknown field "dependents.ready.kondition"`}}},
	} {
		t.Run(name, func(t *testing.T) {
			s, errs := parseErrors(t, strings.Replace(validSpec, at, at+tc.add, 1))
			g := got{Errors: errs}
			if s != nil {
				rd, err := s.readyCheck()
				if err != nil {
					t.Fatal(err)
				}
				if rd != nil {
					g.Rule = rd.String()
				}
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A description without a probe is one of an operator that makes no
// external resource: valid with a readiness rule (nothing else says the
// operator acted), without fault points; what it cannot check is skipped
// with its reason.
func TestProbeLess(t *testing.T) {
	const probeLess = `
operator: {command: [./bin/operator, '--kubeconfig={{.Kubeconfig}}']}
crds: [config/crd]
dependents:
  count: 2
  template: '{apiVersion: example.com/v1, kind: Widget, metadata: {name: w-{{.Index}}}}'
  ready: {condition: Ready}
`
	type got struct {
		Errors       []string
		PerDependent int
		Skipped      map[string]string
	}
	noParent := "the description has no parent (connection) object"
	skipped := map[string]string{
		OrderParentFirst: noParent, OrderSecretFirst: "the description has no credential Secret (parent.secret)",
		OperatorDown: "timeouts.hold is not set: the operator's own longest deletion timeout, which the operator stays down past",
		Escaped:      reasonEscapedNoProbe, TransportFreeze: "the description has no fault points (no external service)",
		TransportStall: "no fault point has protocol http2 (a stall needs HTTP/2 framing; transport-freeze covers plain TCP)",
		ResultsStalled: "the description gives no results (result-capture children)",
	}
	for name, tc := range map[string]struct {
		from, to string
		want     got
	}{
		"valid":             {want: got{Skipped: skipped}},
		"external 0":        {from: "  count: 2\n", to: "  count: 2\n  external: 0\n", want: got{Skipped: skipped}},
		"external 1":        {from: "  count: 2\n", to: "  count: 2\n  external: 1\n", want: got{Errors: []string{"dependents.external: " + msgExternalNoProbe}}},
		"parent's external": {from: "dependents:", to: "parent: {object: '{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}', external: 1}\ndependents:", want: got{Errors: []string{"parent.external: " + msgExternalNoProbe}}},
		"no ready":          {from: "  ready: {condition: Ready}\n", to: "", want: got{Errors: []string{"dependents.ready: " + msgNoProbeNoReady}}},
		"sweep":             {from: "crds:", to: "timeouts: {sweep: 10s}\ncrds:", want: got{Errors: []string{"timeouts.sweep: " + msgSweepNoProbe}}},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(probeLess, tc.from) {
				t.Fatalf("the case's text %q is not in the description", tc.from)
			}
			s, errs := parseErrors(t, strings.Replace(probeLess, tc.from, tc.to, 1))
			g := got{Errors: errs}
			if s != nil {
				g.PerDependent = s.perDependent()
				g.Skipped = map[string]string{}
				for _, e := range Experiments() {
					if r := e.skip(s); r != "" {
						g.Skipped[e.Name] = r
					}
				}
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Every templated field is evaluated at load with the values its scope
// has; a value it would not have when it is evaluated is refused with its
// field, crds included.
func TestTemplateScopes(t *testing.T) {
	t.Setenv("FINALE_TEST_CRDS", "config/crd")
	const service = "service: {command: [./bin/svc, '--listen={{.ServiceAddr}}', '--data={{.TempDir}}/svc']}\n"
	for name, tc := range map[string]struct {
		from, to string
		want     []string
	}{
		"service":                   {from: "crds:", to: service + "crds:"},
		"service, a run's value":    {from: "crds:", to: "service: {command: [./bin/svc, '{{.Namespace}}']}\ncrds:", want: []string{"service.command[1]: {{.Namespace}} has no value here; this field may use " + scopeText(scopeService)}},
		"service, a proxy":          {from: "crds:", to: "service: {command: [./bin/svc], env: {UP: '{{.Proxy \"db\"}}'}}\ncrds:", want: []string{"service.env.UP: {{.Proxy}} has no value here; this field may use " + scopeText(scopeService)}},
		"no service, its address":   {from: `address: "127.0.0.1:5432"`, to: `address: "{{.ServiceAddr}}"`, want: []string{"faults[0].address: {{.ServiceAddr}} has no value: the description starts no service (service.command)"}},
		"fault address, a run's":    {from: `address: "127.0.0.1:5432"`, to: `address: "{{.Run}}:5432"`, want: []string{"faults[0].address: {{.Run}} has no value here; this field may use " + scopeText(scopeService)}},
		"probe, an index":           {from: "'{{.Namespace}}'", to: "'{{.Index}}'", want: []string{"probe.command[1]: {{.Index}} has no value here; this field may use " + scopeText(scopeRun)}},
		"operator, $ index":         {from: "'--kubeconfig={{.Kubeconfig}}'", to: "'--kubeconfig={{$.Index}}'", want: []string{"operator.command[1]: {{.Index}} has no value here; this field may use " + scopeText(scopeRun)}},
		"in an if":                  {from: "'{{.Namespace}}'", to: "'{{if .Seed}}{{.Index}}{{end}}'", want: []string{"probe.command[1]: {{.Index}} has no value here; this field may use " + scopeText(scopeRun)}},
		"with: dot is another":      {from: "'{{.Namespace}}'", to: "'{{with .Namespace}}{{.}}{{end}}'"},
		"crds, env":                 {from: "crds: [config/crd]", to: `crds: ['{{env "FINALE_TEST_CRDS"}}']`},
		"crds, a value":             {from: "crds: [config/crd]", to: "crds: ['{{.Dir}}/config/crd']", want: []string{"crds[0]: {{.Dir}} has no value here; this field may use " + scopeText(scopeEnv)}},
		"crds, env unset":           {from: "crds: [config/crd]", to: `crds: ['{{env "FINALE_CHECK_SURELY_UNSET"}}']`, want: []string{`crds[0]: template: crds[0]:1:2: executing "crds[0]" at <env "FINALE_CHECK_SURELY_UNSET">: error calling env: environment variable not set: FINALE_CHECK_SURELY_UNSET`}},
		"crds, syntax":              {from: "crds: [config/crd]", to: "crds: ['{{env']", want: []string{`crds[0]: template: crds[0]:1: unclosed action`}},
		"dependent's index":         {},
		"parent, an index":          {from: `kind: Connection, metadata: {name: conn}`, to: `kind: Connection, metadata: {name: "conn{{.Index}}"}`, want: []string{"parent.object: {{.Index}} has no value here; this field may use " + scopeText(scopeRun)}},
		"manifests, a run's values": {from: "  env: {POD", to: "  manifests: '{apiVersion: v1, kind: ConfigMap, metadata: {name: \"c-{{.Run}}\"}}'\n  env: {POD"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(validSpec, tc.from) {
				t.Fatalf("the case's text %q is not in the description", tc.from)
			}
			_, errs := parseErrors(t, strings.Replace(validSpec, tc.from, tc.to, 1))
			if diff := cmp.Diff(tc.want, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// The description's templated values, found by their tags, with the
// paths errors name them by.
func TestTemplated(t *testing.T) {
	s, err := Parse([]byte(validSpec), "/descr")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range s.templated() {
		got = append(got, f.path+" "+string(f.scope))
	}
	want := []string{
		"operator.command[0] run", "operator.command[1] run", "operator.command[2] run", "operator.env.POD_NAMESPACE run",
		"crds[0] env", "faults[0].address service", "parent.secret run", "parent.object run", "dependents.template dependent",
		"probe.command[0] run", "probe.command[1] run",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("templated (-want +got):\n%s", diff)
	}
}

// templatedTypeFields walks Spec's type: every string, list of strings
// and map of strings a description can set, by its generic path
// (faults[].address), with its tmpl tag.
func templatedTypeFields(t reflect.Type, path string, f func(path, tag string, kind reflect.Kind)) {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" || !sf.IsExported() {
			continue
		}
		p := joinPath(path, name)
		ft := sf.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == reflect.TypeOf(metav1.Duration{}):
		case ft.Kind() == reflect.Struct:
			templatedTypeFields(ft, p, f)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			templatedTypeFields(ft.Elem(), p+"[]", f)
		case ft.Kind() == reflect.String || (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map) && ft.Elem().Kind() == reflect.String:
			f(p, sf.Tag.Get("tmpl"), ft.Kind())
		}
	}
}

// A string field added to the description must say whether it is
// templated, and with what: Validate checks what the tags say.
func TestTemplatedFieldsTagged(t *testing.T) {
	known := []string{string(scopeEnv), string(scopeService), string(scopeRun), string(scopeDependent), string(notTemplated)}
	n := 0
	templatedTypeFields(reflect.TypeOf(Spec{}), "", func(path, tag string, _ reflect.Kind) {
		n++
		if !slices.Contains(known, tag) {
			t.Errorf("%s: tmpl tag %q; want one of %v", path, tag, known)
		}
	})
	if n < 20 {
		t.Errorf("walked %d string fields; the walk missed the description's", n)
	}
}

// docs/check.md's table of templated fields is what the tags say.
func TestTemplatedFieldsDocumented(t *testing.T) {
	fields := map[scope][]string{}
	templatedTypeFields(reflect.TypeOf(Spec{}), "", func(path, tag string, _ reflect.Kind) {
		if sc := scope(tag); sc != notTemplated {
			fields[sc] = append(fields[sc], "`"+path+"`")
		}
	})
	want := []string{"| field | may use |", "|---|---|"}
	for _, sc := range []scope{scopeEnv, scopeService, scopeRun, scopeDependent} {
		var vals []string
		for _, v := range strings.Split(scopeText(sc), ", ") {
			vals = append(vals, "`"+v+"`")
		}
		want = append(want, "| "+strings.Join(fields[sc], ", ")+" | "+strings.Join(vals, ", ")+" |")
	}
	doc, err := os.ReadFile("../docs/check.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- templated fields: check's TestTemplatedFieldsDocumented -->\n"
	_, table, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/check.md has no %q", marker)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	if diff := cmp.Diff(want, strings.Split(table, "\n")); diff != "" {
		t.Errorf("docs/check.md's table of templated fields (-want +got):\n%s", diff)
	}
}

// The kill moments are a function of the seed, the count and the window
// alone: a reproduction with the printed seed and --kill-window draws the
// same ones, whatever else the run did.
func TestKillMoments(t *testing.T) {
	const window = 3 * time.Second
	first := killMoments(3, 2, window)
	if diff := cmp.Diff(first, killMoments(3, 2, window)); diff != "" {
		t.Errorf("seed 3 drew different moments twice (-first +second):\n%s", diff)
	}
	if slices.Equal(first, killMoments(4, 2, window)) {
		t.Errorf("seeds 3 and 4 drew the same moments %v", first)
	}
	if !slices.IsSorted(first) || first[0] < 0 || first[len(first)-1] >= window {
		t.Errorf("moments %v: want sorted, within [0, %s)", first, window)
	}
	// Pinned: a change to the draw changes every printed reproduction.
	if want := []time.Duration{194312602, 1400986391}; !slices.Equal(first, want) {
		t.Errorf("killMoments(3, 2, 3s) = %v, want %v", first, want)
	}
}

// A finished violation names the objects it is about: the dependents still
// there when it names their kind, with their finalizers and how long they
// have been deleting; everything left when it names the namespace.
func TestViolationObjects(t *testing.T) {
	left := []Object{
		{Kind: "Secret", Namespace: "ns", Name: "creds", Finalizers: []string{"hold"}},
		{Kind: "Widget", Namespace: "ns", Name: "w-0", Deleting: Duration(31 * time.Second), Finalizers: []string{"cleanup"}},
		{Kind: "Widget", Namespace: "ns", Name: "other"},
	}
	dep := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetKind("Widget")
		u.SetNamespace("ns")
		u.SetName(name)
		return u
	}
	for name, tc := range map[string]struct {
		left  []Object
		about []*unstructured.Unstructured
		want  string
	}{
		"the kind named":     {left, []*unstructured.Unstructured{dep("w-0"), dep("w-1")}, "Widget w-0 [cleanup] deleting for 31s"},
		"the namespace":      {left, nil, "Secret creds [hold] not deleting; Widget w-0 [cleanup] deleting for 31s; Widget other not deleting"},
		"the kind, all gone": {left[:1], []*unstructured.Unstructured{dep("w-0")}, "none of them left when listed (they went just after the bound)"},
		"nothing listable":   {nil, nil, "nothing listable left in them (the namespace controller had not finished)"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := objectsOf(tc.left, tc.about)
			if diff := cmp.Diff(tc.want, summarize(objs, tc.about != nil)); diff != "" {
				t.Errorf("summarize (-want +got):\n%s", diff)
			}
			for _, o := range objs {
				if tc.about != nil && o.Kind != "Widget" {
					t.Errorf("objects %v: want only the kind named", objs)
				}
			}
		})
	}
}
