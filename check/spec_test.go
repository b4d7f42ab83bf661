package check

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// a valid description; the cases below break one thing each.
const validSpec = `
name: widgets
operator:
  command: [./bin/operator, '--kubeconfig={{.Kubeconfig}}', '--db={{.Proxy "db"}}']
  env: {POD_NAMESPACE: '{{.OperatorNamespace}}'}
crds: [config/crd]
faults:
  - {name: db, address: "127.0.0.1:5432"}
parent:
  secret: '{apiVersion: v1, kind: Secret, metadata: {name: creds}}'
  object: '{apiVersion: example.com/v1, kind: Connection, metadata: {name: conn}, spec: {host: "{{.ProxyHost "db"}}", port: {{.ProxyPort "db"}}}}'
dependents:
  count: 3
  template: '{apiVersion: example.com/v1, kind: Widget, metadata: {name: w-{{.Index}}}}'
probe:
  command: [./bin/list-widgets, '{{.Namespace}}']
timeouts: {hold: 40s, finish: 1m}
`

func TestParseValid(t *testing.T) {
	s, err := Parse([]byte(validSpec), "/descr")
	if err != nil {
		t.Fatal(err)
	}
	if s.Timeouts.Hold.Duration.String() != "40s" || s.finish().String() != "1m0s" || s.readyTimeout() != DefaultReadyTimeout {
		t.Errorf("timeouts: hold %s, finish %s, ready %s", s.Timeouts.Hold.Duration, s.finish(), s.readyTimeout())
	}
	if got := s.program("./bin/operator"); got != "/descr/bin/operator" {
		t.Errorf("program = %q, want it resolved against the file's directory", got)
	}
	if got := s.program("psql"); got != "psql" {
		t.Errorf("program = %q, want a bare name left to PATH", got)
	}
	if s.usesCacheKubeconfig() {
		t.Error("usesCacheKubeconfig: the command names only {{.Kubeconfig}}")
	}
}

// Each mistake is refused with the field it is in.
func TestParseRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ from, to, says string }{
		"unknown field":       {"  count: 3", "  count: 3\n  cuont: 4", `unknown field "dependents.cuont"`},
		"wrong type":          {"count: 3", "count: three", "dependents.count: a string, want an integer"},
		"bad duration":        {"hold: 40s", "hold: forty", `timeouts.hold: "forty" is not a duration`},
		"no command":          {"command: [./bin/operator, '--kubeconfig={{.Kubeconfig}}', '--db={{.Proxy \"db\"}}']", "env: {}", "operator.command: required"},
		"no faults":           {"  - {name: db, address: \"127.0.0.1:5432\"}", "  []", "faults: required"},
		"bad protocol":        {`address: "127.0.0.1:5432"}`, `address: "127.0.0.1:5432", protocol: udp}`, `faults[0].protocol: "udp"`},
		"zero dependents":     {"count: 3", "count: 0", "dependents.count: must be at least 1"},
		"no probe, no ready":  {"  command: [./bin/list-widgets, '{{.Namespace}}']", "  interval: 1s", "dependents.ready: required without probe.command"},
		"unknown proxy":       {`--db={{.Proxy "db"}}`, `--db={{.Proxy "pg"}}`, `no fault point "pg" (faults: db)`},
		"unknown value":       {"{{.Namespace}}", "{{.Nmespace}}", "probe.command[1]"},
		"template syntax":     {"w-{{.Index}}", "w-{{.Index}", "dependents.template"},
		"manifest not one":    {"parent:\n  secret: '{apiVersion: v1, kind: Secret, metadata: {name: creds}}'", "parent:\n  secret: |\n    {apiVersion: v1, kind: Secret, metadata: {name: a}}\n    ---\n    {apiVersion: v1, kind: Secret, metadata: {name: b}}", "parent.secret: holds 2 objects, want one"},
		"manifest no kind":    {"{apiVersion: v1, kind: Secret, metadata: {name: creds}}", "{apiVersion: v1, metadata: {name: creds}}", "parent.secret: a manifest without apiVersion or kind"},
		"manifest no name":    {"metadata: {name: creds}", "metadata: {}", "parent.secret: Secret without metadata.name"},
		"negative grace":      {"  env: {POD", "  grace: -1s\n  env: {POD", "operator.grace: negative"},
		"env var unset":       {"{{.OperatorNamespace}}", `{{env "FINALE_CHECK_SURELY_UNSET"}}`, "environment variable not set: FINALE_CHECK_SURELY_UNSET"},
		"fault name twice":    {`  - {name: db, address: "127.0.0.1:5432"}`, "  - {name: db, address: \"127.0.0.1:5432\"}\n  - {name: db, address: \"127.0.0.1:5433\"}", `faults[1].name: "db" used twice`},
		"not yaml":            {"name: widgets", "name: [widgets", "not YAML"},
		"service, no command": {"name: widgets", "name: widgets\nservice: {env: {A: b}}", "service.command: required"},
		"stuck too short":     {"hold: 40s", "hold: 40s, stuck: 2s", "timeouts.stuck: 2s is shorter than 5s"},
		"stuck negative":      {"hold: 40s", "hold: 40s, stuck: -1s", "timeouts.stuck: negative"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(validSpec, tc.from) {
				t.Fatalf("the case's text %q is not in the valid description", tc.from)
			}
			_, err := Parse([]byte(strings.Replace(validSpec, tc.from, tc.to, 1)), "/descr")
			if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Parse = %v, want ErrSpec saying %q", err, tc.says)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	v := Values{Namespace: "ns", Index: 2, ServiceAddr: "127.0.0.1:80", proxies: map[string]string{"db": "127.0.0.1:5433"}}
	t.Setenv("FINALE_CHECK_TEST_VAR", "x")
	got, err := expand("f", `{{.Namespace}}/{{.Index}} {{.Proxy "db"}} {{.ProxyHost "db"}}:{{.ProxyPort "db"}} {{.ServiceHost}}:{{.ServicePort}} {{env "FINALE_CHECK_TEST_VAR"}}`, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := "ns/2 127.0.0.1:5433 127.0.0.1:5433 127.0.0.1:80 x"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
}

func TestDecodeManifests(t *testing.T) {
	objs, err := decodeManifests("apiVersion: v1\nkind: Secret\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if diff := cmp.Diff([]string{"Secret/a", "ConfigMap/b"}, got); diff != "" {
		t.Errorf("decodeManifests (-want +got):\n%s", diff)
	}
}

func TestSelected(t *testing.T) {
	if _, err := selected([]string{"order-all-at-once", "nope"}); !errors.Is(err, ErrUnknownExperiment) || !strings.Contains(err.Error(), "kill-during-creates") {
		t.Errorf("selected = %v, want ErrUnknownExperiment listing the valid names", err)
	}
	exps, err := selected([]string{KillDuringCreates, OrderAllAtOnce})
	if err != nil {
		t.Fatal(err)
	}
	if len(exps) != 2 || exps[0].Name != OrderAllAtOnce {
		t.Errorf("selected: want both, in Run's order (all-at-once first, it measures the windows)")
	}
}

// Load refuses a path that does not exist on this machine with its field,
// before anything starts (testenv would say "testenv: CRD path" once the
// control plane had started).
func TestLoadRefusesPaths(t *testing.T) {
	t.Setenv("FINALE_TEST_CRDS", "config/crd")
	for name, tc := range map[string]struct {
		files []string
		extra string
		crds  string // replaces the description's crds
		says  []string
		paths int // CRD paths a valid description names
	}{
		"valid":             {files: []string{"config/crd/widgets.yaml"}, paths: 1},
		"glob":              {files: []string{"config/crd/widgets.yaml", "config/crd/gadgets.yaml", "config/crd/README.md"}, crds: "[config/crd/*.yaml]", paths: 2},
		"glob, no match":    {files: []string{"config/crd/widgets.yaml"}, crds: "[config/crd/*.json]", says: []string{"crds[0]: ", "config/crd/*.json\" matches nothing"}},
		"env":               {files: []string{"config/crd/widgets.yaml"}, crds: `['{{env "FINALE_TEST_CRDS"}}']`, paths: 1},
		"env unset":         {files: []string{"config/crd/widgets.yaml"}, crds: `['{{env "FINALE_TEST_CRDS_UNSET"}}']`, says: []string{"crds[0]: ", "FINALE_TEST_CRDS_UNSET"}},
		"missing CRD path":  {says: []string{"crds[0]: stat ", "config/crd: no such file or directory"}},
		"CRD dir, no yaml":  {files: []string{"config/crd/README.md"}, says: []string{"crds[0]: ", "config/crd holds no .yaml, .yml or .json file"}},
		"missing dir":       {files: []string{"config/crd/widgets.yaml"}, extra: "\n  dir: build", says: []string{"operator.dir: stat ", "build: no such file or directory"}},
		"dir that is file":  {files: []string{"config/crd/widgets.yaml", "build"}, extra: "\n  dir: build", says: []string{"operator.dir: ", "build is not a directory"}},
		"two paths missing": {extra: "\n  dir: build", says: []string{"crds[0]: ", "operator.dir: "}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			file := filepath.Join(dir, "widgets.yaml")
			text := strings.Replace(validSpec, "  env: {POD_NAMESPACE: '{{.OperatorNamespace}}'}", "  env: {POD_NAMESPACE: '{{.OperatorNamespace}}'}"+tc.extra, 1)
			if tc.crds != "" {
				text = strings.Replace(text, "crds: [config/crd]", "crds: "+tc.crds, 1)
			}
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Load(file)
			if tc.says == nil {
				if err != nil {
					t.Fatalf("Load = %v, want a valid description", err)
				}
				if paths, errs := s.crdPaths(); len(paths) != tc.paths || len(errs) > 0 {
					t.Errorf("CRD paths %q (%v), want %d", paths, errs, tc.paths)
				}
				return
			}
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("Load = %v, want ErrSpec", err)
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load = %v, want it to say %q", err, w)
				}
			}
		})
	}
}

// timeouts.sweep: read, validated at load with its field path, and what
// escaped makes of it (skipped, with its reason, without it).
func TestTimeoutsSweep(t *testing.T) {
	type outcome struct {
		Sweep  time.Duration
		Skip   string   // escaped's skip reason
		Errors []string // each line of the error, without ErrSpec's
	}
	const timeouts = "timeouts: {hold: 40s, finish: 1m}"
	for name, tc := range map[string]struct {
		base, from, to string
		want           outcome
	}{
		"unset: escaped skipped": {base: validSpec, from: timeouts, to: timeouts,
			want: outcome{Skip: reasonEscapedNoSweep}},
		"set": {base: validSpec, from: timeouts, to: "timeouts: {hold: 40s, finish: 1m, sweep: 15s}",
			want: outcome{Sweep: 15 * time.Second}},
		"longer than finish": {base: validSpec, from: timeouts, to: "timeouts: {finish: 1m, sweep: 2m}",
			want: outcome{Sweep: 2 * time.Minute}},
		"negative": {base: validSpec, from: timeouts, to: "timeouts: {hold: 40s, sweep: -1s}",
			want: outcome{Errors: []string{"timeouts.sweep: negative"}}},
		"not a duration": {base: validSpec, from: timeouts, to: "timeouts: {sweep: fifteen}",
			want: outcome{Errors: []string{`timeouts.sweep: "fifteen" is not a duration (want 40s, 2m, 1h30m)`}}},
		"misspelt": {base: validSpec, from: timeouts, to: "timeouts: {swep: 15s}",
			want: outcome{Errors: []string{`unknown field "timeouts.swep"`}}},
		"no probe to look through": {base: resultsSpec, from: "results:", to: "timeouts: {sweep: 15s}\nresults:",
			want: outcome{Errors: []string{"timeouts.sweep: " + msgSweepNoProbe}}},
		"no probe, unset: escaped skipped": {base: resultsSpec, from: "results:", to: "results:",
			want: outcome{Skip: reasonEscapedNoProbe}},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(tc.base, tc.from) {
				t.Fatalf("the case's text %q is not in the description", tc.from)
			}
			var got outcome
			s, err := Parse([]byte(strings.Replace(tc.base, tc.from, tc.to, 1)), "/descr")
			switch {
			case err != nil && !errors.Is(err, ErrSpec):
				t.Fatalf("Parse = %v, want ErrSpec", err)
			case err != nil:
				lines := strings.Split(err.Error(), "\n")
				for _, l := range lines[1:] {
					got.Errors = append(got.Errors, strings.TrimSpace(l))
				}
				if len(lines) == 1 { // a decoding error, on ErrSpec's line
					got.Errors = []string{strings.TrimSpace(strings.TrimPrefix(lines[0], ErrSpec.Error()+":"))}
				}
			default:
				got.Sweep = s.Timeouts.Sweep.Duration
				got.Skip = escapedExperiment(t).skip(s)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("timeouts.sweep (-want +got):\n%s", diff)
			}
		})
	}
}

func escapedExperiment(t *testing.T) *Experiment {
	t.Helper()
	for _, e := range Experiments() {
		if e.Name == Escaped {
			return e
		}
	}
	t.Fatalf("no experiment %q", Escaped)
	return nil
}

// What a description says about its parent and its dependents' external
// resources, read as written: a parent may come without a Secret (then
// only order-secret-first is skipped), and external: 0 means none.
func TestParentAndExternalAsWritten(t *testing.T) {
	const secretLine = "  secret: '{apiVersion: v1, kind: Secret, metadata: {name: creds}}'\n"
	type got struct {
		Parent, Secret bool
		PerDependent   int
		Skipped        []string
	}
	for name, tc := range map[string]struct {
		from, to string
		want     got
	}{
		"as given": {want: got{Parent: true, Secret: true, PerDependent: 1}},
		"no secret": {from: secretLine, to: "",
			want: got{Parent: true, PerDependent: 1, Skipped: []string{OrderSecretFirst}}},
		"external 0": {from: "  count: 3\n", to: "  count: 3\n  external: 0\n",
			want: got{Parent: true, Secret: true, PerDependent: 0}},
		"external 2": {from: "  count: 3\n", to: "  count: 3\n  external: 2\n",
			want: got{Parent: true, Secret: true, PerDependent: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(validSpec, tc.from) {
				t.Fatalf("the case's text %q is not in the description", tc.from)
			}
			s, err := Parse([]byte(strings.Replace(validSpec, tc.from, tc.to, 1)), "/descr")
			if err != nil {
				t.Fatal(err)
			}
			g := got{Parent: s.hasParent(), Secret: s.hasSecret(), PerDependent: s.perDependent()}
			for _, e := range Experiments() {
				// Only the skips that depend on the parent and the Secret:
				// the description has no hold timeout, no results and no
				// HTTP/2 fault point, whatever the case.
				if e.skip(s) != "" && (e.Name == OrderSecretFirst || e.Name == OrderParentFirst) {
					g.Skipped = append(g.Skipped, e.Name)
				}
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A cluster-scoped object (its kind's CRD says scope: Cluster) must be
// named uniquely per run: no namespace keeps two runs' objects apart. Load
// refuses one that is not, naming the field and the fix; a namespaced
// kind, or one the CRD files do not declare (a built-in: Run asks the
// control plane), may keep a fixed name.
func TestLoadClusterScopedNames(t *testing.T) {
	crd, err := filepath.Abs("testdata/widgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const widget = `{apiVersion: scope.check.finale.dev/v1, kind: Widget, metadata: {name: "%s"}}`
	for name, tc := range map[string]struct{ parent, dependent, says string }{
		"dependents per run":        {dependent: "w-{{.Run}}-{{.Index}}"},
		"dependents per namespace":  {dependent: "{{.Namespace}}-{{.Index}}"},
		"dependents fixed":          {dependent: "w-{{.Index}}", says: `dependents.template: Widget is cluster-scoped and its name "w-0" is the same in every run, so runs would clash (no namespace keeps them apart): put {{.Run}} (or {{.Namespace}}) in its metadata.name (name: widget-{{.Run}})`},
		"dependents by seed":        {dependent: "w-{{.Seed}}-{{.Index}}", says: `dependents.template: Widget is cluster-scoped and its name "w-1-0" is the same in every run`},
		"parent fixed":              {parent: "hub", dependent: "w-{{.Run}}-{{.Index}}", says: `parent.object: Widget is cluster-scoped and its name "hub" is the same in every run`},
		"parent per run":            {parent: "hub-{{.Run}}", dependent: "w-{{.Run}}-{{.Index}}"},
		"namespaced kinds fixed":    {},
		"parent per operator space": {parent: "{{.OperatorNamespace}}", dependent: "w-{{.Run}}-{{.Index}}"},
	} {
		t.Run(name, func(t *testing.T) {
			parent := "{apiVersion: v1, kind: ConfigMap, metadata: {name: conn}}"
			if tc.parent != "" {
				parent = fmt.Sprintf(widget, tc.parent)
			}
			dependent := "{apiVersion: v1, kind: ConfigMap, metadata: {name: 'd-{{.Index}}'}}"
			if tc.dependent != "" {
				dependent = fmt.Sprintf(widget, tc.dependent)
			}
			spec := fmt.Sprintf("operator: {command: [./op]}\ncrds: [%q]\nfaults: [{name: db, address: '127.0.0.1:1'}]\n"+
				"parent: {object: '%s'}\ndependents: {count: 2, template: '%s'}\nprobe: {command: [./list]}\n",
				crd, strings.ReplaceAll(parent, "'", "''"), strings.ReplaceAll(dependent, "'", "''"))
			path := filepath.Join(t.TempDir(), "operator.yaml")
			if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			switch {
			case tc.says == "" && err != nil:
				t.Errorf("Load = %v, want it valid", err)
			case tc.says != "" && (!errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("Load = %v, want ErrSpec saying %q", err, tc.says)
			}
		})
	}
}

// The control plane's word on scopes (Run's): each cluster-scoped kind of
// the world is found and named for the report, results.children's scope
// decides results-stalled, and a kind the control plane does not serve is
// refused with its field before any run.
func TestCheckScopes(t *testing.T) {
	widget := schema.GroupKind{Group: "scope.check.finale.dev", Kind: "Widget"}
	served := func(cluster ...string) scopeFunc {
		return func(gvk schema.GroupVersionKind) (bool, bool, error) {
			if gvk.Kind == "Gadget" {
				return false, false, errors.New("no matches for kind")
			}
			return slices.Contains(cluster, gvk.Kind), true, nil
		}
	}
	const (
		cm      = "{apiVersion: v1, kind: ConfigMap, metadata: {name: 'c-{{.Index}}'}}"
		widgets = "{apiVersion: scope.check.finale.dev/v1, kind: Widget, metadata: {name: 'w-{{.Run}}-{{.Index}}'}}"
	)
	type got struct {
		Cluster  []schema.GroupKind
		Fields   []string
		Children bool
		Err      string
	}
	for name, tc := range map[string]struct {
		parent, dependents string
		children           string
		manifests          string
		scope              scopeFunc
		want               got
	}{
		"namespaced":         {parent: cm, dependents: cm, scope: served(), want: got{}},
		"cluster dependents": {parent: cm, dependents: widgets, scope: served("Widget"), want: got{Cluster: []schema.GroupKind{widget}, Fields: []string{"dependents (Widget)"}}},
		"cluster parent":     {parent: strings.ReplaceAll(widgets, "-{{.Index}}", ""), dependents: cm, scope: served("Widget"), want: got{Cluster: []schema.GroupKind{widget}, Fields: []string{"parent (Widget)"}}},
		"cluster children":   {dependents: cm, children: "Node", scope: served("Node"), want: got{Children: true}},
		"cluster manifests":  {dependents: cm, manifests: "{apiVersion: v1, kind: ConfigMap, metadata: {name: cfg}}\n---\n{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: 'op-{{.Run}}'}}", scope: served("ClusterRole"), want: got{Cluster: []schema.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}}},
		"manifests fixed":    {dependents: cm, manifests: "{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: op}}", scope: served("ClusterRole"), want: got{Cluster: []schema.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}, Err: `operator.manifests: ClusterRole is cluster-scoped and its name "op" is the same in every run, so runs would clash (no namespace keeps them apart): put {{.Run}} (or {{.Namespace}}) in its metadata.name (name: clusterrole-{{.Run}})`}},
		"not served":         {dependents: strings.ReplaceAll(widgets, "Widget", "Gadget"), scope: served(), want: got{Err: "dependents.template: scope.check.finale.dev/v1 Gadget is not served by the control plane (is its CRD in crds?): no matches for kind"}},
	} {
		t.Run(name, func(t *testing.T) {
			s := &Spec{Parent: Parent{Object: tc.parent}, Dependents: Dependents{Count: 1, Template: tc.dependents}, Operator: Operator{Manifests: tc.manifests}}
			if tc.children != "" {
				s.Results = &Results{Children: Children{APIVersion: "v1", Kind: tc.children}}
			}
			sc, err := s.checkScopes(tc.scope)
			g := got{Fields: sc.fields, Children: sc.children}
			for gk := range sc.cluster {
				g.Cluster = append(g.Cluster, gk)
			}
			if err != nil {
				if !errors.Is(err, ErrSpec) {
					t.Errorf("checkScopes = %v, want ErrSpec", err)
				}
				g.Err = strings.TrimSpace(strings.TrimPrefix(err.Error(), ErrSpec.Error()+":"))
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("checkScopes (-want +got):\n%s", diff)
			}
		})
	}
}
