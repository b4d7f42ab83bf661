package check

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Spec describes an operator under test: how to start it, the objects of
// one world (a parent connection object, its Secret, N dependents), where
// its external service is reached (fault points, each put behind a fault
// proxy), and a probe listing what exists in the external service. Load
// reads one from a YAML file; a Go test may build or edit one.
//
// Manifests, commands, arguments, environment values and addresses are Go
// templates (text/template) evaluated per run with Values; Load parses
// each and evaluates it once with placeholder values, so that a mistake
// is reported with its field before anything starts. A field's tmpl tag
// says whether it is templated and with which values (env, service, run,
// dependent: scopeValues); a value out of its field's scope is refused.
type Spec struct {
	// Name names the operator in reports; empty is the file's name.
	Name string `json:"name,omitempty" tmpl:"-"`
	// Operator says how to start the operator under test.
	Operator Operator `json:"operator"`
	// CRDs are files or directories (*.yaml, *.yml, *.json) of the
	// operator's CustomResourceDefinitions, relative to the file. Each is
	// templated with {{env "NAME"}} alone (it is read before anything
	// starts) and may be a glob (config/crd/*.yaml), which must match.
	CRDs []string `json:"crds" tmpl:"env"`
	// Namespace prefixes the namespace each run creates for the parent,
	// its Secret and the dependents (the owner namespace); empty is
	// "check-".
	Namespace string `json:"namespace,omitempty" tmpl:"-"`
	// Service, when set, is a command check starts once and stops at the
	// end: the external service, when the author wants check to run it.
	Service *Service `json:"service,omitempty"`
	// Faults are the external service's addresses the operator dials;
	// each gets a fault proxy, whose address the templates give the
	// operator (Values.Proxy). At least one with a probe, unless Results
	// is set; none is an operator without an external service (the
	// transport experiments are then skipped).
	Faults []FaultPoint `json:"faults"`
	// Parent is the connection object and its credential Secret; an
	// operator without one (Argo's workflow controller) leaves it out, and
	// the experiments about it are skipped.
	Parent Parent `json:"parent,omitempty"`
	// Dependents are the objects that make external resources through the
	// parent.
	Dependents Dependents `json:"dependents"`
	// Probe lists what exists in the external service. Left out, the
	// operator makes no external resource: no-leak and no-duplicate are
	// not checked, escaped is skipped, and the report says so
	// (Dependents.Ready, or Results, then says when a run may delete).
	Probe Probe `json:"probe,omitempty"`
	// Results, for owners with result-capture children (a workflow whose
	// Pods' outputs it must record before they go), says how to list what
	// the children produced and what their owners persisted; it adds the
	// no-lost-result invariant and the results-stalled experiment.
	Results *Results `json:"results,omitempty"`
	// Timeouts bound the runs and tell check the operator's own timeouts.
	Timeouts Timeouts `json:"timeouts,omitempty"`
	// Stale tunes the stale-apiserver experiment.
	Stale Stale `json:"stale,omitempty"`

	// dir is the directory relative paths are resolved against.
	dir string
	// file is where the spec was read from, for messages ("" when built
	// in Go).
	file string
}

// Operator says how to start the operator under test: a command (run as a
// process in a group of its own, so that SIGKILL kills it and whatever it
// started), or, from Go only, a Start function.
type Operator struct {
	// Command is the program and its arguments, templated. A relative
	// program path with a slash is resolved against the file's directory.
	Command []string `json:"command,omitempty" tmpl:"run"`
	// Env is added to check's own environment, templated.
	Env map[string]string `json:"env,omitempty" tmpl:"run"`
	// Dir is the working directory, relative to the file's; empty is the
	// file's directory.
	Dir string `json:"dir,omitempty" tmpl:"-"`
	// Manifests are created in the operator's namespace before each run's
	// operator starts (objects an admin would create there: a connection
	// the sweeper may use, a config map), templated; several documents
	// separated by "---". A cluster-scoped one (a ClusterRole) is created
	// in no namespace, named per run, and removed at the run's end.
	Manifests string `json:"manifests,omitempty" tmpl:"run"`
	// Grace is how long a stopped operator has between SIGTERM and
	// SIGKILL; zero is 10s. (A kill is SIGKILL at once.)
	Grace metav1.Duration `json:"grace,omitempty"`

	// Stalled, when set, is how the operator runs with its recording of
	// results stalled while the rest of it runs (Argo: no workflow
	// workers, its Pod cleanup running): arguments appended to Command
	// and environment added to Env; a Start function is told through
	// OperatorEnv.Stalled. results-stalled uses it; without it that
	// experiment keeps the operator down instead.
	Stalled *Stalled `json:"stalled,omitempty"`

	// Start runs the operator in-process instead of Command, until ctx
	// ends (a manager's Start); check "kills" it by cancelling ctx and
	// waiting for it to return. Go only.
	Start StartFunc `json:"-"`
}

// Stalled is the operator's stalled mode.
type Stalled struct {
	// Args are appended to operator.command, templated (a flag given
	// twice usually takes its last value: --workers=0).
	Args []string `json:"args,omitempty" tmpl:"run"`
	// Env is added to operator.env, templated.
	Env map[string]string `json:"env,omitempty" tmpl:"run"`
}

// StartFunc runs an in-process operator until ctx ends.
type StartFunc func(ctx context.Context, e OperatorEnv) error

// OperatorEnv is what an in-process operator is given.
type OperatorEnv struct {
	// Config reaches the apiserver the operator's writes go to; CacheConfig
	// the one its cache should list and watch through (the lagging one in
	// the stale-apiserver experiment; otherwise Config).
	Config, CacheConfig *rest.Config
	// Values are the run's template values (namespaces, proxies).
	Values Values
	// Stalled: run with the recording of results stalled
	// (Operator.Stalled, the results-stalled experiment).
	Stalled bool
}

// Service is the external service, started by check.
type Service struct {
	// Command is the program and its arguments, templated (ServiceAddr is
	// a free loopback address check chose for it).
	Command []string `json:"command" tmpl:"service"`
	// Env is added to check's own environment, templated.
	Env map[string]string `json:"env,omitempty" tmpl:"service"`
	// Dir is the working directory, relative to the file's.
	Dir string `json:"dir,omitempty" tmpl:"-"`
	// Ready is a host:port check waits to accept connections before the
	// first run, templated; empty is {{.ServiceAddr}}.
	Ready string `json:"ready,omitempty" tmpl:"service"`
}

// Fault point protocols.
const (
	// ProtocolTCP proxies bytes: freeze, reset, refuse and latency.
	ProtocolTCP = "tcp"
	// ProtocolHTTP2 proxies HTTP/2 in cleartext (gRPC without TLS) frame
	// by frame, which adds the stall.
	ProtocolHTTP2 = "http2"
)

// FaultPoint is one address of the external service the operator dials.
type FaultPoint struct {
	// Name is what templates call it: {{.Proxy "db"}}.
	Name string `json:"name" tmpl:"-"`
	// Address is the real host:port, templated (it may be
	// {{.ServiceAddr}} or {{env "PGADDR"}}).
	Address string `json:"address" tmpl:"service"`
	// Protocol is tcp (the default) or http2.
	Protocol string `json:"protocol,omitempty" tmpl:"-"`
}

// Parent is the connection object and its credential Secret, created in
// the owner namespace (a cluster-scoped parent in none) in that order,
// before the dependents.
type Parent struct {
	// Secret is the credential Secret's manifest, templated; optional, for
	// a parent that needs no credentials (order-secret-first is then
	// skipped).
	Secret string `json:"secret,omitempty" tmpl:"run"`
	// Object is the parent's manifest, templated.
	Object string `json:"object" tmpl:"run"`
	// External is how many external resources the parent itself makes
	// (counted by the probe); usually 0.
	External int `json:"external,omitempty"`
}

// Dependents are made from one template, once per index.
type Dependents struct {
	// Count is how many; --quick makes at most 2. At least 1.
	Count int `json:"count"`
	// Template is one dependent's manifest, templated with {{.Index}}.
	Template string `json:"template" tmpl:"dependent"`
	// External is how many external resources each makes: unset is 1,
	// and 0 is a dependent that makes none (the probe counts only the
	// parent's).
	External *int `json:"external,omitempty"`
	// Ready, when set, is what every dependent must show (besides the
	// probe's count) before a run deletes: a status condition, or a
	// JSONPath expression on the object. Required without a probe and
	// without results: nothing else says the operator has acted.
	Ready *Readiness `json:"ready,omitempty"`
	// ReadyCondition is ready: {condition: TYPE} written short; give one
	// of the two.
	ReadyCondition string `json:"readyCondition,omitempty" tmpl:"-"`
}

// Probe lists what exists in the external service: one identity per line
// of a command's output, or a Go function. Runs count only identities
// that were not there when the run began, so the probe may list more than
// the run's resources (everything the service holds).
type Probe struct {
	// Command is the program and its arguments, templated.
	Command []string `json:"command,omitempty" tmpl:"run"`
	// Env is added to check's own environment, templated.
	Env map[string]string `json:"env,omitempty" tmpl:"run"`
	// Dir is the working directory, relative to the file's.
	Dir string `json:"dir,omitempty" tmpl:"-"`
	// Interval is how often a run calls the probe, and the results probe:
	// its sampling and every wait on them (a probe is often a command that
	// calls a rate-limited API); zero is 500ms.
	Interval metav1.Duration `json:"interval,omitempty"`

	// Func lists in-process instead of Command. Go only.
	Func ProbeFunc `json:"-"`
}

// ProbeFunc lists the external resources' identities.
type ProbeFunc func(ctx context.Context, v Values) ([]string, error)

// Results describes result-capture children: objects the operator makes
// for each dependent (their owner), which do work and produce a result the
// owner must persist before they go (Argo: a Workflow's Pods, the outputs
// their executor reports, the node the Workflow records). check's control
// plane has no kubelet and runs none of the children's own processes, so
// the description plays them (Run, Complete).
type Results struct {
	// Children says which objects are the children.
	Children Children `json:"children"`
	// Probe lists the run's children, the results they produced and the
	// results their owners persisted.
	Probe ResultsProbe `json:"probe"`
	// Run, when set, makes every child that exists run, as a kubelet
	// would (idempotent); check calls it while it waits for the run to be
	// ready.
	Run Hook `json:"run,omitempty"`
	// Complete makes every child of the run finish and produce its
	// result, as the children's own processes would; results-stalled
	// calls it while the operator's recording is stalled. Required.
	Complete Hook `json:"complete"`
}

// Children are the result-capture children.
type Children struct {
	// APIVersion and Kind are the children's (v1, Pod): results-stalled
	// deletes every object of that kind in the owner namespace.
	APIVersion string `json:"apiVersion" tmpl:"-"`
	Kind       string `json:"kind" tmpl:"-"`
	// PerDependent is how many children each dependent makes; zero is 1.
	// A run is ready once the probe lists that many per dependent.
	PerDependent int `json:"perDependent,omitempty"`
}

// Hook is a step the description plays for check: a command, or from Go
// a function.
type Hook struct {
	// Command is the program and its arguments, templated.
	Command []string `json:"command,omitempty" tmpl:"run"`
	// Env is added to check's own environment, templated.
	Env map[string]string `json:"env,omitempty" tmpl:"run"`
	// Dir is the working directory, relative to the file's.
	Dir string `json:"dir,omitempty" tmpl:"-"`

	// Func runs in-process instead of Command. Go only.
	Func HookFunc `json:"-"`
}

// HookFunc is a hook run in-process.
type HookFunc func(ctx context.Context, v Values) error

func (h Hook) set() bool { return len(h.Command) > 0 || h.Func != nil }

// ResultsProbe lists the run's children and their results: a command
// printing lines "child ID", "produced ID" and "persisted ID", or a Go
// function. An ID names one child (Argo: the node ID) the same way in all
// three: child while the child exists, produced once it has produced its
// result (wherever the result waits for its owner: Argo's
// WorkflowTaskResult), persisted once its owner has recorded the result
// (the Workflow's node with its outputs).
type ResultsProbe struct {
	// Command is the program and its arguments, templated.
	Command []string `json:"command,omitempty" tmpl:"run"`
	// Env is added to check's own environment, templated.
	Env map[string]string `json:"env,omitempty" tmpl:"run"`
	// Dir is the working directory, relative to the file's.
	Dir string `json:"dir,omitempty" tmpl:"-"`

	// Func lists in-process instead of Command. Go only.
	Func ResultsFunc `json:"-"`
}

// ResultsFunc lists the children and their results.
type ResultsFunc func(ctx context.Context, v Values) (ResultSet, error)

// ResultSet is one listing of the results probe: the IDs of the children
// that exist, of those that produced a result, and of the results their
// owners persisted.
type ResultSet struct {
	Children, Produced, Persisted []string
}

// Timeouts bound a run's waits; they also tell check the operator's own.
type Timeouts struct {
	// Ready bounds the creates: every external resource listed and every
	// dependent ready. Zero is 2m.
	Ready metav1.Duration `json:"ready,omitempty"`
	// Finish bounds every deletion: the namespaces gone and the probe
	// showing nothing left, from when the deletion was asked (or its
	// fault healed). Zero is 2m.
	Finish metav1.Duration `json:"finish,omitempty"`
	// Hold is the operator's longest timeout on a deletion (how long it
	// keeps a parent for its dependents, say): operator-down keeps the
	// operator down this long and a little more during a namespace
	// deletion. Required for that experiment; without it the experiment
	// is skipped.
	Hold metav1.Duration `json:"hold,omitempty"`
	// Sweep is how long the operator's sweeper takes, once the operator
	// runs and the owners are gone, to delete what escaped their cleanup
	// (a finalizer removed by hand): its settle window (settle plus the
	// clock skew it tolerates), its pass interval, and its start. The
	// escaped experiment requires the external service clean this long
	// after the operator's return. Required for that experiment; without
	// it the experiment is skipped.
	Sweep metav1.Duration `json:"sweep,omitempty"`
	// Stuck is how long a run may show no progress before a wait on the
	// operator (the creates, a deletion, a leak) ends before its bound,
	// broken: nothing in the run's namespaces changed (objects,
	// finalizers, deletion marks, conditions and their messages, the
	// namespaces' phase and conditions), the probe listed the same and
	// the operator neither exited nor restarted. It must exceed the
	// longest the operator goes silent while it still progresses: its
	// start (caches, leader election), its longest call timeout plus the
	// retry after it. Never less than timeouts.hold with operator-down's
	// margin, nor timeouts.sweep once the namespaces are gone. Zero is
	// 30s; at least 5s.
	Stuck metav1.Duration `json:"stuck,omitempty"`
}

// Stale tunes the stale-apiserver experiment.
type Stale struct {
	// Lag is how far behind etcd the lagging apiserver is; zero is 1s.
	Lag metav1.Duration `json:"lag,omitempty"`
}

// Defaults.
const (
	DefaultNamespace    = "check-"
	DefaultGrace        = 10 * time.Second
	DefaultProbeEvery   = 500 * time.Millisecond
	DefaultReadyTimeout = 2 * time.Minute
	DefaultFinish       = 2 * time.Minute
	DefaultLag          = time.Second
	DefaultStuck        = 30 * time.Second
	minStuck            = 5 * time.Second
	quickDependents     = 2
)

// msgSweepNoProbe refuses a sweep window with nothing to look through.
const msgSweepNoProbe = "set without probe.command: escaped needs the probe to see what the sweeper left"

// A description without a probe: its operator makes no external resource.
const (
	msgExternalNoProbe = "set without probe.command: nothing would count them (leave probe out only for an operator that makes no external resource)"
	msgNoProbeNoReady  = "required without probe.command and results: nothing else says the operator has acted on a dependent before it is deleted " +
		"(an operator that makes external resources needs probe.command, a program printing one identity per line)"
)

// msgStuckShort refuses a stuck window shorter than a few of its samples.
const msgStuckShort = "%s is shorter than %s: a few looks at the run must fit in it"

// ErrSpec is wrapped by every error about a description.
var ErrSpec = errors.New("check: invalid description")

// Load reads a description file (YAML, decoded strictly: an unknown field
// or a value that does not parse is an error naming its field) and checks
// it, and the paths it names (checkPaths), before anything starts.
func Load(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	s, err := Parse(b, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.file = path
	if err := s.checkPaths(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// Parse decodes a description (YAML) whose relative paths are relative to
// dir, and checks it.
func Parse(data []byte, dir string) (*Spec, error) {
	var s Spec
	if err := decodeStrict(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	s.dir = dir
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// decodeStrict decodes YAML into v, refusing unknown fields (named by
// their path: operator.comand) and values of the wrong type (named too).
func decodeStrict(data []byte, v any) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	var generic any
	if err := json.Unmarshal(j, &generic); err != nil {
		return err
	}
	var f fieldProblems
	f.walk(generic, reflect.TypeOf(v).Elem(), "")
	if len(f.unknown) > 0 {
		sort.Strings(f.unknown)
		return fmt.Errorf("unknown field %s", strings.Join(f.unknown, ", "))
	}
	// A duration's own decoder (time.ParseDuration) names no field, so
	// each is parsed here first, where its path is known.
	if len(f.durations) > 0 {
		sort.Strings(f.durations)
		return errors.New(strings.Join(f.durations, "\n  "))
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: a %s, want %s", te.Field, te.Value, kindName(te.Type))
		}
		return err
	}
	return nil
}

// kindName says what a Go type is in YAML's words.
func kindName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(metav1.Duration{}):
		return "a duration (40s, 2m)"
	case t.Kind() == reflect.Slice:
		return "a list"
	case t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return "a mapping"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "an integer"
	}
	return t.Kind().String()
}

// fieldProblems collects, with their paths, the keys of a decoded YAML
// value that its Go type (a struct, through its json tags) does not have,
// and the durations that do not parse.
type fieldProblems struct {
	unknown   []string
	durations []string
}

// msgBadDuration is a duration that does not parse, at its field.
const msgBadDuration = "%s: %q is not a duration (want 40s, 2m, 1h30m)"

func (f *fieldProblems) walk(v any, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		l, _ := v.([]any)
		for i, e := range l {
			f.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
		return
	case reflect.Struct:
		if t == reflect.TypeOf(metav1.Duration{}) {
			if s, ok := v.(string); ok {
				if _, err := time.ParseDuration(s); err != nil {
					f.durations = append(f.durations, fmt.Sprintf(msgBadDuration, path, s))
				}
			}
			return
		}
	default:
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" || !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fields[name] = sf.Type
	}
	for k, e := range m {
		p := k
		if path != "" {
			p = path + "." + k
		}
		ft, ok := fields[k]
		if !ok {
			f.unknown = append(f.unknown, strconv.Quote(p))
			continue
		}
		f.walk(e, ft, p)
	}
}

// SetDir sets the directory relative paths are resolved against (a Spec
// built in Go; Load sets the file's).
func (s *Spec) SetDir(dir string) { s.dir = dir }

// Validate checks the description: required fields, names, and every
// template against placeholder values. Run calls it too.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	switch {
	case len(s.Operator.Command) == 0 && s.Operator.Start == nil:
		bad("operator.command", "required: the program that runs the operator and its arguments")
	case len(s.Operator.Command) > 0 && s.Operator.Start != nil:
		bad("operator.command", "set with a Start function: give one")
	}
	if s.Operator.Grace.Duration < 0 {
		bad("operator.grace", "negative")
	}
	if len(s.CRDs) == 0 {
		bad("crds", "required: the operator's CRD files or directories")
	}
	if s.Service != nil && len(s.Service.Command) == 0 {
		bad("service.command", "required when service is set: the program that runs the external service")
	}
	if len(s.Faults) == 0 && s.Results == nil && s.hasProbe() {
		bad("faults", "required: at least one address of the external service the operator dials")
	}
	seen := map[string]bool{}
	for i, f := range s.Faults {
		field := fmt.Sprintf("faults[%d]", i)
		switch {
		case f.Name == "":
			bad(field+".name", "required")
		case seen[f.Name]:
			bad(field+".name", "%q used twice", f.Name)
		}
		seen[f.Name] = true
		if f.Address == "" {
			bad(field+".address", "required: the real host:port of the external service")
		}
		if !slices.Contains([]string{"", ProtocolTCP, ProtocolHTTP2}, f.Protocol) {
			bad(field+".protocol", "%q: want %s or %s", f.Protocol, ProtocolTCP, ProtocolHTTP2)
		}
	}
	if s.Parent.Object == "" && s.Parent.Secret != "" {
		bad("parent.object", "required with parent.secret: the parent (connection) object's manifest")
	}
	if s.Parent.External < 0 {
		bad("parent.external", "negative")
	}
	if s.Dependents.Count < 1 {
		bad("dependents.count", "must be at least 1")
	}
	if s.Dependents.Template == "" {
		bad("dependents.template", "required: one dependent's manifest, with {{.Index}}")
	}
	if s.Dependents.External != nil && *s.Dependents.External < 0 {
		bad("dependents.external", "negative")
	}
	rd, err := s.readyCheck()
	if err != nil {
		bad("dependents.ready", "%v", err)
	}
	if !s.hasProbe() {
		// Nothing would count what the objects make: a description
		// without a probe is one of an operator that makes none.
		if s.Parent.External > 0 {
			bad("parent.external", msgExternalNoProbe)
		}
		if s.Dependents.External != nil && *s.Dependents.External > 0 {
			bad("dependents.external", msgExternalNoProbe)
		}
		if s.Results == nil && rd == nil && err == nil {
			bad("dependents.ready", msgNoProbeNoReady)
		}
	}
	if r := s.Results; r != nil {
		if r.Children.APIVersion == "" || r.Children.Kind == "" {
			bad("results.children", "apiVersion and kind required: the kind of the result-capture children (v1, Pod)")
		}
		if r.Children.PerDependent < 0 {
			bad("results.children.perDependent", "negative")
		}
		if len(r.Probe.Command) == 0 && r.Probe.Func == nil {
			bad("results.probe.command", `required: a program printing "child ID", "produced ID" and "persisted ID" lines`)
		}
		if !r.Complete.set() {
			bad("results.complete.command", "required: a program making every child finish and produce its result")
		}
	}
	for field, d := range map[string]time.Duration{
		"probe.interval": s.Probe.Interval.Duration, "timeouts.ready": s.Timeouts.Ready.Duration,
		"timeouts.finish": s.Timeouts.Finish.Duration, "timeouts.hold": s.Timeouts.Hold.Duration,
		"timeouts.sweep": s.Timeouts.Sweep.Duration, "stale.lag": s.Stale.Lag.Duration,
		"timeouts.stuck": s.Timeouts.Stuck.Duration,
	} {
		if d < 0 {
			bad(field, "negative")
		}
	}
	if d := s.Timeouts.Stuck.Duration; d > 0 && d < minStuck {
		bad("timeouts.stuck", msgStuckShort, d, minStuck)
	}
	if s.Timeouts.Sweep.Duration > 0 && !s.hasProbe() {
		// Nothing would say whether the sweeper cleaned: a window set
		// for an experiment that cannot run is a mistake to name.
		bad("timeouts.sweep", msgSweepNoProbe)
	}
	if len(errs) == 0 {
		errs = append(errs, s.checkTemplates()...)
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return fmt.Errorf("%w:\n  %w", ErrSpec, joinLines(errs))
	}
	return nil
}

// checkPaths checks the paths the description names on this machine: each
// CRD path a file, or a directory holding a .yaml, .yml or .json file (what
// testenv installs), the working directories directories, and the names of
// the objects whose kinds the CRD files declare cluster-scoped. Parse checks
// the text alone (it may describe another machine's files); Load and Run
// call this too, so that a wrong path is refused with its field before the
// control plane starts rather than by testenv once it has.
func (s *Spec) checkPaths() error {
	crds, errs := s.crdPaths()
	dirs := map[string]string{"operator.dir": s.Operator.Dir}
	if s.Service != nil {
		dirs["service.dir"] = s.Service.Dir
	}
	for field, d := range dirs {
		if d == "" {
			continue
		}
		if fi, err := os.Stat(s.path(d)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s: %s is not a directory", field, s.path(d)))
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return fmt.Errorf("%w:\n  %w", ErrSpec, joinLines(errs))
	}
	// The scopes the CRD files declare: a cluster-scoped object's name
	// must be unique to the run (Run asks the control plane again, which
	// knows the built-in kinds too).
	_, err := s.checkScopes(crdScope(crds))
	return err
}

// crdPath checks one CRD path as testenv reads it.
func crdPath(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			return nil
		}
	}
	return fmt.Errorf("%s holds no .yaml, .yml or .json file", p)
}

// joinLines joins errors one per indented line.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

// checkTemplates parses every templated field (Spec.templated), refuses
// a value out of its field's scope, evaluates each with placeholder
// values, and decodes the manifests.
func (s *Spec) checkTemplates() []error {
	v := s.placeholders()
	var errs []error
	for _, f := range s.templated() {
		if err := checkTemplate(f, v, s.Service != nil); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs // a manifest that did not evaluate cannot be decoded
	}
	manifest := func(field, t string, many bool) {
		out, err := expand(field, t, v)
		if err != nil {
			errs = append(errs, err)
			return
		}
		objs, err := decodeManifests(out)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		case !many && len(objs) != 1:
			errs = append(errs, fmt.Errorf("%s: holds %d objects, want one", field, len(objs)))
		}
		for _, o := range objs {
			if o.GetName() == "" {
				errs = append(errs, fmt.Errorf("%s: %s without metadata.name", field, o.GetKind()))
			}
		}
	}
	if s.hasSecret() {
		manifest("parent.secret", s.Parent.Secret, false)
	}
	if s.hasParent() {
		manifest("parent.object", s.Parent.Object, false)
	}
	manifest("dependents.template", s.Dependents.Template, false)
	if s.Operator.Manifests != "" {
		manifest("operator.manifests", s.Operator.Manifests, true)
	}
	return errs
}

// placeholders are the values templates are checked with.
func (s *Spec) placeholders() Values {
	v := Values{
		Namespace: "check-ns", OperatorNamespace: "check-op", Run: "r0", Seed: 1,
		Kubeconfig: "/kubeconfig", CacheKubeconfig: "/kubeconfig", ServiceAddr: "127.0.0.1:1",
		TempDir: os.TempDir(), Dir: s.dir, proxies: map[string]string{},
	}
	for _, f := range s.Faults {
		v.proxies[f.Name] = "127.0.0.1:2"
	}
	return v
}

func (s *Spec) path(p string) string {
	if p == "" {
		return s.dir
	}
	if filepath.IsAbs(p) || s.dir == "" {
		return p
	}
	return filepath.Join(s.dir, p)
}

// crdPaths are the CRD paths the description names, each expanded (env
// only) and, when a glob, matched; every one checked as crdPath does. Each
// error names its entry.
func (s *Spec) crdPaths() ([]string, []error) {
	var out []string
	var errs []error
	for i, p := range s.CRDs {
		field := fmt.Sprintf("crds[%d]", i)
		p, err := expand(field, p, Values{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		paths := []string{s.path(p)}
		if strings.ContainsAny(p, "*?[") {
			if paths, err = filepath.Glob(s.path(p)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %q: %w", field, p, err))
				continue
			}
			if len(paths) == 0 {
				errs = append(errs, fmt.Errorf("%s: %q matches nothing", field, s.path(p)))
				continue
			}
		}
		for _, path := range paths {
			if err := crdPath(path); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", field, err))
				continue
			}
			out = append(out, path)
		}
	}
	return out, errs
}

// program resolves a command's program: a relative path with a slash is
// the file's directory's; a bare name is looked up in PATH by exec.
func (s *Spec) program(p string) string {
	if strings.Contains(p, "/") && !filepath.IsAbs(p) {
		return s.path(p)
	}
	return p
}

func (s *Spec) grace() time.Duration { return cmp.Or(s.Operator.Grace.Duration, DefaultGrace) }
func (s *Spec) probeEvery() time.Duration {
	return cmp.Or(s.Probe.Interval.Duration, DefaultProbeEvery)
}
func (s *Spec) readyTimeout() time.Duration {
	return cmp.Or(s.Timeouts.Ready.Duration, DefaultReadyTimeout)
}
func (s *Spec) finish() time.Duration { return cmp.Or(s.Timeouts.Finish.Duration, DefaultFinish) }
func (s *Spec) lag() time.Duration    { return cmp.Or(s.Stale.Lag.Duration, DefaultLag) }
func (s *Spec) stuck() time.Duration  { return cmp.Or(s.Timeouts.Stuck.Duration, DefaultStuck) }
func (s *Spec) perDependent() int {
	switch {
	case !s.hasProbe():
		return 0 // no external service: nothing to count
	case s.Dependents.External == nil:
		return 1
	}
	return *s.Dependents.External
}
func (s *Spec) hasProbe() bool  { return len(s.Probe.Command) > 0 || s.Probe.Func != nil }
func (s *Spec) hasParent() bool { return s.Parent.Object != "" }
func (s *Spec) hasSecret() bool { return s.hasParent() && s.Parent.Secret != "" }
func (s *Spec) childrenPer() int {
	if s.Results == nil {
		return 0
	}
	return cmp.Or(s.Results.Children.PerDependent, 1)
}
func (s *Spec) namespacePrefix() string {
	if s.Namespace == "" {
		return DefaultNamespace
	}
	return s.Namespace
}

// usesCacheKubeconfig reports whether the operator can be given a second
// kubeconfig for its cache (its command or environment name
// CacheKubeconfig), or is in-process (it gets both configs).
func (s *Spec) usesCacheKubeconfig() bool {
	if s.Operator.Start != nil {
		return true
	}
	for _, a := range s.Operator.Command {
		if strings.Contains(a, ".CacheKubeconfig") {
			return true
		}
	}
	for _, a := range s.Operator.Env {
		if strings.Contains(a, ".CacheKubeconfig") {
			return true
		}
	}
	return false
}
